"""`python -m mallory.pyinstrument [options] [-- program.py ARGS | -m module ARGS]`

    --annotated DIR       sources with `# INSTRUMENT_*` comments (repeatable)
    --trace NAME[=LABEL]  a function to trace in code you do not own (repeatable)
    --trace-file FILE     one `NAME [LABEL]` a line (repeatable)
    --catalogue OUT       write the catalogue (id -> file, line, function, kind, label) first;
                          without a program that is all it does

The program runs as `python program.py ARGS` would, in this process, with the hooks in
place when MALLORY_SHM names the node's ring; without MALLORY_SHM it runs plain (but for
--catalogue, which imports the traced modules and leaves hooks in them that do nothing).
"""

from __future__ import annotations

import argparse
import sys

from mallory.errors import ExitCode, MalloryError
from mallory.instrument.catalogue import Catalogue, CodeEvent
from mallory.pyinstrument.hooks import Instrumenter, run_program
from mallory.pyinstrument.runtime import writer_from_env
from mallory.pyinstrument.tracing import TraceTarget, read_trace_file


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m mallory.pyinstrument",
                                description="Run a Python program with Mallory code events (MALLORY_SHM).")
    p.add_argument("--annotated", action="append", default=[], metavar="DIR",
                   help="directory of sources with # INSTRUMENT_FUNC / # INSTRUMENT_BLOCK comments")
    p.add_argument("--trace", action="append", default=[], metavar="NAME[=LABEL]",
                   help="qualified name of a function to trace, e.g. pysyncobj.syncobj.SyncObj.__onBecomeLeader")
    p.add_argument("--trace-file", action="append", default=[], metavar="FILE", help="a list of names to trace")
    p.add_argument("--catalogue", metavar="OUT", help="write the catalogue of every event to OUT")
    p.add_argument("-m", dest="module", metavar="MODULE", help="run a module as __main__ instead of a script")
    p.add_argument("program", nargs=argparse.REMAINDER, help="[--] program.py ARGS (or ARGS of -m MODULE)")
    return p


def catalogue_of(instrumenter: Instrumenter) -> Catalogue:
    return Catalogue(CodeEvent(s.id, s.relpath, s.line, s.function, s.kind.name, s.label) for s in instrumenter.sites.values())


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    rest = args.program[1:] if args.program[:1] == ["--"] else args.program
    if args.module is None and not rest and not args.catalogue:
        parser().error("nothing to do: give a program to run, -m MODULE, or --catalogue OUT")
    targets = [TraceTarget.parse(t) for t in args.trace]
    for path in args.trace_file:
        targets += read_trace_file(path)
    try:
        writer = writer_from_env()
    except MalloryError as exc:
        print(f"mallory.pyinstrument: {exc}; running without code events", file=sys.stderr)
        writer = None
    instrumenter = None
    if writer is not None or args.catalogue:
        instrumenter = Instrumenter(args.annotated, targets, writer.emitter if writer else None)
        instrumenter.install()
    if args.catalogue:
        assert instrumenter is not None
        instrumenter.scan_annotated()
        instrumenter.resolve_all()
        try:
            catalogue_of(instrumenter).write(args.catalogue)
        except OSError as exc:
            if args.module is None and not rest:
                raise MalloryError(f"cannot write the catalogue {args.catalogue}: {exc.strerror}") from None
            print(f"mallory.pyinstrument: cannot write the catalogue {args.catalogue}: {exc.strerror}", file=sys.stderr)
    if args.module is not None:
        run_program(args.module, rest, module=True, instrumenter=instrumenter)
    elif rest:
        run_program(rest[0], rest[1:], instrumenter=instrumenter)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except MalloryError as exc:
        print(f"mallory.pyinstrument: error: {exc}", file=sys.stderr)
        sys.exit(ExitCode.BAD_INPUT)
