"""`mallory check HISTORY`: check a recorded history, like `jepsen analyze` / elle-cli.

Reads Jepsen EDN, elle-cli JSON (or JSON lines), Porcupine etcd logs or Porcupine kv
lines, runs the chosen (or inferred) checker, prints the verdict and its explanation, and
exits 0 valid, 1 invalid, 2 unknown, as Jepsen's CLI does. A malformed history is a
MalloryError naming the line (exit 254).
"""

from __future__ import annotations

import argparse
import sys

import orjson

from mallory.errors import MalloryError
from mallory.history import edn
from mallory.history.ops import FORMATS, read_history
from mallory.oracles.check import CHECKERS, CheckOptions, check_history

NAME = "check"
HELP = "check a history (Jepsen EDN, elle-cli JSON, Porcupine logs): exit 0 valid, 1 invalid, 2 unknown"


def _names(values: list[str] | None) -> tuple[str, ...]:
    out: list[str] = []
    for v in values or ():
        out.extend(x.strip().lstrip(":") for x in v.replace(",", " ").split() if x.strip())
    return tuple(out)


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("history", help="the history file")
    parser.add_argument("--format", choices=("auto",) + FORMATS, default="auto",
                        help="history format (default: detected from the content)")
    parser.add_argument("--checker", choices=("auto",) + CHECKERS, default="auto",
                        help="checker / model (default: inferred from the operations)")
    parser.add_argument("--consistency-models", action="append", metavar="MODEL[,MODEL...]",
                        help="models expected to hold (transactional checkers; default strict-serializable); "
                             "comma-separated or repeated")
    parser.add_argument("--anomalies", action="append", metavar="ANOMALY[,ANOMALY...]",
                        help="extra anomalies to look for (transactional checkers), e.g. G0; "
                             "comma-separated or repeated")
    parser.add_argument("--time-limit", type=float, metavar="S",
                        help="search budget in seconds; past it the verdict is unknown")
    parser.add_argument("--max-states", type=int, default=None,
                        help="linearizability: memoised-state cap before answering unknown")
    parser.add_argument("--initial", help="linearizability: the model's initial state, as EDN (e.g. 0, nil, {:x 0}); "
                        "default nil for registers, \"\" for kv, every key 0 for multi-register")
    parser.add_argument("--wfr-keys", action="store_true", help="rw-register: writes follow reads in a txn")
    parser.add_argument("--sequential-keys", action="store_true", help="rw-register: process order orders versions")
    parser.add_argument("--linearizable-keys", action="store_true", help="rw-register: real time orders versions")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")


def run(args: argparse.Namespace) -> int:
    fmt, ops = read_history(args.history, args.format)
    initial = None
    if args.initial is not None:
        try:
            initial = edn.loads(args.initial, "--initial")
        except MalloryError as exc:
            raise MalloryError(f"--initial is not EDN: {exc}") from None
    opts = CheckOptions(
        checker=args.checker,
        consistency_models=_names(args.consistency_models) or ("strict-serializable",),
        anomalies=_names(args.anomalies),
        time_limit=args.time_limit,
        initial=initial,
        wfr_keys=args.wfr_keys,
        sequential_keys=args.sequential_keys,
        linearizable_keys=args.linearizable_keys,
    )
    if args.max_states is not None:
        opts.max_states = args.max_states
    result = check_history(ops, fmt, opts, args.history)
    if args.json:
        sys.stdout.buffer.write(orjson.dumps(result.to_json(), default=repr, option=orjson.OPT_INDENT_2))
        sys.stdout.buffer.write(b"\n")
    else:
        print(result.render())
    return result.exit_code
