"""Random distributed executions with known ground truth, for the timeline tests.

An execution is simulated in true time: nodes do local events, send messages, and receive
messages already in flight. Each node's clock reads true time plus its own skew (all skews
within the bound), shifted onto its own monotonic epoch. Some messages are never received
(dropped packets) and some RECVs have no SEND (traffic from outside the cluster).

The truth is computed here independently of the builder: per node the event order, for each
RECV the SEND it receives, and Lamport timestamps by their definition over a causal order.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from mallory.timeline.event import Batch, ClockPair, Event, Kind


@dataclass
class Execution:
    nodes: list[str]
    clocks: dict[str, ClockPair]
    events: dict[str, list[Event]]  # per node, in order
    link: dict[tuple[str, int], tuple[str, int] | None] = field(default_factory=dict)  # RECV -> SEND
    lamport: dict[tuple[str, int], int] = field(default_factory=dict)


def generate(
    rng: random.Random,
    n_nodes: int,
    n_steps: int,
    skew_ns: int,
    p_send: float = 0.3,
    p_drop: float = 0.1,
    p_external: float = 0.05,
) -> Execution:
    nodes = [f"n{i + 1}" for i in range(n_nodes)]
    # A node's monotonic clock is true time on its own epoch; its real-time clock is off by
    # its skew. The clock pair, read at true time 10**12, maps mono to true + skew.
    skews = {n: rng.randint(0, skew_ns) for n in nodes}
    epochs = {n: rng.randint(0, 10**12) for n in nodes}
    base_real = 1_700_000_000_000_000_000
    clocks = {n: ClockPair(n, 10**12 - epochs[n], base_real + 10**12 + skews[n]) for n in nodes}
    ex = Execution(nodes, clocks, {n: [] for n in nodes})
    last_lamport = {n: 0 for n in nodes}
    in_flight: list[tuple[str, str, int, int]] = []  # (dst, src, send index, packet id)
    next_packet = 1
    true_ns = 10**12

    def emit(node: str, kind: Kind, ident: int, data: str, send_ref: tuple[str, int] | None = None) -> int:
        mono = true_ns - epochs[node]
        ex.events[node].append(Event(node, kind, mono, ident, data))
        index = len(ex.events[node]) - 1
        lamport = last_lamport[node]
        if send_ref is not None:
            lamport = max(lamport, ex.lamport[send_ref])
        lamport += 1
        last_lamport[node] = ex.lamport[(node, index)] = lamport
        return index

    for _ in range(n_steps):
        true_ns += rng.randint(1, 3 * skew_ns // 2 + 2)
        node = rng.choice(nodes)
        deliverable = [m for m in in_flight if m[0] == node]
        roll = rng.random()
        if deliverable and roll < 0.4:
            msg = rng.choice(deliverable)
            in_flight.remove(msg)
            _, src, send_index, pid = msg
            index = emit(node, Kind.RECV, pid, f"{pid % 4:02x}", (src, send_index))
            ex.link[(node, index)] = (src, send_index)
        elif roll < 0.4 + p_send and n_nodes > 1:
            dst = rng.choice([n for n in nodes if n != node])
            pid = rng.getrandbits(64) | 1 << 63 if rng.random() < 0.5 else next_packet
            next_packet += 1
            index = emit(node, Kind.SEND, pid, f"{pid % 4:02x}")
            if rng.random() >= p_drop:
                in_flight.append((dst, node, index, pid))
        elif roll < 0.4 + p_send + p_external:
            pid = (1 << 62) + rng.getrandbits(40)  # never sent by any node
            index = emit(node, Kind.RECV, pid, "ee")
            ex.link[(node, index)] = None
        else:
            kind = rng.choice([Kind.FUNC, Kind.BLOCK, Kind.LOG])
            emit(node, kind, rng.randint(1, 6), "")
    return ex


def batches(rng: random.Random, ex: Execution, max_batch: int = 5) -> dict[str, list[Batch]]:
    """Cut each node's stream into batches (some empty, as idle observers send), seq from 0."""
    out: dict[str, list[Batch]] = {}
    for node, events in ex.events.items():
        cut: list[Batch] = []
        i = 0
        while i < len(events) or not cut:
            size = rng.randint(0, max_batch)
            chunk = events[i : i + size]
            i += len(chunk)
            # complete up to just before the next event (or the end of the stream)
            until = events[i].ts - 1 if i < len(events) else (events[-1].ts + 1 if events else 0)
            cut.append(Batch(node, len(cut), max(until, chunk[-1].ts if chunk else 0), chunk))
        out[node] = cut
    return out


def arrival_order(rng: random.Random, ex: Execution, per_node: dict[str, list[Batch]], locality: int = 3) -> list:
    """An arrival order of all records: nodes interleaved at random, each node's batches
    mostly in order but with local swaps (out-of-order sequence numbers), clock pairs at a
    random point of their node's stream."""
    streams: dict[str, list] = {}
    for node, node_batches in per_node.items():
        items: list = list(node_batches)
        for i in range(len(items) - 1):
            j = min(len(items) - 1, i + rng.randint(0, locality))
            if rng.random() < 0.3:
                items[i], items[j] = items[j], items[i]
        items.insert(rng.randint(0, len(items)), ex.clocks[node])
        streams[node] = items
    order = []
    while streams:
        node = rng.choice(sorted(streams))
        order.append(streams[node].pop(0))
        if not streams[node]:
            del streams[node]
    return order
