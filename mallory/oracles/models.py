"""Sequential specifications for the linearizability checker, and how history calls map onto them.

A model turns each `Call` of a history into a `LinOp` (input, output, call/return
positions) or drops it, and steps a hashable state: `step(state, input, output) ->
(ok, new_state)`. `UNKNOWN` as an output matches anything the op could have returned.

Completion semantics follow Knossos (FORMATS.md 4) for EDN/JSON histories: `:fail` ops
are dropped, `:info` and never-completed ops stay open forever (they may take effect at
any point after their invocation, or never), an ok read of nil is a wildcard. The
`etcd` flavour follows Porcupine's etcdModel (FORMATS.md 6.2): a failed CAS observed a
mismatch, a failed read is unknown, an ok read of nil means "absent".
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass
from typing import Any

from mallory.errors import MalloryError
from mallory.history.ops import Call

INF = float("inf")


class _Unknown:
    __slots__ = ()

    def __repr__(self) -> str:
        return "unknown"


UNKNOWN: Any = _Unknown()


@dataclass(slots=True)
class LinOp:
    id: int
    call: float  # invoke position
    ret: float  # completion position, INF when open
    input: Any
    output: Any
    source: Call
    key: Hashable = None  # partition key (kv), None for single-object models


class ModelError(MalloryError):
    """A history op that the chosen model cannot interpret."""


def _where(call: Call) -> str:
    op = call.invoke
    return f"line {op.line}" if op.line is not None else f"op {op.index}"


def _freeze(value: Any) -> Any:
    """A hashable stand-in for a value: states are memoised in a set."""
    if isinstance(value, (list, tuple)):
        return tuple(_freeze(v) for v in value)
    if isinstance(value, dict):
        return tuple(sorted(((_freeze(k), _freeze(v)) for k, v in value.items()), key=repr))
    if isinstance(value, (set, frozenset)):
        return frozenset(_freeze(v) for v in value)
    return value


class Model:
    name = "model"
    initial: Hashable = None

    def to_lin_op(self, call: Call, i: int) -> LinOp | None:
        raise NotImplementedError

    def step(self, state: Any, inp: Any, out: Any) -> tuple[bool, Any]:
        raise NotImplementedError

    def describe(self, op: LinOp) -> str:
        out = "" if op.output is None else f" -> {op.output!r}"
        return f"{op.input!r}{out}"

    def lin_ops(self, calls: list[Call]) -> list[LinOp]:
        ops = []
        for call in calls:
            op = self.to_lin_op(call, len(ops))
            if op is not None:
                ops.append(op)
        return ops


class CasRegister(Model):
    """A register with read, write and compare-and-set. `flavor` "knossos" or "etcd"."""

    name = "cas-register"

    def __init__(self, initial: Any = None, flavor: str = "knossos") -> None:
        if isinstance(initial, (dict, set, frozenset)):
            raise ModelError(f"a {self.name} initial value must be a single value, got {initial!r}")
        self.initial = _freeze(initial)
        self.flavor = flavor

    def to_lin_op(self, call: Call, i: int) -> LinOp | None:
        f, status = call.f, call.status
        etcd = self.flavor == "etcd"
        if status == "fail" and not (etcd and f in ("cas", "read")):
            return None
        if f == "read":
            if status == "info":
                return None  # an unfinished read has no effect and observed nothing
            value = call.done.value if call.done is not None else None
            if status == "fail" or (value is None and not etcd):
                out = UNKNOWN
            else:
                out = _freeze(value)
            return LinOp(i, call.start, call.end, ("read",), out, call)
        if f == "write":
            ret = call.end if status == "ok" else INF
            return LinOp(i, call.start, ret, ("write", _freeze(call.invoke.value)), None, call)
        if f == "cas":
            v = call.invoke.value
            if not (isinstance(v, list) and len(v) == 2):
                raise ModelError(f"{_where(call)}: a cas needs [old new], got {v!r}")
            if status == "ok":
                out, ret = True, call.end
            elif status == "fail":
                out, ret = False, call.end
            else:
                out, ret = UNKNOWN, INF
            return LinOp(i, call.start, ret, ("cas", _freeze(v[0]), _freeze(v[1])), out, call)
        raise ModelError(f"{_where(call)}: the {self.name} model has no operation {f!r}")

    def step(self, state: Any, inp: Any, out: Any) -> tuple[bool, Any]:
        kind = inp[0]
        if kind == "read":
            return (out is UNKNOWN or out == state), state
        if kind == "write":
            return True, inp[1]
        # cas
        if out is UNKNOWN:
            return True, (inp[2] if state == inp[1] else state)
        if out:
            return state == inp[1], inp[2]
        return state != inp[1], state

    def describe(self, op: LinOp) -> str:
        kind = op.input[0]
        if kind == "read":
            return f"read -> {'?' if op.output is UNKNOWN else repr(op.output)}"
        if kind == "write":
            return f"write {op.input[1]!r}"
        res = {True: "ok", False: "failed"}.get(op.output, "?") if op.output is not UNKNOWN else "?"
        return f"cas {op.input[1]!r}->{op.input[2]!r} ({res})"


class Register(CasRegister):
    """Read/write register: a cas-register without cas."""

    name = "register"

    def to_lin_op(self, call: Call, i: int) -> LinOp | None:
        if call.f == "cas":
            raise ModelError(f"{_where(call)}: the register model has no cas; use cas-register")
        return super().to_lin_op(call, i)


class Mutex(Model):
    """A lock: acquire when free, release when held. State: locked?"""

    name = "mutex"
    initial = False

    def to_lin_op(self, call: Call, i: int) -> LinOp | None:
        if call.f not in ("acquire", "release"):
            raise ModelError(f"{_where(call)}: the mutex model has no operation {call.f!r}")
        if call.status == "fail":
            return None
        ret = call.end if call.status == "ok" else INF
        return LinOp(i, call.start, ret, (str(call.f),), None, call)

    def step(self, state: Any, inp: Any, out: Any) -> tuple[bool, Any]:
        if inp[0] == "acquire":
            return (not state), True
        return bool(state), False

    def describe(self, op: LinOp) -> str:
        return op.input[0]


class KV(Model):
    """A string key-value store (Porcupine's kvModel): get, put, append; each key is
    independent, so the checker partitions by key (P-compositionality)."""

    name = "kv"
    initial = ""

    def __init__(self, initial: Any = "") -> None:
        if not isinstance(initial, str):
            raise ModelError(f"the kv model's initial value must be a string, got {initial!r}")
        self.initial = initial

    def to_lin_op(self, call: Call, i: int) -> LinOp | None:
        f = call.f
        v = call.invoke.value
        if not (isinstance(v, list) and len(v) == 2):
            raise ModelError(f"{_where(call)}: a kv op's value must be [key value], got {v!r}")
        key = _freeze(v[0])
        if call.status == "fail":
            return None
        if f == "get":
            if call.status != "ok":
                return None
            done = call.done.value if call.done is not None else None
            out = done[1] if isinstance(done, list) and len(done) == 2 else done
            return LinOp(i, call.start, call.end, ("get",), _freeze(out), call, key)
        if f in ("put", "append"):
            if not isinstance(v[1], str):
                raise ModelError(f"{_where(call)}: the kv model stores strings, got {v[1]!r}")
            ret = call.end if call.status == "ok" else INF
            return LinOp(i, call.start, ret, (str(f), _freeze(v[1])), None, call, key)
        raise ModelError(f"{_where(call)}: the kv model has no operation {f!r}")

    def step(self, state: Any, inp: Any, out: Any) -> tuple[bool, Any]:
        kind = inp[0]
        if kind == "get":
            return (out is UNKNOWN or out == state), state
        if kind == "put":
            return True, inp[1]
        return True, state + inp[1]

    def describe(self, op: LinOp) -> str:
        if op.input[0] == "get":
            return f"get {op.key!r} -> {op.output!r}"
        return f"{op.input[0]} {op.key!r} {op.input[1]!r}"


class MultiRegister(Model):
    """Knossos' multi-register: a txn of [:read k v] / [:write k v] applied atomically.
    State: a sorted tuple of (key, value); a read of nil is a wildcard. A key absent from
    `initial` starts at `default` (0, as in Knossos' multi-register tests)."""

    name = "multi-register"

    def __init__(self, initial: dict[Any, Any] | None = None, default: Any = 0) -> None:
        self.initial = tuple(sorted(((_freeze(k), _freeze(v)) for k, v in (initial or {}).items()), key=repr))
        self.default = default

    def to_lin_op(self, call: Call, i: int) -> LinOp | None:
        if call.status == "fail":
            return None
        txn = call.value if call.status == "ok" else call.invoke.value
        if not isinstance(txn, list):
            raise ModelError(f"{_where(call)}: a multi-register txn must be a list of micro-ops")
        mops = []
        for mop in txn:
            if not (isinstance(mop, list) and len(mop) == 3 and mop[0] in ("read", "write", "r", "w")):
                raise ModelError(f"{_where(call)}: bad micro-op {mop!r}")
            kind = "read" if mop[0] in ("read", "r") else "write"
            if kind == "read" and call.status != "ok":
                continue
            mops.append((kind, _freeze(mop[1]), _freeze(mop[2])))
        if not mops:
            return None
        ret = call.end if call.status == "ok" else INF
        return LinOp(i, call.start, ret, tuple(mops), None, call)

    def step(self, state: Any, inp: Any, out: Any) -> tuple[bool, Any]:
        current = dict(state)
        for kind, k, v in inp:
            if kind == "read":
                if v is not None and current.get(k, self.default) != v:
                    return False, state
            else:
                current[k] = v
        return True, tuple(sorted(current.items(), key=repr))


MODELS = ("register", "cas-register", "mutex", "kv", "multi-register")


def make_model(name: str, initial: Any = None, flavor: str = "knossos") -> Model:
    if name == "cas-register":
        return CasRegister(initial, flavor)
    if name == "register":
        return Register(initial, flavor)
    if name == "mutex":
        return Mutex()
    if name == "kv":
        return KV("" if initial is None else initial)
    if name == "multi-register":
        return MultiRegister(initial if isinstance(initial, dict) else None)
    raise MalloryError(f"unknown linearizability model {name!r}; known: {', '.join(MODELS)}")
