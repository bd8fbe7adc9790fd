"""The `mallory` command line.

Each subcommand lives in its own module under `mallory/commands/` and exposes:

    NAME: str                       # the subcommand word
    HELP: str                       # one line for `mallory --help`
    def configure(parser) -> None   # add its arguments to an argparse parser
    def run(args) -> int            # do the work, return ExitCode.OK, FAILED or UNKNOWN

Modules are discovered, so adding a command never means editing this file. Options before
the command are the CLI's own: `--log-level`/`-v` (mallory's `logging`). `main` maps
every other outcome to its exit code (mallory/errors.py `ExitCode`), here and nowhere else:
a usage error or a MalloryError is BAD_INPUT, any other exception INTERNAL_ERROR with its
traceback, Ctrl-C INTERRUPTED.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import logging
import pkgutil
import sys
import traceback
from types import ModuleType
from typing import NoReturn

import mallory.commands
from mallory import __version__
from mallory.errors import ExitCode, MalloryError


def _command_modules(word: str | None = None) -> list[ModuleType]:
    """Every command's module; with `word`, the module of that command alone when it has one
    (a module is named as its command). A process then loads only what its own command needs:
    an observer, one in every node, stays at ~20 MB instead of ~95 MB with numpy, scipy and
    datasketch that other commands import."""
    names = [info.name for info in pkgutil.iter_modules(mallory.commands.__path__) if not info.name.startswith("_")]
    if word in names:
        names = [word]
    modules = []
    for name in names:
        module = importlib.import_module(f"mallory.commands.{name}")
        if hasattr(module, "NAME") and hasattr(module, "run"):
            modules.append(module)
    return sorted(modules, key=lambda m: m.NAME)


#: the epilog of `mallory --help`: what each exit code means (README has it per command)
EXIT_CODES_HELP = f"""exit codes (every command):
  {ExitCode.OK:<4} ok: done; check: valid; fuzz: no bug found; replay: the bug came back
  {ExitCode.FAILED:<4} check: invalid; fuzz: bugs found; replay, shrink: the bug did not come back
  {ExitCode.UNKNOWN:<4} check: unknown (the checker's budget ran out)
  {ExitCode.UNAVAILABLE:<4} fuzz: a part of the campaign died (the mediator); --resume continues
  {ExitCode.INTERRUPTED:<4} interrupted (Ctrl-C)
  {ExitCode.BAD_INPUT:<4} bad arguments or input (the message says what)
  {ExitCode.INTERNAL_ERROR:<4} internal error: a bug in Mallory (the traceback is printed)"""


class ArgumentParser(argparse.ArgumentParser):
    """argparse's parser, but a usage error exits BAD_INPUT, not argparse's 2: for `mallory
    check` 2 means "unknown"."""

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(ExitCode.BAD_INPUT, f"{self.prog}: error: {message}\n")


#: --log-level's choices, most to least said
LOG_LEVELS = ("debug", "info", "warning", "error")
#: the loggers whose records --log-level sets (other libraries' show from WARNING up)
OWN_LOGGERS = ("mallory", "nemesis")


class _Stderr(logging.Handler):
    """Writes each record to whatever sys.stderr is when it comes (tests swap it)."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            sys.stderr.write(self.format(record) + "\n")
            sys.stderr.flush()
        except Exception:
            self.handleError(record)


class _Formatter(logging.Formatter):
    """"12:00:01 message", with the level from warnings up and the logger's name at debug."""

    def format(self, record: logging.LogRecord) -> str:
        when = self.formatTime(record, "%H:%M:%S")
        text = super().format(record)
        if record.levelno >= logging.WARNING:
            return f"{when} {record.levelname.lower()}: {text}"
        return f"{when} {record.name}: {text}" if record.levelno < logging.INFO else f"{when} {text}"


_HANDLER = _Stderr()
_HANDLER.setFormatter(_Formatter())


def configure_logging(level: str) -> None:
    """Diagnostics and progress go through `logging` to stderr: Mallory's from `level` on,
    other libraries' from warning on. A command's own result is printed on stdout."""
    root = logging.getLogger()  # from WARNING up, as Python's default
    if _HANDLER not in root.handlers:
        root.addHandler(_HANDLER)
    for name in OWN_LOGGERS:
        logging.getLogger(name).setLevel(level.upper())


def command_word(argv: list[str]) -> str | None:
    """The command named in argv: its first argument that is neither an option of the CLI's
    own nor --log-level's value (None when there is none, as for `mallory --help`)."""
    args = iter(argv)
    for arg in args:
        if arg == "--log-level":
            next(args, None)
        elif not arg.startswith("-"):
            return arg
    return None


def build_parser(word: str | None = None) -> ArgumentParser:
    """The CLI's parser: with `word` (`command_word`), only that command's subparser when the
    command exists, else every command's (so a misspelt one is listed among the choices)."""
    parser = ArgumentParser(
        prog="mallory",
        description="Greybox fuzzer for distributed systems.",
        epilog=EXIT_CODES_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"mallory {__version__}")
    parser.add_argument("--log-level", choices=LOG_LEVELS, default="info",
                        help="how much progress and diagnostics to show on stderr (default info)")
    parser.add_argument("-v", "--verbose", dest="log_level", action="store_const", const="debug",
                        help="the same as --log-level debug")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for module in _command_modules(word):
        command = sub.add_parser(module.NAME, help=module.HELP, description=module.HELP)
        module.configure(command)
        command.set_defaults(_run=module.run)
    return parser


def tune_gc() -> None:
    """Collect generation 0 every 50,000 allocations instead of every 700.

    Mallory's hot paths (ingest, timeline, abstraction) allocate many short-lived, acyclic
    objects that reference counting frees; at the default threshold the cyclic collector
    spent a third of the timeline's time walking them (136k -> 188k events/s measured by
    bench/bench_timeline_throughput.py).
    """
    gc.set_threshold(50_000, 10, 10)


def main(argv: list[str] | None = None) -> int:
    """Run one command; its exit code (ExitCode)."""
    tune_gc()
    parser = build_parser(command_word(sys.argv[1:] if argv is None else argv))
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help, --version, a usage error: argparse exits
        return ExitCode.OK if exc.code is None else int(exc.code)
    if not hasattr(args, "_run"):
        parser.print_help(sys.stderr)
        return ExitCode.BAD_INPUT
    configure_logging(args.log_level)
    try:
        return int(args._run(args) or ExitCode.OK)
    except MalloryError as exc:
        print(f"mallory {args.command}: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print(f"mallory {args.command}: interrupted", file=sys.stderr)
        return ExitCode.INTERRUPTED
    except BrokenPipeError:
        return ExitCode.OK
    except Exception:
        traceback.print_exc()
        print(f"mallory {args.command}: internal error (a bug in Mallory: please report it with the traceback above)",
              file=sys.stderr)
        return ExitCode.INTERNAL_ERROR


if __name__ == "__main__":
    sys.exit(main())
