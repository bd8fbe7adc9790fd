"""What the report calls each event (pure given a catalogue).

Code events are named through the build's annotation catalogue (its label, else
function@file:line); packets by direction, their peer in the timeline and the type names of
the messages they start (`send append-entries -> n2`), else their first payload bytes in
brackets; client operations, faults and log lines by their data.
"""

from __future__ import annotations

from mallory.instrument.catalogue import Catalogue
from mallory.timeline.builder import Committed
from mallory.timeline.event import Kind, bytes_part, message_part, message_types


class EventNamer:
    def __init__(self, catalogue: Catalogue | None = None) -> None:
        self.catalogue = catalogue if catalogue is not None else Catalogue()

    def __call__(self, entry: Committed) -> str:
        e = entry.event
        kind = e.kind
        if kind in (Kind.FUNC, Kind.BLOCK):
            return self.catalogue.name(e.id)
        raw = bytes_part(e.data) if kind in (Kind.SEND, Kind.RECV) else e.data
        payload = f" {message_part(e.data)}" if message_types(e.data) else f" [{raw}]" if raw else ""
        if kind is Kind.SEND:
            peers = sorted({node for node, _ in entry.recvs or ()})
            return f"send{payload} -> {','.join(peers) if peers else '?'}"
        if kind is Kind.RECV:
            source = entry.send.event.node if entry.send is not None else "?"
            return f"recv{payload} <- {source}"
        if kind is Kind.CLIENT_INVOKE:
            return f"invoke {e.data}"
        if kind is Kind.CLIENT_COMPLETE:
            return f"complete {e.data}"
        if kind is Kind.FAULT:
            return f"fault {e.data}"
        if kind is Kind.LOG:
            return f"log {e.data}"
        return f"{kind.name.lower()}{payload}"
