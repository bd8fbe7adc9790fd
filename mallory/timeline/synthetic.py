"""A synthetic cluster's event stream, for benchmarks and for trying `mallory analyze`.

Nodes run a loop of code events (a few dozen distinct ids, as annotated code gives) and
exchange messages; every `batch_ns` each node's observer cuts a batch. With `behaviours`,
time is cut into phases of `phase_ns`, each drawn from a fixed set of behaviours (which
code paths run, which node is cut off from the others), so that windows fall into a few
recurring states, as a cluster under changing faults does. The stream is in
the wire codec, in the order a mediator would receive it: clock pairs first, then batches
interleaved across nodes, with occasional neighbouring batches swapped.
"""

from __future__ import annotations

import random
from collections.abc import Iterator

from mallory.timeline.codec import Record
from mallory.timeline.event import Batch, ClockPair, Event, Kind


def synthetic_stream(
    n_events: int,
    n_nodes: int = 5,
    packet_share: float = 0.1,
    events_per_s: int = 10_000,
    batch_ns: int = 100_000_000,
    code_ids: int = 40,
    behaviours: int = 0,
    phase_ns: int = 5_000_000_000,
    seed: int = 1,
) -> Iterator[Record]:
    """Yield records for `n_events` events in total (half the packet share SENDs, half RECVs)."""
    rng = random.Random(seed)
    nodes = [f"n{i + 1}" for i in range(n_nodes)]
    epoch = {n: rng.randint(10**9, 10**12) for n in nodes}
    skew = {n: rng.randint(0, 50_000_000) for n in nodes}
    base_real = 1_700_000_000_000_000_000
    for n in nodes:
        yield ClockPair(n, epoch[n], base_real + skew[n])
    step = 10**9 // events_per_s
    pending: dict[str, list[Event]] = {n: [] for n in nodes}
    seq = {n: 0 for n in nodes}
    in_flight: list[tuple[int, str, int, str]] = []  # (arrival time, dst, packet id, data)
    ids = [rng.getrandbits(64) for _ in range(code_ids)]
    payloads = [f"{rng.getrandbits(32):08x}" for _ in range(8)]
    phases = [
        (rng.sample(ids, max(2, code_ids // 5)), rng.choice([None, *nodes]), rng.sample(payloads, 2))
        for _ in range(behaviours)
    ] or [(ids, None, payloads)]
    active_ids, isolated, active_payloads = phases[0]
    next_phase = phase_ns
    t = 0
    next_cut = batch_ns
    emitted = 0
    held: list[Batch] = []
    while emitted < n_events:
        t += rng.randint(1, 2 * step)
        if t >= next_phase:
            active_ids, isolated, active_payloads = rng.choice(phases)
            next_phase += phase_ns
        while in_flight and in_flight[0][0] <= t and emitted < n_events:
            _, dst, pid, data = in_flight.pop(0)
            pending[dst].append(Event(dst, Kind.RECV, t + epoch[dst], pid, data))
            emitted += 1
        if emitted >= n_events:
            break
        node = rng.choice(nodes)
        if rng.random() < packet_share / 2 and emitted + 1 < n_events and node != isolated:
            dst = rng.choice([m for m in nodes if m != node and m != isolated])
            pid = rng.getrandbits(64)
            data = rng.choice(active_payloads)
            pending[node].append(Event(node, Kind.SEND, t + epoch[node], pid, data))
            in_flight.append((t + rng.randint(50_000, 400_000), dst, pid, data))
        else:
            kind = Kind.FUNC if rng.random() < 0.5 else Kind.BLOCK
            pending[node].append(Event(node, kind, t + epoch[node], rng.choice(active_ids)))
        emitted += 1
        if t >= next_cut:
            yield from _cut(nodes, pending, seq, epoch, next_cut, rng, held)
            next_cut += batch_ns
    t = max(t, next_cut)
    yield from _cut(nodes, pending, seq, epoch, t + 1, rng, held)
    yield from held


def _cut(nodes, pending, seq, epoch, until, rng, held) -> Iterator[Batch]:
    for n in nodes:
        batch = Batch(n, seq[n], until + epoch[n], pending[n])
        seq[n] += 1
        pending[n] = []
        if held and held[0].node == n:
            yield batch  # a batch overtakes the one held back: out-of-order arrival
            yield held.pop()
        elif rng.random() < 0.05 and not held:
            held.append(batch)
        else:
            yield batch
