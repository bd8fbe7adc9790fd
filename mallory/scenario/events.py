"""What a scenario sees: messages between nodes and the other events of a run.

A `Message` is one message of a declared peer port (the SUT's `[messages]`,
mallory/observer/messages.py), cut out of its TCP stream and named by its type; its `id` is
unique within a run (the driver numbers them) so that message sets and delivery can tell
equal messages apart. A `ScenarioEvent` is one observation, with the timeline's event kinds
(mallory/timeline/event.py, `Kind`):

    SEND             a message in flight, held by the gateway until the filters decide
                     (Netrix's MessageSend event: the only kind `Deliver` delivers)
    RECV             a message a node read (Netrix's MessageReceive)
    FUNC, BLOCK      a code event, `name` its annotation label (Netrix's generic events)
    LOG              a log-derived event, `name` its `[[log_events]]` name
    CLIENT_INVOKE,   a client operation and its completion, `name` "f:type" as the
    CLIENT_COMPLETE  mediator writes it ("write:invoke", "write:ok")
    FAULT            a fault enacted or healed, `name` the fault's label

Netrix's events are the same split (netrix types/events.go, types/event_types.go:
MessageSend, MessageReceive, Generic with a type name); client and fault events are
Mallory's, which its runs have and Netrix's do not. Window markers are no scenario event.
"""

from __future__ import annotations

from dataclasses import dataclass

from mallory.errors import MalloryError
from mallory.timeline.event import Kind, is_message_name

MESSAGE_KINDS = (Kind.SEND, Kind.RECV)
CODE_KINDS = (Kind.FUNC, Kind.BLOCK)
CLIENT_KINDS = (Kind.CLIENT_INVOKE, Kind.CLIENT_COMPLETE)
#: the kinds a scenario event may have
KINDS = (*MESSAGE_KINDS, *CODE_KINDS, Kind.LOG, *CLIENT_KINDS, Kind.FAULT)
#: the node of client and fault events, which happen at no node
NO_NODE = ""
#: a client event's types (Jepsen's)
CLIENT_TYPES = ("invoke", "ok", "fail", "info")


class ScenarioError(MalloryError):
    """A scenario that cannot be built or run as written: the message says what and where."""


@dataclass(frozen=True)
class Message:
    """One message: `src` sent it to `dst` (node names), `type` is its type name
    (`is_message_name`), `payload` the whole message as framed, headers included, when the
    driver keeps it (b"" otherwise)."""

    id: str
    src: str
    dst: str
    type: str
    payload: bytes = b""

    def __post_init__(self) -> None:
        if not self.id or not self.src or not self.dst:
            raise ScenarioError(f"a message needs an id, a sender and a receiver: {self!r}")
        if not is_message_name(self.type):
            raise ScenarioError(f"message {self.id}: {self.type!r} is not a message type name")

    def __str__(self) -> str:
        return f"{self.type} {self.src}->{self.dst} #{self.id}"


@dataclass(frozen=True)
class ScenarioEvent:
    """One event at `node` (NO_NODE for client and fault events): a message for SEND and
    RECV, a `name` for the others (see the module docstring)."""

    node: str
    kind: Kind
    name: str = ""
    message: Message | None = None

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ScenarioError(f"a scenario sees no {self.kind.name} event")
        if (self.message is not None) != (self.kind in MESSAGE_KINDS):
            raise ScenarioError(f"a {self.kind.name} event {'needs' if self.kind in MESSAGE_KINDS else 'has no'} message")
        if self.kind not in MESSAGE_KINDS and not self.name:
            raise ScenarioError(f"a {self.kind.name} event needs a name")

    def __str__(self) -> str:
        what = str(self.message) if self.message is not None else self.name
        return f"{self.node or '-'} {self.kind.name} {what}"


def send(message: Message) -> ScenarioEvent:
    """The gateway holds `message`, on its way from its sender."""
    return ScenarioEvent(message.src, Kind.SEND, message=message)


def receive(message: Message) -> ScenarioEvent:
    """`message`'s receiver read it."""
    return ScenarioEvent(message.dst, Kind.RECV, message=message)


def code(node: str, label: str, kind: Kind = Kind.FUNC) -> ScenarioEvent:
    """`node` reached the annotation `label` (FUNC or BLOCK)."""
    if kind not in CODE_KINDS:
        raise ScenarioError(f"a code event is FUNC or BLOCK, not {kind.name}")
    return ScenarioEvent(node, kind, label)


def log(node: str, name: str) -> ScenarioEvent:
    """`node` logged a line its `[[log_events]]` name `name`."""
    return ScenarioEvent(node, Kind.LOG, name)


def client(f: str, type: str) -> ScenarioEvent:
    """A client invoked `f` (type "invoke") or it completed ("ok", "fail", "info")."""
    if type not in CLIENT_TYPES:
        raise ScenarioError(f"a client event's type is one of {', '.join(CLIENT_TYPES)}, not {type!r}")
    return ScenarioEvent(NO_NODE, Kind.CLIENT_INVOKE if type == "invoke" else Kind.CLIENT_COMPLETE, f"{f}:{type}")


def fault(name: str) -> ScenarioEvent:
    """A fault was enacted or healed ("partition:one", "heal")."""
    return ScenarioEvent(NO_NODE, Kind.FAULT, name)
