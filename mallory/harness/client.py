"""The client protocol, after Jepsen's Client: open, invoke one op at a time, close.

An op handed to `invoke` is a dict `{"f": ..., "value": ...}` exactly as it is recorded in
the history's invoke. The result is a `Completion`:

* `ok`: the op took effect; `value` holds what it observed (reads filled in);
* `fail`: the op certainly did not take effect (refused connection, rejected command,
  CAS whose expected value did not match);
* `info`: unknown whether it took effect (timeout, connection lost mid-request). The
  runner retires the process after an info, as Jepsen does.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, Mapping, Protocol

from mallory.history.edn import Keyword

CompletionType = Literal["ok", "fail", "info"]


@dataclass(frozen=True)
class Completion:
    type: CompletionType
    value: Any = None
    error: Any = None


def ok(value: Any) -> Completion:
    return Completion("ok", value)


def fail(value: Any, kind: str, message: str | None = None) -> Completion:
    return Completion("fail", value, error_value(kind, message))


def info(value: Any, kind: str, message: str | None = None) -> Completion:
    return Completion("info", value, error_value(kind, message))


def error_value(kind: str, message: str | None) -> Any:
    """Jepsen's error shapes: `:timeout`, or `[:connection-lost "reset by peer"]`."""
    return Keyword(kind) if message is None else [Keyword(kind), message]


#: The prefix a key-value client puts on each workload's keys on the wire, so that runs of
#: different workloads against one store never touch each other's keys.
KEY_PREFIX = {"register": "reg:", "list-append": "la:", "rw-register": "rw:"}


def key_prefix(client: str, workload: str) -> str:
    """The wire prefix of `workload`'s keys; ValueError when the `client` kind has no such workload."""
    if workload not in KEY_PREFIX:
        raise ValueError(f"{client} client has no workload {workload!r}; known: {', '.join(KEY_PREFIX)}")
    return KEY_PREFIX[workload]


def key_options(workload: Any) -> dict[str, Any]:
    """How a workload's keys go on the wire, as the clients take them: `independent` (values
    are Jepsen's [key value] tuples) and `key_base` (added to every key, so each schedule
    starts on fresh keys)."""
    return {"independent": getattr(workload, "independent", False), "key_base": getattr(workload, "key_base", 0)}


def register_parts(value: Any, independent: bool) -> tuple[Any, Any]:
    """A register op's (key, argument): Jepsen's [key value] tuple when `independent`,
    else key 0 and the whole value."""
    return (value[0], value[1]) if independent else (0, value)


def register_read(key: Any, got: Any, independent: bool) -> Any:
    """What a register read completes with: [key got] when `independent`, else got."""
    return [key, got] if independent else got


class Client(Protocol):
    """One connection's worth of client, owned by one worker thread at a time."""

    def open(self) -> None:
        """Connect. May raise; the runner retries later."""
        ...

    def invoke(self, op: Mapping[str, Any]) -> Completion:
        """Run one op and say how it ended. Must not raise for SUT-side failures."""
        ...

    def close(self) -> None: ...
