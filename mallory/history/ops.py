"""The history model: the one `Op` the harness records and every checker reads, and the
readers and writers of its on-disk formats.

A history is a list of `Op` events in real-time order (file order): Jepsen's invoke, then
ok / fail / info. `pair_calls` turns the events into `Call`s (an invocation and its
completion, or none). Formats (shared/conformance/FORMATS.md):

- `edn`: Jepsen `history.edn`, a stream of op maps or one vector/list of them;
- `json`: elle-cli's JSON array of op objects, or JSON lines (one object per line, what
  the harness writes next to history.edn);
- `porcupine-etcd`: Jepsen `jepsen.util` log lines of a single-key etcd register;
- `porcupine-kv`: Porcupine's kv lines (`{:process P, :type T, :f F, :key "K", :value V}`);
  each op's value becomes `[key, value]`, Jepsen's independent-key tuple.

Keyword-valued fields (`type`, `f`, a mop's first element) are normalised to `Keyword` so
EDN and JSON histories of the same ops are equal.

Writing: `Op.to_edn` and `Op.to_json` are the only encodings of an op. `edn_line` and
`json_line` frame one op as a line of history.edn / history.jsonl (the harness's recorder
appends them as ops happen); `write_edn` and `write_jsonl` write a whole history.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Literal

import orjson

from mallory.errors import MalloryError
from mallory.history import edn
from mallory.history.edn import Keyword

OpType = Literal["invoke", "ok", "fail", "info"]
TYPES: tuple[OpType, ...] = ("invoke", "ok", "fail", "info")
FORMATS = ("edn", "json", "porcupine-etcd", "porcupine-kv")
#: the process of fault events, as Jepsen writes them
NEMESIS = Keyword("nemesis")


class HistoryError(MalloryError):
    """A history that cannot be read: the message names file and line."""


@dataclass(slots=True)
class Op:
    """One history event.

    index:   position in the history (dense, assigned in file order when absent).
    process: an int for client processes; `NEMESIS` or any non-int for fault events.
    type:    "invoke" | "ok" | "fail" | "info" (a `Keyword`).
    f:       the operation ("txn", "read", "write", "cas", ...), None when absent.
    value:   workload-specific (a txn is a list of [f k v] micro-ops).
    time:    ns since the history started, informational only: real-time order is list order.
    error:   why the op failed or may have (Jepsen's :error), None when it says nothing.
    line:    the source line it was read from, for error messages and explanations; not
             part of the op, so it takes no part in equality.
    extra:   the op map's other fields, written back after the ones above.

    An op is written as the `Keyword`s it is read back as: a plain `str` type, f or process
    is written as a keyword, so a recorded op equals its reading back from either format.
    """

    index: int
    process: Any
    type: str
    f: Any = None
    value: Any = None
    time: int | None = None
    error: Any = None
    line: int | None = field(default=None, compare=False)
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def is_client(self) -> bool:
        """A client's op (an int process), not a fault event."""
        return self.process is None or type(self.process) is int

    def fields(self) -> dict[str, Any]:
        """The op map's fields by name, in Jepsen's usual order: absent time, f and error
        left out; type, and f and process when they are plain strings, as `Keyword`s."""
        out: dict[str, Any] = {"index": self.index}
        if self.time is not None:
            out["time"] = self.time
        out["type"] = Keyword(self.type)
        out["process"] = _kw(self.process)
        if self.f is not None:
            out["f"] = Keyword(self.f) if isinstance(self.f, str) else self.f
        out["value"] = self.value
        if self.error is not None:
            out["error"] = self.error
        out.update(self.extra)
        return out

    def to_map(self) -> dict[str, Any]:
        """Jepsen's op map: `fields` with keyword keys."""
        return {Keyword(k): v for k, v in self.fields().items()}

    def to_edn(self) -> str:
        """The op map as one line of EDN (no newline): a line of Jepsen's history.edn."""
        return edn.dumps(self.to_map())

    def to_json(self) -> dict[str, Any]:
        """The op as a JSON object with elle-cli's field names ("index", "type", ...):
        keywords become plain strings, map keys strings, sets lists sorted by repr."""
        return _jsonable(self.fields())


@dataclass(slots=True)
class Call:
    """An invocation and its completion. `done` is None when it never completed."""

    invoke: Op
    done: Op | None
    start: int  # position of the invoke event
    end: int  # position of the completion, or len(history) when none

    @property
    def status(self) -> str:
        """ok / fail / info; a never-completed call counts as info."""
        return "info" if self.done is None else str(self.done.type)

    @property
    def process(self) -> Any:
        return self.invoke.process

    @property
    def f(self) -> Any:
        return self.invoke.f

    @property
    def value(self) -> Any:
        """The completion's value when it has one (reads are filled in), else the invoke's."""
        if self.done is not None and (self.done.value is not None or self.done.type == "ok"):
            return self.done.value
        return self.invoke.value


def _kw(value: Any) -> Any:
    return Keyword(value) if type(value) is str else value


def _normalise_txn(value: Any) -> Any:
    """Keyword-ise the first element of each micro-op, as elle-cli does for JSON."""
    if isinstance(value, list) and value and all(isinstance(m, list) and m for m in value):
        return [[_kw(m[0]), *m[1:]] for m in value]
    return value


_FIELDS = {"index", "process", "type", "f", "value", "time", "error"}


def op_from_map(m: Any, position: int, line: int | None, source: str) -> Op:
    """Build an Op from an EDN/JSON op map; `position` is its place in the file."""
    where = f"{source}:{line}" if line is not None else source
    if not isinstance(m, dict):
        raise HistoryError(f"{where}: expected an op map, got {type(m).__name__}")
    typ = m.get("type")
    if typ not in TYPES:
        raise HistoryError(f"{where}: op :type must be one of {', '.join(TYPES)}, got {typ!r}")
    index = m.get("index", position)
    if type(index) is not int:
        raise HistoryError(f"{where}: op :index must be an integer, got {index!r}")
    time = m.get("time")
    if time is not None and type(time) not in (int, float):
        raise HistoryError(f"{where}: op :time must be a number, got {time!r}")
    process = m.get("process")
    if type(process) is str:
        process = Keyword(process)
    f = _kw(m.get("f"))
    value = m.get("value")
    if f is None or f == "txn":
        value = _normalise_txn(value)
    extra = {str(k): v for k, v in m.items() if k not in _FIELDS}
    return Op(index, process, Keyword(typ), f, value, time, m.get("error"), line, extra)


def _dense(ops: list[Op]) -> list[Op]:
    """Assign dense indices when the source's are sparse or duplicated; keep file order."""
    if any(op.index != i for i, op in enumerate(ops)):
        for i, op in enumerate(ops):
            if op.index != i:
                op.extra.setdefault("source-index", op.index)
                op.index = i
    return ops


def read_edn(text: str, source: str = "<edn>") -> list[Op]:
    child_lines: list[int] = []
    forms = list(edn.iter_forms(text, source, child_lines))
    if len(forms) == 1 and isinstance(forms[0][1], list):
        items = list(zip(child_lines, forms[0][1]))
    else:
        items = forms
    return _dense([op_from_map(m, i, line, source) for i, (line, m) in enumerate(items)])


def read_json(text: str, source: str = "<json>") -> list[Op]:
    """elle-cli's JSON array, or JSON lines."""
    stripped = text.lstrip()
    ops: list[Op] = []
    if stripped.startswith("["):
        try:
            items = orjson.loads(text)
        except orjson.JSONDecodeError as exc:
            line = text.count("\n", 0, exc.pos) + 1
            raise HistoryError(f"{source}:{line}: malformed JSON: {exc.msg}") from None
        if not isinstance(items, list):
            raise HistoryError(f"{source}: expected a JSON array of ops")
        for i, m in enumerate(items):
            ops.append(op_from_map(m, i, None, source))
        return _dense(ops)
    for lineno, raw in enumerate(text.splitlines(), 1):
        if not raw.strip():
            continue
        try:
            m = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            raise HistoryError(f"{source}:{lineno}: malformed JSON: {exc.msg}") from None
        ops.append(op_from_map(m, len(ops), lineno, source))
    return _dense(ops)


_ETCD_LINE = re.compile(
    r"INFO\s+jepsen\.util\s+-\s+(\d+)\s+:(invoke|ok|fail|info)\s+:(read|write|cas)\s+(.*?)\s*$"
)
_ETCD_CAS = re.compile(r"\[\s*(-?\d+)\s+(-?\d+)\s*\]$")


def _etcd_value(raw: str, where: str) -> Any:
    if raw == "nil":
        return None
    if raw.startswith(":"):
        return Keyword(raw[1:])
    if re.fullmatch(r"-?\d+", raw):
        return int(raw)
    m = _ETCD_CAS.match(raw)
    if m:
        return [int(m.group(1)), int(m.group(2))]
    raise HistoryError(f"{where}: unreadable value {raw!r}")


def read_porcupine_etcd(text: str, source: str = "<etcd-log>") -> list[Op]:
    ops: list[Op] = []
    for lineno, raw in enumerate(text.splitlines(), 1):
        if not raw.strip():
            continue
        m = _ETCD_LINE.match(raw)
        where = f"{source}:{lineno}"
        if m is None:
            raise HistoryError(f"{where}: not a jepsen.util op line: {raw[:80]!r}")
        proc, typ, f, val = m.groups()
        ops.append(Op(len(ops), int(proc), Keyword(typ), Keyword(f), _etcd_value(val, where), None, None, lineno))
    return ops


def read_porcupine_kv(text: str, source: str = "<kv>") -> list[Op]:
    ops: list[Op] = []
    for line, m in edn.iter_forms(text, source):
        op = op_from_map(m, len(ops), line, source)
        if "key" not in op.extra:
            raise HistoryError(f"{source}:{line}: a kv op needs a :key")
        op.value = [op.extra.pop("key"), op.value]
        ops.append(op)
    return ops


_READERS = {
    "edn": read_edn,
    "json": read_json,
    "porcupine-etcd": read_porcupine_etcd,
    "porcupine-kv": read_porcupine_kv,
}


def detect_format(text: str) -> str:
    """Guess the format from the first meaningful characters."""
    body = text.lstrip()
    while body.startswith(";"):
        body = body.split("\n", 1)[1].lstrip() if "\n" in body else ""
    if body.startswith("INFO"):
        return "porcupine-etcd"
    if body.startswith('{"') or body.startswith('[{"') or body.startswith('[\n{"') or re.match(r'\[\s*\{\s*"', body):
        return "json"
    if body.startswith("[") and re.match(r"\[\s*\]", body):
        return "json"
    first_line = body.split("\n", 1)[0]
    if body.startswith("{") and re.search(r":key\s", first_line):
        return "porcupine-kv"
    return "edn"


def read_history_text(text: str, fmt: str = "auto", source: str = "<history>") -> tuple[str, list[Op]]:
    """(format used, ops) for history text."""
    if fmt == "auto":
        fmt = detect_format(text)
    if fmt not in _READERS:
        raise HistoryError(f"unknown history format {fmt!r}; known: {', '.join(FORMATS)}")
    return fmt, _READERS[fmt](text, source)


def read_history(path: str | Path, fmt: str = "auto") -> tuple[str, list[Op]]:
    """(format used, ops) for a history file."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise HistoryError(f"{p}: cannot read: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise HistoryError(f"{p}: not UTF-8 text") from None
    return read_history_text(text, fmt, str(p))


def pair_calls(ops: Iterable[Op], clients_only: bool = True, source: str = "<history>") -> list[Call]:
    """Match every invoke with its process's next completion, in invocation order.

    Raises HistoryError for a second invoke on a process with an open op, or a completion
    with no open invoke (Knossos rejects both).
    """
    ops = list(ops)
    open_: dict[Any, int] = {}
    calls: list[Call | None] = []
    for pos, op in enumerate(ops):
        if clients_only and not op.is_client:
            continue
        where = f"{source}:{op.line}" if op.line is not None else f"{source}: op {op.index}"
        if op.type == "invoke":
            if op.process in open_:
                prev = calls[open_[op.process]]
                assert prev is not None
                raise HistoryError(
                    f"{where}: process {op.process!r} invokes again while its op {prev.invoke.index} is still open"
                )
            open_[op.process] = len(calls)
            calls.append(Call(op, None, pos, len(ops)))
        else:
            slot = open_.pop(op.process, None)
            if slot is None:
                raise HistoryError(f"{where}: {op.type} completion on process {op.process!r} with no open invoke")
            call = calls[slot]
            assert call is not None
            call.done = op
            call.end = pos
    return [c for c in calls if c is not None]


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k) if not isinstance(k, str) else str.__str__(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, (set, frozenset)):
        return [_jsonable(v) for v in sorted(value, key=repr)]
    if isinstance(value, str):
        return str.__str__(value)
    return value


def edn_line(op: Op) -> bytes:
    """One line of Jepsen's history.edn: the op's EDN map and a newline, UTF-8."""
    return op.to_edn().encode("utf-8") + b"\n"


def json_line(op: Op) -> bytes:
    """One line of history.jsonl: `op.to_json()` and a newline."""
    try:  # orjson alone writes what JSON holds as it is (keywords as strings), 10x faster
        return orjson.dumps(op.fields(), option=orjson.OPT_APPEND_NEWLINE)
    except TypeError:  # a set, or a map key that is not a plain string: the slow, general way
        return orjson.dumps(op.to_json(), option=orjson.OPT_APPEND_NEWLINE)


def write_edn(ops: Iterable[Op], stream: IO[str]) -> None:
    """Jepsen's history.edn: one op map per line (each line as `edn_line` encodes it)."""
    for op in ops:
        stream.write(op.to_edn())
        stream.write("\n")


def write_jsonl(ops: Iterable[Op], stream: IO[bytes]) -> None:
    """JSON lines: one op object per line, keyword values as plain strings."""
    for op in ops:
        stream.write(json_line(op))
