"""Timeline abstractions: what of a window's causal structure becomes the learner's state.

The interface is the paper's. Each node carries an abstract state that evolves along the
node's events:

    update(entry)                                same-node succession: `entry` happened here
    merge(this_entry, other_state, other_entry)  a causal arrow: `this_entry` (a RECV) receives
                                                 what `other_entry` (the SEND) carried, and
                                                 `other_state` is the sender's abstract state
                                                 as it was right after `other_entry`

`summary()` turns the states of all nodes into the window's summary: a set of string tokens
that the learner MinHashes. Abstractions are pluggable by name (`ABSTRACTIONS`).

An event's *type* (`event_type`) is what the abstraction sees of it: code and log events by
their id, packets and client ops by their small payload abstraction. Packet ids are unique
per packet, so they never enter a type. A packet on a flow whose messages the SUT declares
carries two abstractions (mallory/timeline/event.py `packet_data`): the message types it
starts and its first payload bytes. Every abstraction takes `packet_types`, which of the two
types packets (PACKET_TYPES: "messages", the default, or "bytes", what they would be without
the declaration), so one recording can be judged both ways (`mallory analyze
--packet-types`). On a flow without a declaration both are the payload bytes.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Callable, ClassVar

from mallory.errors import MalloryError
from mallory.timeline.builder import Committed
from mallory.timeline.event import Event, Kind, bytes_part, message_part, message_types

Summary = frozenset[str]

_BY_ID = frozenset({Kind.FUNC, Kind.BLOCK, Kind.LOG})
#: Window markers delimit windows and FAULT events record what the fuzzer did: neither is
#: behaviour of the system under test. A state must say how the cluster behaved, not which
#: fault was chosen, or every action would trivially lead to a state of its own.
IGNORED_KINDS = frozenset({Kind.WINDOW_START, Kind.WINDOW_END, Kind.FAULT})
#: At most this many distinct payload types (SEND/RECV/client data) per window; later new
#: ones share the type "<kind>:other". Payload bytes of a stream protocol are open-ended
#: (lengths, chunks of large replies), and event-history's summary grows with the square of
#: the number of types: one Redis window of 3,000 events once made a million tokens.
MAX_PAYLOAD_TYPES = 128
OTHER_PAYLOAD = "other"
_PACKETS = frozenset({Kind.SEND, Kind.RECV})
#: what types a packet: the message types its data names, or its payload bytes
PACKET_TYPES: dict[str, Callable[[str], str]] = {"messages": message_part, "bytes": bytes_part}


def type_key(event: Event, part: Callable[[str], str] = message_part) -> tuple[Kind, int | str]:
    """The hashable identity of an event's type, a packet's by the `part` of its data
    (PACKET_TYPES); cheaper than formatting its name."""
    kind = event.kind
    if kind in _BY_ID:
        return (kind, event.id)
    return (kind, part(event.data)) if kind in _PACKETS else (kind, event.data)


def type_name(key: tuple[Kind, int | str]) -> str:
    kind, value = key
    return f"{kind.name}:{value:x}" if kind in _BY_ID else f"{kind.name}:{value}"


def event_type(event: Event, part: Callable[[str], str] = message_part) -> str:
    """The abstract type of an event, e.g. "FUNC:1a2b", "SEND:17030300" or "SEND:append"."""
    return type_name(type_key(event, part))


class Abstraction(ABC):
    """The abstract states of every node in one window, packets typed by `packet_types`
    (see the module docstring)."""

    name: ClassVar[str]

    def __init__(self, packet_types: str = "messages") -> None:
        if packet_types not in PACKET_TYPES:
            raise MalloryError(f"packet types {packet_types!r}: choose one of {', '.join(PACKET_TYPES)}")
        self._part = PACKET_TYPES[packet_types]
        self._parts: dict[str, str] = {}  # a packet's data -> its part (a few distinct ones a window)
        self._types: dict[tuple, int] = {}  # type key -> small integer (bit position)
        self._keys: list[tuple] = []
        self._payload_types = 0

    def _packet_part(self, data: str) -> str:
        part = self._parts.get(data)
        if part is None:
            part = self._parts[data] = self._part(data)
        return part

    def type_index(self, event: Event) -> int:
        key = type_key(event, self._packet_part)
        index = self._types.get(key)
        if index is None:
            index = self._new_type(key)
        return index

    def _new_type(self, key: tuple) -> int:
        """The index of a key not seen yet in this window: a new type, or its kind's "other"
        once the window has MAX_PAYLOAD_TYPES payload types."""
        if key[0] not in _BY_ID:
            if self._payload_types >= MAX_PAYLOAD_TYPES:
                key = (key[0], OTHER_PAYLOAD)
                index = self._types.get(key)
                if index is not None:
                    return index
            else:
                self._payload_types += 1
        index = self._types[key] = len(self._keys)
        self._keys.append(key)
        return index

    def type_names(self) -> list[str]:
        """The names of the event types seen so far, in the order they were first seen."""
        return [type_name(key) for key in self._keys]

    def run(self, entries: list[Committed]) -> None:
        """Feed a window's entries, in a causal (commit) order, through update and merge.

        Arrows from SENDs outside the window are ignored: a window is judged on its own.
        """
        snapshots: dict[int, object] = {}  # id(SEND entry) -> sender state right after it
        for entry in entries:
            kind = entry.event.kind
            if kind in IGNORED_KINDS:
                continue
            send = entry.send
            if send is not None and id(send) in snapshots:
                self.merge(entry, snapshots[id(send)], send)
            self.update(entry)
            if kind is Kind.SEND:
                snapshots[id(entry)] = self.snapshot(entry.event.node)

    @abstractmethod
    def update(self, entry: Committed) -> None:
        """`entry` happened on its node, after everything this node has seen so far."""

    @abstractmethod
    def merge(self, this_entry: Committed, other_state: object, other_entry: Committed) -> None:
        """`this_entry` receives the message `other_entry` sent; fold the sender's state in."""

    @abstractmethod
    def snapshot(self, node: str) -> object:
        """The node's current state, immutable, to be merged later at the receiver."""

    @abstractmethod
    def summary(self) -> Summary:
        """The window's summary: a set of tokens."""


class EventHistory(Abstraction):
    """The paper's default: per node, the pairs (type a, type b) with a happens-before b and b
    on that node, both in the window.

    A node's *history* is the bitset of types that happened on it or causally before it; an
    event of type t adds every type of the history as a predecessor of t, then joins the
    history. One integer OR per event, instead of a loop over pairs.
    """

    name = "event-history"

    def __init__(self, packet_types: str = "messages") -> None:
        super().__init__(packet_types)
        self._history: dict[str, int] = {}
        self._pairs: dict[str, dict[int, int]] = {}  # node -> type -> bitset of predecessors

    def update(self, entry: Committed) -> None:
        node = entry.event.node
        t = self.type_index(entry.event)
        history = self._history.get(node, 0)
        pairs = self._pairs.get(node)
        if pairs is None:
            pairs = self._pairs[node] = {}
        if history:
            pairs[t] = pairs.get(t, 0) | history
        elif t not in pairs:
            pairs[t] = 0
        self._history[node] = history | (1 << t)

    def merge(self, this_entry: Committed, other_state: object, other_entry: Committed) -> None:
        node = this_entry.event.node
        self._history[node] = self._history.get(node, 0) | int(other_state)  # type: ignore[call-overload]

    def snapshot(self, node: str) -> int:
        return self._history.get(node, 0)

    def run(self, entries: list[Committed]) -> None:
        """`Abstraction.run` with update and merge inlined: this is the per-event hot path."""
        history = self._history
        all_pairs = self._pairs
        types = self._types
        by_id = _BY_ID
        packets = _PACKETS
        part = self._packet_part
        ignored = IGNORED_KINDS
        send_kind = Kind.SEND
        snapshots: dict[int, int] = {}
        for entry in entries:
            event = entry.event
            kind = event.kind
            if kind in ignored:
                continue
            node = event.node
            h = history.get(node, 0)
            send = entry.send
            if send is not None:
                h |= snapshots.get(id(send), 0)
            if kind in by_id:
                key = (kind, event.id)
            else:
                key = (kind, part(event.data)) if kind in packets else (kind, event.data)
            t = types.get(key)
            if t is None:
                t = self._new_type(key)
            pairs = all_pairs.get(node)
            if pairs is None:
                pairs = all_pairs[node] = {}
            pairs[t] = pairs.get(t, 0) | h
            h |= 1 << t
            history[node] = h
            if kind is send_kind:
                snapshots[id(entry)] = h

    def _decoded(self, names: list[str]) -> list[tuple[str, dict[int, list[str]]]]:
        """Per node, per type, the names of its predecessor types (bitsets decoded once each:
        busy windows share the same few bitsets across many types and nodes)."""
        cache: dict[int, list[str]] = {}
        out = []
        for node, per_type in self._pairs.items():
            decoded = {}
            for t, preds in per_type.items():
                found = cache.get(preds)
                if found is None:
                    found, bits = [], preds
                    while bits:
                        low = bits & -bits
                        found.append(names[low.bit_length() - 1])
                        bits ^= low
                    cache[preds] = found
                decoded[t] = found
            out.append((node, decoded))
        return out

    def pairs(self) -> set[tuple[str, str, str]]:
        """(node, type a, type b) for every a happens-before b, b on node."""
        names = [type_name(k) for k in self._keys]
        return {(node, a, names[t]) for node, decoded in self._decoded(names) for t, preds in decoded.items() for a in preds}

    def summary(self) -> Summary:
        names = [type_name(k) for k in self._keys]
        tokens = set()
        for node, decoded in self._decoded(names):
            prefix = node + "|"
            for t, preds in decoded.items():
                suffix = "|" + names[t]
                tokens.update([prefix + a + suffix for a in preds])
        return frozenset(tokens)


class CodeHistory(EventHistory):
    """Event-history over the system's behaviour only: the pairs (a, b), a happens-before b
    and b on that node, where a and b are code or log events; plus, for every message sent
    and received inside the window, a token `link|sender>receiver`.

    Packets still carry causality (a RECV takes in the sender's history) but are not types
    themselves: the first payload bytes of a stream protocol's segment are whatever a
    segment happens to start with (lengths, values, halves of messages), so as types they
    made nearly every fault-free window a state of its own. Client operations are not
    behaviour of the cluster either. What remains is what the code did and who talked to
    whom: a leader change, a truncation, a partitioned link still show, steady windows
    look alike.
    """

    name = "code-history"

    def __init__(self, packet_types: str = "messages") -> None:
        super().__init__(packet_types)
        self._links: set[tuple[str, str]] = set()

    def run(self, entries: list[Committed]) -> None:
        history = self._history
        all_pairs = self._pairs
        types = self._types
        links = self._links
        by_id = _BY_ID
        typed = self._typed
        ignored = IGNORED_KINDS
        send_kind = Kind.SEND
        snapshots: dict[int, int] = {}
        for entry in entries:
            event = entry.event
            kind = event.kind
            if kind in ignored:
                continue
            node = event.node
            h = history.get(node, 0)
            send = entry.send
            if send is not None:
                sent = snapshots.get(id(send))
                if sent is not None:  # sent inside this window
                    h |= sent
                    links.add((send.event.node, node))
            if kind in by_id:
                key: tuple | None = (kind, event.id)
            else:
                key = typed(event)
            if key is not None:
                t = types.get(key)
                if t is None:
                    t = self._new_type(key)
                pairs = all_pairs.get(node)
                if pairs is None:
                    pairs = all_pairs[node] = {}
                pairs[t] = pairs.get(t, 0) | h
                h |= 1 << t
            history[node] = h
            if kind is send_kind:
                snapshots[id(entry)] = h

    def _typed(self, event: Event) -> tuple | None:
        """The type key of an event that is neither a code nor a log event, None when it is
        no type here: code-history types none of them."""
        return None

    def links(self) -> set[tuple[str, str]]:
        """(sender, receiver) of every message sent and received in the window."""
        return set(self._links)

    def summary(self) -> Summary:
        return super().summary() | {f"link|{a}>{b}" for a, b in self._links}


class MessageHistory(CodeHistory):
    """Code-history with the SUT's messages as types too: a packet that starts declared
    messages (mallory/observer/messages.py) is typed by their names ("SEND:append-entries"),
    so which messages a node sent and received, after what code and before what, is part
    of the state. Packets that start no declared message (continuations, lost sync, flows
    without a declaration) stay carriers of causality only, as in code-history: their bytes
    are what made code-history leave packets out. Under packet types "bytes" no packet
    names a message, and it is code-history."""

    name = "message-history"

    def _typed(self, event: Event) -> tuple | None:
        if event.kind not in _PACKETS:
            return None
        data = self._packet_part(event.data)
        return (event.kind, data) if message_types(data) else None


@dataclass(frozen=True)
class Behaviour:
    """What a window showed of the system's behaviour, whatever the state abstraction.

    types: the code and log event types that occurred ("FUNC:1a2b", "LOG:9f00...");
    pairs: for every such a that happens before such a b, "a>b" when a ran on b's node and
           "a~>b" when it ran on another node and reached b's through messages (a may be
           b: a type that repeats). The campaign's union of these is its event-pair
           coverage, AFL's edge coverage for a distributed system. Telling local from
           cross-node causality matters for the measure as much as for the systems: a
           leader's election that a follower's append follows is not the follower's own
           succession of events, and without the distinction the pairs of the 12-label
           example SUT saturated at 128 in ten minutes whatever the policy.
    """

    types: frozenset[str]
    pairs: frozenset[str]


def behaviour(entries: list[Committed]) -> Behaviour:
    """The window's `Behaviour`: event-history over code and log events whose types also
    carry the node they ran on, so each pair knows whether it crossed nodes. Packets carry
    causality (a RECV takes in its SEND's history, if the SEND is in the window) but are no
    types, as in code-history."""
    types: dict[tuple[Kind, int, str], int] = {}  # (kind, id, node) -> bit
    keys: list[tuple[Kind, int, str]] = []
    history: dict[str, int] = {}  # node -> bits of (type, node) in its causal past
    preds: dict[int, int] = {}  # bit of b -> bits of the a's before it
    snapshots: dict[int, int] = {}
    for entry in entries:
        event = entry.event
        kind = event.kind
        if kind in IGNORED_KINDS:
            continue
        node = event.node
        h = history.get(node, 0)
        send = entry.send
        if send is not None:
            h |= snapshots.get(id(send), 0)
        if kind in _BY_ID:
            key = (kind, event.id, node)
            bit = types.get(key)
            if bit is None:
                bit = types[key] = len(keys)
                keys.append(key)
            preds[bit] = preds.get(bit, 0) | h
            h |= 1 << bit
        history[node] = h
        if kind is Kind.SEND:
            snapshots[id(entry)] = h
    names = [type_name((kind, ident)) for kind, ident, _ in keys]
    pairs = set()
    for b, bits in preds.items():
        b_node = keys[b][2]
        while bits:
            low = bits & -bits
            a = low.bit_length() - 1
            pairs.add(f"{names[a]}{'>' if keys[a][2] == b_node else '~>'}{names[b]}")
            bits ^= low
    return Behaviour(frozenset(names), frozenset(pairs))


class VectorClock(Abstraction):
    """Per node, its vector clock at the end of the window: for every node m, how many of m's
    window events happen before (or are) the node's last event."""

    name = "vector-clock"

    def __init__(self, packet_types: str = "messages") -> None:
        super().__init__(packet_types)
        self._clocks: dict[str, dict[str, int]] = {}

    def update(self, entry: Committed) -> None:
        node = entry.event.node
        clock = self._clocks.setdefault(node, {})
        clock[node] = clock.get(node, 0) + 1

    def merge(self, this_entry: Committed, other_state: object, other_entry: Committed) -> None:
        clock = self._clocks.setdefault(this_entry.event.node, {})
        for m, count in other_state:  # type: ignore[attr-defined]
            if count > clock.get(m, 0):
                clock[m] = count

    def snapshot(self, node: str) -> tuple[tuple[str, int], ...]:
        return tuple(self._clocks.get(node, {}).items())

    def clocks(self) -> dict[str, dict[str, int]]:
        return {node: dict(clock) for node, clock in self._clocks.items()}

    def summary(self) -> Summary:
        return frozenset(f"{node}|{m}|{count}" for node, clock in self._clocks.items() for m, count in clock.items())


def count_bucket(count: int) -> int:
    """AFL's hit-count buckets (1, 2, 3, 4-7, 8-15, 16-31, 32-127, 128+) as their lower bound:
    exact counts would make almost every window a new state."""
    if count <= 3:
        return count
    for low in (128, 32, 16, 8, 4):
        if count >= low:
            return low
    raise AssertionError("unreachable")


class EventCount(Abstraction):
    """Per node, how often each event type occurred in the window (bucketed). No causality."""

    name = "event-count"

    def __init__(self, packet_types: str = "messages") -> None:
        super().__init__(packet_types)
        self._counts: dict[str, dict[str, int]] = {}

    def update(self, entry: Committed) -> None:
        counts = self._counts.setdefault(entry.event.node, {})
        t = event_type(entry.event, self._packet_part)
        counts[t] = counts.get(t, 0) + 1

    def merge(self, this_entry: Committed, other_state: object, other_entry: Committed) -> None:
        """Counts are local: a message carries nothing."""

    def snapshot(self, node: str) -> None:
        return None

    def counts(self) -> dict[str, dict[str, int]]:
        return {node: dict(c) for node, c in self._counts.items()}

    def summary(self) -> Summary:
        return frozenset(
            f"{node}|{t}|{count_bucket(n)}" for node, counts in self._counts.items() for t, n in counts.items()
        )


ABSTRACTIONS: dict[str, type[Abstraction]] = {
    cls.name: cls for cls in (CodeHistory, MessageHistory, EventHistory, VectorClock, EventCount)
}


def make_abstraction(name: str, packet_types: str = "messages") -> Abstraction:
    """The abstraction called `name`, packets typed by `packet_types` (PACKET_TYPES)."""
    try:
        cls = ABSTRACTIONS[name]
    except KeyError:
        raise MalloryError(f"unknown abstraction {name!r}; choose one of {sorted(ABSTRACTIONS)}") from None
    return cls(packet_types)


def abstract(entries: list[Committed], abstraction: Abstraction) -> Abstraction:
    """Run the abstraction over a window's entries (in a causal order) and return it."""
    abstraction.run(entries)
    return abstraction
