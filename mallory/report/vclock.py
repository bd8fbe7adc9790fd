"""Vector clocks of a slice of the committed timeline (pure).

Within the slice, e happens before f iff e precedes f on its node or a chain of program
order and messages (SEND -> its RECV, both in the slice) leads from e to f; vector clocks
characterise exactly that: e -> f iff VC(e) <= VC(f) and VC(e) != VC(f). A RECV whose SEND
lies outside the slice is a local event of the slice. Each node's own entry counts its
events in the slice from 1, as ShiViz requires.
"""

from __future__ import annotations

from collections.abc import Sequence

from mallory.timeline.builder import Committed

VectorClock = dict[str, int]


def vector_clocks(entries: Sequence[Committed]) -> list[VectorClock]:
    """One vector clock per entry, given the entries in a causal order (commit order)."""
    current: dict[str, VectorClock] = {}
    at_send: dict[tuple[str, int], VectorClock] = {}
    out: list[VectorClock] = []
    for entry in entries:
        node = entry.event.node
        clock = dict(current.get(node, {}))
        send = entry.send
        if send is not None:
            sent = at_send.get((send.event.node, send.index))
            if sent is not None:
                for other, count in sent.items():
                    if count > clock.get(other, 0):
                        clock[other] = count
        clock[node] = clock.get(node, 0) + 1
        current[node] = clock
        if entry.recvs is not None:
            at_send[(node, entry.index)] = clock
        out.append(clock)
    return out


def leq(a: VectorClock, b: VectorClock) -> bool:
    """a <= b component-wise (missing components are 0)."""
    return all(count <= b.get(node, 0) for node, count in a.items())


def happened_before(a: VectorClock, b: VectorClock) -> bool:
    return a != b and leq(a, b)
