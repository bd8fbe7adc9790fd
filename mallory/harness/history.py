"""Recording a Jepsen-style history and writing it as it happens.

Every client operation is recorded twice: an `invoke` when the client starts it, and one
completion (`ok`, `fail` or `info`) when it returns. Nemesis actions are recorded as `info`
ops of the process `:nemesis`, as Jepsen does. `index` is dense from 0 in file order and
`time` is monotonic nanoseconds since the recorder started.

The ops are `mallory.history.ops.Op`s, the ones every checker reads, and two formats are
written side by side with its line encoders (`edn_line`, `json_line`), one op per line,
flushed after every op so a killed run loses at most the op in flight:

* `history.edn`: Jepsen's newline-delimited EDN op maps
  (`{:index 0, :time 12, :type :invoke, :process 0, :f :txn, :value [[:append 3 1]]}`);
* `history.jsonl`: the same ops as JSON objects with elle-cli's field names
  (`"type"`, `"f"`, `"process"`, `"value"`, `"index"`, `"time"`, `"error"`); keywords become
  strings, so a micro-op is `["append", 3, 1]`.
"""

from __future__ import annotations

import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any, Callable, Iterable, Iterator, Protocol

from mallory.history.edn import Keyword
from mallory.history.ops import NEMESIS, Op, OpType, edn_line, json_line


class HistorySink(Protocol):
    """Where recorded ops go, one `write` per op in index order, then `close` once."""

    def write(self, op: Op) -> None: ...
    def close(self) -> None: ...


class LineFileSink:
    """Appends one encoded line per op to a file, with one unbuffered write(2) per op, so a
    kill -9 of the harness loses nothing already recorded."""

    def __init__(self, path: Path, encode: Callable[[Op], bytes]) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._encode = encode
        self._file: IO[bytes] = open(self.path, "ab", buffering=0)

    def write(self, op: Op) -> None:
        self._file.write(self._encode(op))

    def close(self) -> None:
        self._file.close()


def edn_writer(path: Path) -> LineFileSink:
    """Writes Jepsen's history.edn."""
    return LineFileSink(path, edn_line)


def jsonl_writer(path: Path) -> LineFileSink:
    """Writes elle-cli JSON lines."""
    return LineFileSink(path, json_line)


class HistoryRecorder:
    """Thread-safe: client workers and the nemesis record into one history.

    Sinks see ops in index order. Listeners (e.g. a relay to the mediator) are called with
    each op after the sinks, under the same lock, so they also see index order; keep them fast.
    """

    def __init__(
        self,
        sinks: Iterable[HistorySink] = (),
        *,
        clock: Callable[[], int] = time.monotonic_ns,
        keep: bool = True,
    ) -> None:
        self._sinks = list(sinks)
        self._listeners: list[Callable[[Op], None]] = []
        self._clock = clock
        self._t0 = clock()
        self._last_time = 0
        self._lock = threading.Lock()
        self._ops: list[Op] | None = [] if keep else None
        self._next_index = 0
        self._open: dict[Any, Op] = {}

    @classmethod
    def to_dir(cls, directory: Path, *, keep: bool = True) -> "HistoryRecorder":
        """A recorder writing `history.edn` and `history.jsonl` into `directory`."""
        directory = Path(directory)
        return cls(
            [edn_writer(directory / "history.edn"), jsonl_writer(directory / "history.jsonl")],
            keep=keep,
        )

    def add_listener(self, listener: Callable[[Op], None]) -> None:
        with self._lock:
            self._listeners.append(listener)

    @property
    def ops(self) -> list[Op]:
        """The ops recorded so far (a copy); empty if the recorder was built with keep=False."""
        with self._lock:
            return list(self._ops or ())

    def elapsed_ns(self) -> int:
        """The recorder's time now, on the clock of its ops' `time` (never before the last op)."""
        with self._lock:
            return max(self._clock() - self._t0, self._last_time)

    def invoke(self, process: int, f: str, value: Any) -> Op:
        """Record that `process` starts op `f`. A process has at most one op in flight."""
        with self._lock:
            if process in self._open:
                raise RuntimeError(f"process {process} invoked {f} with an op still open")
            op = self._append("invoke", process, f, value, None)
            self._open[process] = op
            return op

    def complete(self, process: int, type: OpType, value: Any, error: Any = None) -> Op:
        """Record the completion of `process`'s open op: ok, fail or info."""
        if type not in ("ok", "fail", "info"):
            raise ValueError(f"a completion is ok, fail or info, not {type!r}")
        with self._lock:
            invoked = self._open.pop(process, None)
            if invoked is None:
                raise RuntimeError(f"process {process} completed with no op open")
            return self._append(type, process, invoked.f, value, error)

    def nemesis(self, f: str, value: Any = None, error: Any = None) -> Op:
        """Record a nemesis action as Jepsen does: an info op of the process :nemesis.

        Jepsen writes two per fault, one when the nemesis starts acting and one with the
        outcome; callers do the same by calling this before and after.
        """
        with self._lock:
            return self._append("info", NEMESIS, f, value, error)

    @contextmanager
    def nemesis_action(self, f: str, value: Any = None) -> Iterator[dict[str, Any]]:
        """Wrap one fault in Jepsen's pair of :nemesis :info ops.

        The first op carries `value` (what is asked); the body may set `outcome["value"]`
        (what happened) for the second, which defaults to `value`. If the body raises, the
        second op carries the error and the exception propagates.
        """
        outcome: dict[str, Any] = {"value": value}
        self.nemesis(f, value)
        try:
            yield outcome
        except Exception as exc:
            self.nemesis(f, value, [Keyword("nemesis-error"), f"{type(exc).__name__}: {exc}"])
            raise
        self.nemesis(f, outcome["value"])

    def close(self) -> None:
        with self._lock:
            for sink in self._sinks:
                sink.close()
            self._sinks = []

    def _append(self, type: OpType, process: Any, f: str, value: Any, error: Any) -> Op:
        now = max(self._clock() - self._t0, self._last_time)
        self._last_time = now
        op = Op(self._next_index, process, Keyword(type), Keyword(f), value, now, error)
        self._next_index += 1
        for sink in self._sinks:
            sink.write(op)
        if self._ops is not None:
            self._ops.append(op)
        for listener in self._listeners:
            listener(op)
        return op
