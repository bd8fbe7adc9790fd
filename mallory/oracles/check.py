"""One entry point for every history checker: pick the checker (or infer it), run it.

Used by `mallory check`, the harness and the tests. Checkers:

- `list-append`, `rw-register`: the Elle-style transactional checker (`elle.check_elle`);
- `register`, `cas-register`, `mutex`, `kv`, `multi-register`: linearizability
  (`linearizability.py`) against the model of that name.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

from mallory.errors import MalloryError
from mallory.history.ops import Op
from mallory.oracles.elle import ElleOptions, check_elle
from mallory.oracles.linearizability import DEFAULT_MAX_STATES, check_linearizable
from mallory.oracles.models import make_model
from mallory.oracles.result import CheckResult

TRANSACTIONAL = ("list-append", "rw-register")
LINEARIZABLE = ("register", "cas-register", "mutex", "kv", "multi-register")
CHECKERS = TRANSACTIONAL + LINEARIZABLE


@dataclass
class CheckOptions:
    checker: str = "auto"
    consistency_models: tuple[str, ...] = ("strict-serializable",)
    anomalies: tuple[str, ...] = ()
    time_limit: float | None = None
    max_states: int = DEFAULT_MAX_STATES
    initial: Any = None
    wfr_keys: bool = False
    sequential_keys: bool = False
    linearizable_keys: bool = False


def infer_checker(ops: list[Op], fmt: str) -> str:
    """Guess the workload from the history's ops (and format)."""
    if fmt == "porcupine-etcd":
        return "cas-register"
    if fmt == "porcupine-kv":
        return "kv"
    fs = Counter(str(op.f) if op.f is not None else "txn" for op in ops if op.is_client)
    if not fs:
        raise MalloryError("cannot infer the checker: the history has no client operations; pass --checker")
    if fs.keys() <= {"txn"}:
        mop_fs = Counter(
            str(m[0]) for op in ops if op.is_client and isinstance(op.value, list)
            for m in op.value if isinstance(m, list) and m
        )
        if "append" in mop_fs:
            return "list-append"
        if mop_fs.keys() & {"read", "write"}:
            return "multi-register"
        if mop_fs.keys() & {"w", "r"}:
            return "rw-register"
        raise MalloryError("cannot infer the checker from transactions with micro-ops "
                           f"{sorted(mop_fs)}; pass --checker")
    if fs.keys() <= {"acquire", "release"}:
        return "mutex"
    if fs.keys() <= {"get", "put", "append"}:
        return "kv"
    if fs.keys() <= {"read", "write", "cas"}:
        return "cas-register" if "cas" in fs else "register"
    raise MalloryError(f"cannot infer the checker from operations {sorted(fs)}; pass --checker")


def check_history(ops: list[Op], fmt: str = "edn", opts: CheckOptions | None = None,
                  source: str = "<history>") -> CheckResult:
    opts = opts or CheckOptions()
    checker = infer_checker(ops, fmt) if opts.checker == "auto" else opts.checker
    if checker not in CHECKERS:
        raise MalloryError(f"unknown checker {checker!r}; known: {', '.join(CHECKERS)}")
    if checker in TRANSACTIONAL:
        elle_opts = ElleOptions(
            consistency_models=tuple(opts.consistency_models),
            anomalies=tuple(opts.anomalies),
            time_limit=opts.time_limit,
            wfr_keys=opts.wfr_keys,
            sequential_keys=opts.sequential_keys,
            linearizable_keys=opts.linearizable_keys,
        )
        return check_elle(ops, checker, elle_opts, source)
    flavor = "etcd" if fmt == "porcupine-etcd" else "knossos"
    model = make_model(checker, opts.initial, flavor)
    return check_linearizable(ops, model, time_limit=opts.time_limit, max_states=opts.max_states, source=source)
