"""Ingest: per-node renumbering across mediator/observer restarts, duplicates, joins, recording."""

import io

from mallory.mediator.firewall import SeenPackets
from mallory.mediator.ingest import Ingest
from mallory.timeline.builder import TimelineBuilder
from mallory.timeline.codec import read_records
from mallory.timeline.event import Batch, ClockPair, Event, Kind


def make(nodes=("n1", "n2")):
    """An ingest whose committed entries are collected in `ingest.collected` (a subscriber)."""
    recording = io.BytesIO()
    seen = SeenPackets()
    ingest = Ingest(TimelineBuilder(skew_ns=1_000_000, nodes=list(nodes)), seen, recording)
    ingest.collected = []
    ingest.subscribers.append(ingest.collected.extend)
    return ingest, seen, recording


def func(node, ts):
    return Event(node, Kind.FUNC, ts, 7, "")


def test_a_restarted_mediator_takes_observers_in_mid_stream():
    ingest, _, recording = make(("n1",))
    ingest.on_clock(ClockPair("n1", 0, 10**18))
    ingest.on_batch(Batch("n1", 41, 100, [func("n1", 50)]))  # the observer's seq 41 is our first
    ingest.on_batch(Batch("n1", 42, 200, [func("n1", 150)]))
    assert [c.event.ts for c in ingest.collected] == [50, 150]
    recorded = [r for r in read_records(io.BytesIO(recording.getvalue())) if isinstance(r, Batch)]
    assert [b.seq for b in recorded] == [0, 1]  # a self-contained stream for `mallory analyze`


def test_resent_batches_are_counted_once():
    ingest, _, recording = make(("n1",))
    ingest.on_clock(ClockPair("n1", 0, 10**18))
    for seq in (0, 1, 1, 0, 2):
        ingest.on_batch(Batch("n1", seq, 100 * (seq + 1), [func("n1", 100 * seq + 50)]))
    assert ingest.duplicates == 2
    assert ingest.stats()["nodes"]["n1"]["batches"] == 3
    assert len([r for r in read_records(io.BytesIO(recording.getvalue())) if isinstance(r, Batch)]) == 3


def test_a_restarted_observer_continues_after_what_we_have():
    ingest, _, _ = make(("n1",))
    ingest.on_clock(ClockPair("n1", 0, 10**18))
    ingest.on_batch(Batch("n1", 0, 100, [func("n1", 50)]))
    ingest.on_batch(Batch("n1", 1, 200, [func("n1", 150)]))
    ingest.on_clock(ClockPair("n1", 0, 10**18 + 1))  # a new incarnation: seqs start at 0 again
    ingest.on_batch(Batch("n1", 0, 300, [func("n1", 250)]))
    assert [c.event.ts for c in ingest.collected] == [50, 150, 250]
    assert ingest.duplicates == 0 and ingest.stats()["nodes"]["n1"]["next_seq"] == 3


def test_a_killed_observers_batch_read_after_its_successors_clock_pair_is_dropped():
    ingest, _, _ = make(("n1",))
    old, new = ClockPair("n1", 0, 10**18), ClockPair("n1", 0, 10**18 + 1)
    ingest.on_clock(old)
    ingest.on_batch(Batch("n1", 0, 100, [func("n1", 50)]), old)
    ingest.on_clock(new)  # the restarted observer connects before the old connection is read out
    ingest.on_batch(Batch("n1", 7, 200, [func("n1", 150)]), old)  # the dead one's last batch
    for seq in (0, 1):
        ingest.on_batch(Batch("n1", seq, 300 + seq, [func("n1", 250 + seq)]), new)
    assert [c.event.ts for c in ingest.collected] == [50, 250, 251]  # none of the successor's lost
    stats = ingest.stats()
    assert stats["superseded_batches"] == 1 and stats["duplicate_batches"] == 0
    assert stats["nodes"]["n1"]["batches"] == 3


def test_send_and_recv_join_the_mediators_packet_records():
    ingest, seen, _ = make()
    seen.add(111)
    for node in ("n1", "n2"):
        ingest.on_clock(ClockPair(node, 0, 10**18))
    ingest.on_batch(Batch("n1", 0, 100, [Event("n1", Kind.SEND, 10, 111, "abcd"), Event("n1", Kind.SEND, 20, 222, "")]))
    ingest.on_batch(Batch("n2", 0, 100, [Event("n2", Kind.RECV, 30, 111, "abcd"), func("n2", 40)]))
    nodes = ingest.stats()["nodes"]
    assert (nodes["n1"]["joined"], nodes["n1"]["unjoined"]) == (1, 1)
    assert (nodes["n2"]["joined"], nodes["n2"]["unjoined"]) == (1, 0)  # FUNC events are not packets
    recv = [c for c in ingest.collected if c.event.kind is Kind.RECV]
    assert recv and recv[0].send.event.id == 111
    # The batch overtook packet 222 to the firewall: it joins once the firewall logs it.
    seen.add(222)
    nodes = ingest.stats()["nodes"]
    assert (nodes["n1"]["joined"], nodes["n1"]["unjoined"]) == (2, 0)


def test_an_id_the_firewall_never_logs_is_given_up_after_its_second_look():
    ingest, seen, _ = make(("n1",))
    ingest.join_recheck_ns = 0  # every batch is a periodic look
    ingest.on_clock(ClockPair("n1", 0, 10**18))
    ingest.on_batch(Batch("n1", 0, 100, [Event("n1", Kind.SEND, 10, 222, "")]))
    assert ingest.held()["join_waiting"] == 1  # one look left
    seen.add(333)
    ingest.on_batch(Batch("n1", 1, 200, [Event("n1", Kind.SEND, 20, 333, "")]))  # joins at once
    assert ingest.held()["join_waiting"] == 0
    seen.add(222)  # too late: it was given up for good
    nodes = ingest.stats()["nodes"]
    assert (nodes["n1"]["joined"], nodes["n1"]["unjoined"]) == (1, 1)


def test_an_id_joins_at_the_periodic_look_after_its_packet_reached_the_firewall():
    ingest, seen, _ = make(("n1",))
    ingest.join_recheck_ns = 0
    ingest.on_clock(ClockPair("n1", 0, 10**18))
    ingest.on_batch(Batch("n1", 0, 100, [Event("n1", Kind.SEND, 10, 222, "")]))
    seen.add(222)
    ingest.on_batch(Batch("n1", 1, 200, [func("n1", 150)]))
    assert ingest.held()["join_waiting"] == 0
    assert (ingest.stats()["nodes"]["n1"]["joined"], ingest.stats()["nodes"]["n1"]["unjoined"]) == (1, 0)


def test_lost_events_and_commit_lag_are_reported():
    ingest, _, _ = make(("n1",))
    ingest.on_clock(ClockPair("n1", 0, 10**18))
    ingest.on_batch(Batch("n1", 0, 100, [func("n1", 50)], lost=4))
    stats = ingest.stats()
    assert stats["lost_events"] == 4 and stats["nodes"]["n1"]["lost"] == 4
    assert stats["commit_lag_ms"]["p50"] is not None and stats["committed"] == 1
