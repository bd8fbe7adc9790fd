"""The prefix-closed Lamport timeline under every arrival order a real cluster produces."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mallory.timeline.builder import BatchRejected, Committed, TimelineBuilder
from mallory.timeline.event import Batch, ClockPair, Event, Kind

from .executions import Execution, arrival_order, batches, generate

SKEW = 1_000_000  # 1 ms bound keeps generated times small; the logic does not depend on scale


def _key(entry: Committed) -> tuple[str, int]:
    return (entry.event.node, entry.index)


def check_closed(ex: Execution, committed: dict[tuple[str, int], Committed]) -> None:
    """Every committed event has all its causal predecessors committed, with the true links."""
    for (node, index), entry in committed.items():
        assert entry.event == ex.events[node][index], "events committed out of node order"
        if index > 0:
            assert (node, index - 1) in committed, f"{node}#{index} committed before {node}#{index - 1}"
        if entry.event.kind is Kind.RECV:
            truth = ex.link[(node, index)]
            if truth is not None:
                assert truth in committed, f"RECV {node}#{index} committed before its SEND {truth}"
                assert entry.send is not None and _key(entry.send) == truth, "RECV linked to the wrong SEND"
            else:
                assert entry.send is None


def build(ex: Execution, order: list, check_each_step: bool) -> dict[tuple[str, int], Committed]:
    builder = TimelineBuilder(skew_ns=SKEW, nodes=ex.nodes)
    committed: dict[tuple[str, int], Committed] = {}
    for record in order:
        if isinstance(record, ClockPair):
            builder.add_clock(record)
        else:
            builder.add_batch(record)
        for entry in builder.drain():
            assert _key(entry) not in committed, "event committed twice"
            committed[_key(entry)] = entry
        if check_each_step:
            check_closed(ex, committed)
    builder.finish()
    for entry in builder.drain():
        committed[_key(entry)] = entry
    return committed


def assert_equals_truth(ex: Execution, committed: dict[tuple[str, int], Committed]) -> None:
    expected = {(n, i) for n, evs in ex.events.items() for i in range(len(evs))}
    assert set(committed) == expected
    check_closed(ex, committed)
    for key, entry in committed.items():
        assert entry.lamport == ex.lamport[key], f"Lamport time of {key}"
    # the pending targets were resolved: every SEND lists exactly the RECVs that received it
    for key, entry in committed.items():
        if entry.event.kind is Kind.SEND:
            receivers = {k for k, v in ex.link.items() if v == key}
            assert set(entry.recvs) == receivers


@settings(max_examples=400, deadline=None)
@given(
    seed=st.integers(0, 2**32),
    n_nodes=st.integers(1, 5),
    n_steps=st.integers(0, 120),
    max_batch=st.integers(1, 8),
    locality=st.integers(0, 6),
)
def test_any_arrival_order_commits_the_offline_timeline(seed, n_nodes, n_steps, max_batch, locality):
    rng = random.Random(seed)
    ex = generate(rng, n_nodes, n_steps, SKEW)
    order = arrival_order(rng, ex, batches(rng, ex, max_batch), locality)
    committed = build(ex, order, check_each_step=True)
    assert_equals_truth(ex, committed)


def offline(ex: Execution) -> dict[tuple[str, int], Committed]:
    """The timeline built from the complete execution delivered in order."""
    order = [ex.clocks[n] for n in ex.nodes]
    for n in ex.nodes:
        order.append(Batch(n, 0, ex.events[n][-1].ts if ex.events[n] else 0, list(ex.events[n])))
    return build(ex, order, check_each_step=False)


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**32), n_nodes=st.integers(2, 5), shuffles=st.integers(2, 4))
def test_online_equals_offline_for_several_orders(seed, n_nodes, shuffles):
    rng = random.Random(seed)
    ex = generate(rng, n_nodes, 80, SKEW)
    reference = {k: (e.lamport, e.send and _key(e.send)) for k, e in offline(ex).items()}
    for _ in range(shuffles):
        order = arrival_order(rng, ex, batches(rng, ex), locality=5)
        online = {k: (e.lamport, e.send and _key(e.send)) for k, e in build(ex, order, False).items()}
        assert online == reference


@settings(max_examples=200, deadline=None)
@given(seed=st.integers(0, 2**32), n_nodes=st.integers(2, 4), max_queue=st.integers(1, 6))
def test_a_bounded_queue_only_ever_drops_links_and_says_where(seed, n_nodes, max_queue):
    """Under any arrival order, forcing RECVs (MAX_QUEUE) keeps every node's order and every
    link it makes true; a RECV missing its true SEND was forced, and before lost_until_ns."""
    rng = random.Random(seed)
    ex = generate(rng, n_nodes, 80, SKEW)
    builder = TimelineBuilder(skew_ns=SKEW, nodes=ex.nodes, max_queue=max_queue)
    committed: dict[tuple[str, int], Committed] = {}
    order = arrival_order(rng, ex, batches(rng, ex), locality=3)
    order.sort(key=lambda r: not isinstance(r, ClockPair))  # clocks first, as observers send them
    for record in order:
        if isinstance(record, ClockPair):
            builder.add_clock(record)
        else:
            builder.add_batch(record)
        for entry in builder.drain():
            assert _key(entry) not in committed, "event committed twice"
            committed[_key(entry)] = entry
            assert all(len(s.queue) <= max_queue for s in builder._streams.values())
    builder.finish()
    committed.update((_key(e), e) for e in builder.drain())
    assert set(committed) == {(n, i) for n, evs in ex.events.items() for i in range(len(evs))}
    unlinked = 0
    for (node, index), entry in committed.items():
        assert entry.event == ex.events[node][index]
        if entry.event.kind is Kind.RECV and entry.send is not None:
            assert _key(entry.send) == ex.link[(node, index)], "a RECV linked to the wrong SEND"
        elif entry.event.kind is Kind.RECV and ex.link[(node, index)] is not None:
            unlinked += 1
            assert builder.lost_until_ns is not None and entry.real_ns < builder.lost_until_ns
    assert unlinked <= builder.forced_recvs


def test_recv_before_send_waits_then_links():
    b = TimelineBuilder(skew_ns=SKEW)
    b.add_clock(ClockPair("a", 0, 0))
    b.add_clock(ClockPair("b", 0, 0))
    b.add_batch(Batch("b", 0, 10_000_000, [Event("b", Kind.RECV, 5_000, 42, "01"), Event("b", Kind.FUNC, 6_000, 1)]))
    assert b.drain() == [], "a RECV must wait while its sender's stream is incomplete"
    b.add_batch(Batch("a", 0, 10_000_000, [Event("a", Kind.SEND, 4_000, 42, "01")]))
    send, recv, func = b.drain()
    assert recv.send is send and send.recvs == [_key(recv)]
    assert (send.lamport, recv.lamport, func.lamport) == (1, 2, 3)


def test_recv_without_send_commits_once_others_pass_the_skew_bound():
    b = TimelineBuilder(skew_ns=SKEW)
    b.add_clock(ClockPair("a", 0, 0))
    b.add_clock(ClockPair("b", 0, 0))
    b.add_batch(Batch("b", 0, 10_000, [Event("b", Kind.RECV, 5_000, 99, "")]))
    b.add_batch(Batch("a", 0, 5_000 + SKEW - 1, []))
    assert b.drain() == [], "the SEND could still come: a's stream ends before recv time + skew"
    b.add_batch(Batch("a", 1, 5_000 + SKEW, []))
    (recv,) = b.drain()
    assert recv.send is None and b.unmatched_recvs == 1


def test_a_send_points_to_a_pending_target_resolved_later():
    b = TimelineBuilder(skew_ns=SKEW)
    for n in "ab":
        b.add_clock(ClockPair(n, 0, 0))
    b.add_batch(Batch("a", 0, 100, [Event("a", Kind.SEND, 50, 7, "")]))
    (send,) = b.drain()
    assert send.recvs == []
    b.add_batch(Batch("b", 0, 200, [Event("b", Kind.RECV, 150, 7, ""), Event("b", Kind.RECV, 160, 7, "")]))
    first, duplicate = b.drain()
    assert send.recvs == [_key(first), _key(duplicate)], "a duplicated packet is received twice from one SEND"


def test_events_wait_for_their_nodes_clock_pair():
    b = TimelineBuilder(skew_ns=SKEW)
    b.add_batch(Batch("a", 0, 100, [Event("a", Kind.FUNC, 50, 1)]))
    assert b.drain() == []
    b.add_clock(ClockPair("a", 0, 1_000))
    (entry,) = b.drain()
    assert entry.real_ns == 1_050


def test_duplicate_batches_are_counted_and_ignored():
    b = TimelineBuilder()
    b.add_clock(ClockPair("a", 0, 0))
    batch = Batch("a", 0, 100, [Event("a", Kind.FUNC, 50, 1)])
    b.add_batch(batch)
    b.add_batch(batch)
    assert len(b.drain()) == 1 and b.duplicate_batches == 1


def test_unknown_node_is_rejected_when_the_cluster_is_fixed():
    b = TimelineBuilder(nodes=["a"])
    with pytest.raises(BatchRejected, match="unknown node 'z'"):
        b.add_batch(Batch("z", 0, 0, []))


def test_long_ping_pong_does_not_recurse():
    """All of one node's batches first, then the other's: each SEND wakes the peer once."""
    b = TimelineBuilder(skew_ns=SKEW)
    a_events, b_events = [], []
    for i in range(5000):
        a_events += [Event("a", Kind.RECV, 4 * i + 1, 2 * i, ""), Event("a", Kind.SEND, 4 * i + 2, 2 * i + 1, "")]
        b_events += [Event("b", Kind.SEND, 4 * i, 2 * i, ""), Event("b", Kind.RECV, 4 * i + 3, 2 * i + 1, "")]
    for n in "ab":
        b.add_clock(ClockPair(n, 0, 0))
    b.add_batch(Batch("a", 0, 4 * 5000, a_events))
    b.add_batch(Batch("b", 0, 4 * 5000, b_events))
    entries = b.drain()
    assert len(entries) == 20000
    assert max(e.lamport for e in entries) == 20000


def test_memory_of_sends_is_bounded_by_the_link_timeout():
    b = TimelineBuilder(skew_ns=10, link_timeout_ns=1_000)
    b.add_clock(ClockPair("a", 0, 0))
    b.add_clock(ClockPair("b", 0, 0))
    for i in range(100):  # SENDs that are never received (dropped packets)
        b.add_batch(Batch("a", i, i * 100 + 50, [Event("a", Kind.SEND, i * 100, i + 1, "")]))
        b.add_batch(Batch("b", i, i * 100 + 50, []))
    assert b.stats()["sends_remembered"] <= 12


def test_sends_remembered_are_bounded_in_number_even_while_a_node_is_silent():
    """At a high packet rate the link timeout alone keeps rate x 30 s of SENDs; and while a
    node has sent no batch the frontier is unknown, so no timeout applies at all."""
    b = TimelineBuilder(skew_ns=10, nodes=["a", "b", "c"], max_sends=50)
    for n in "abc":
        b.add_clock(ClockPair(n, 0, 0))
    for i in range(200):  # c stays silent: frontier None
        b.add_batch(Batch("a", i, i * 100 + 50, [Event("a", Kind.SEND, i * 100, i + 1, "")]))
    assert b.frontier_ns is None and b.committed_total == 200
    assert b.stats()["sends_remembered"] == 50
    # the newest are the ones kept: a RECV of SEND #200 links, one of SEND #1 does not
    b.add_batch(Batch("b", 0, 30_000, [Event("b", Kind.RECV, 20_000, 200, ""), Event("b", Kind.RECV, 20_001, 1, "")]))
    b.add_batch(Batch("c", 0, 30_000, []))
    b.add_batch(Batch("a", 200, 30_000, []))
    recv_new, recv_old = b.drain()[-2:]
    assert recv_new.send is not None and recv_new.send.event.id == 200
    assert recv_old.send is None and b.unmatched_recvs == 1, "forgotten: it commits unmatched once no SEND can come"


def test_committed_entries_hold_no_reference_cycles():
    """Released windows must be freed by reference counting alone (see Committed.recvs)."""
    import gc

    b = TimelineBuilder(skew_ns=SKEW)
    for n in "ab":
        b.add_clock(ClockPair(n, 0, 0))
    b.add_batch(Batch("a", 0, 100, [Event("a", Kind.SEND, 50, 7, "")]))
    b.add_batch(Batch("b", 0, 200, [Event("b", Kind.RECV, 150, 7, "")]))
    entries = b.drain()
    gc.collect()
    gc.disable()
    try:
        assert gc.collect() == 0
        del entries
        b._sends.clear()
        b._send_order.clear()
        assert gc.collect() == 0, "a SEND/RECV pair was kept alive only by a cycle"
    finally:
        gc.enable()


def test_a_gap_that_never_fills_is_given_up_beyond_max_early_and_counted():
    """a's batch 1 never comes (refused, then acknowledged with the next): without the
    bound every later batch of a waited behind it, and a's horizon, so the frontier, stood
    still. Beyond max_early events the builder goes on from batch 2 and says what is lost."""
    b = TimelineBuilder(skew_ns=10, nodes=["a", "b"], max_early=5)
    for n in "ab":
        b.add_clock(ClockPair(n, 0, 1_000))
    b.add_batch(Batch("a", 0, 100, [Event("a", Kind.FUNC, 50, 1)]))
    b.add_batch(Batch("b", 0, 10_000, []))
    assert len(b.drain()) == 1 and b.frontier_ns == 1_100
    for seq in range(2, 4):  # 2 batches of one event: weight 4, within the bound
        b.add_batch(Batch("a", seq, seq * 100 + 90, [Event("a", Kind.FUNC, seq * 100, seq)]))
    assert b.drain() == [] and b.stats()["early_batches"]["a"] == 2 and b.lost_until_ns is None
    b.add_batch(Batch("a", 4, 490, [Event("a", Kind.FUNC, 400, 4)]))  # weight 6 > 5: the gap goes
    assert [e.event.id for e in b.drain()] == [2, 3, 4]
    stats = b.stats()
    assert stats["early_batches"]["a"] == 0 and stats["skipped_batches"] == {"a": 1, "b": 0}
    assert b.frontier_ns == 1_490, "a's horizon moves on"
    assert b.lost_until_ns == 1_000 + 200 + 1, "what batch 1 held was no later than batch 2's first event"
    b.add_batch(Batch("a", 1, 150, [Event("a", Kind.FUNC, 120, 9)]))
    assert b.drain() == [] and b.duplicate_batches == 1, "a skipped batch that comes after all is dropped"


def test_early_batches_stay_within_max_early_whatever_the_stream():
    b = TimelineBuilder(nodes=["a"], max_early=100)
    b.add_clock(ClockPair("a", 0, 0))
    for seq in range(1, 2_000):  # seq 0 never comes; a few events a batch, and empty batches
        events = [Event("a", Kind.FUNC, seq * 10 + i, 1) for i in range(seq % 4)]
        b.add_batch(Batch("a", seq, seq * 10 + 9, events))
        stream = b._streams["a"]
        assert sum(1 + len(x.events) for x in stream.early.values()) == stream.early_weight <= 100
    assert b.stats()["skipped_batches"]["a"] == 1 and b.committed_total == sum(s % 4 for s in range(1, 2_000))


def test_a_gap_given_up_before_the_clock_pair_is_placed_when_it_comes():
    b = TimelineBuilder(nodes=["a"], max_early=1)
    b.add_batch(Batch("a", 1, 200, [Event("a", Kind.FUNC, 150, 1)]))  # weight 2 > 1
    assert b.stats()["skipped_batches"]["a"] == 1 and b.lost_until_ns is None, "no time axis yet"
    b.add_clock(ClockPair("a", 0, 5_000))
    assert [e.real_ns for e in b.drain()] == [5_150] and b.lost_until_ns == 5_150 + 1


def test_a_queue_behind_a_recv_from_outside_is_bounded_while_a_node_is_never_heard_from():
    """c's observer never connects (the cluster is fixed), so no RECV without a SEND can
    commit on b: without the bound b's queue took b's whole stream. Beyond max_queue the
    oldest blocked RECV commits without its SEND, counted, and windows over it are marked."""
    b = TimelineBuilder(skew_ns=10, nodes=["a", "b", "c"], max_queue=100)
    for n in "ab":
        b.add_clock(ClockPair(n, 0, 0))
    b.add_batch(Batch("a", 0, 10**9, []))
    committed = []
    for seq in range(50):  # a client's request (a RECV no node sent) and 9 code events, each batch
        t = seq * 100
        events = [Event("b", Kind.RECV, t, 10_000 + seq, "req")] + [Event("b", Kind.FUNC, t + i, i) for i in range(1, 10)]
        b.add_batch(Batch("b", seq, t + 99, events))
        committed += b.drain()
        assert b.stats()["pending"]["b"] <= 100
    forced = [e for e in committed if e.event.kind is Kind.RECV]
    assert len(forced) == b.forced_recvs == 40 and b.unmatched_recvs == 0
    assert all(e.send is None for e in forced)
    assert b.lost_until_ns == forced[-1].real_ns + 1
    assert b.stats()["forced_recvs"] == 40
    b.add_clock(ClockPair("c", 0, 0))
    b.add_batch(Batch("c", 0, 10**9, []))  # c is heard from: the rest commit as before, unforced
    rest = b.drain()
    assert len(committed) + len(rest) == 500 and b.forced_recvs == 40 and b.unmatched_recvs == 10


def test_a_recv_waiting_for_a_send_stuck_in_another_queue_is_forced_beyond_max_queue():
    """a's SEND is queued behind a RECV that cannot commit (c has sent no batch); b's RECV
    of it waits for it, and b's queue behind that RECV is bounded too."""
    b = TimelineBuilder(skew_ns=10, nodes=["a", "b", "c"], max_queue=20)
    for n in "abc":
        b.add_clock(ClockPair(n, 0, 0))
    b.add_batch(Batch("a", 0, 10, [Event("a", Kind.RECV, 1, 555, "req"), Event("a", Kind.SEND, 2, 77, "x")]))
    b.add_batch(Batch("b", 0, 100, [Event("b", Kind.RECV, 5, 77, "x")] + [Event("b", Kind.FUNC, 6 + i, 1) for i in range(19)]))
    assert b.drain() == [] and b.stats()["pending"]["b"] == 20, "at the bound, not beyond: b waits"
    b.add_batch(Batch("b", 1, 200, [Event("b", Kind.FUNC, 150, 2)]))
    entries = b.drain()
    assert len(entries) == 21 and b.forced_recvs == 1 and b.stats()["pending"] == {"a": 2, "b": 0, "c": 0}
    assert entries[0].event.id == 77 and entries[0].send is None
    assert b.lost_until_ns == 5 + 1, "windows over the RECV may miss its link"
    b.add_batch(Batch("c", 0, 10**9, []))  # c is heard from: a's RECV commits unmatched, then its SEND
    send = [e for e in b.drain() if e.event.kind is Kind.SEND]
    assert len(send) == 1 and send[0].recvs == [] and b.unmatched_recvs == 1


def test_batches_before_a_clock_pair_are_refused_beyond_max_queue():
    b = TimelineBuilder(nodes=["a"], max_queue=10)
    b.add_batch(Batch("a", 0, 100, [Event("a", Kind.FUNC, t, 1) for t in range(8)]))
    with pytest.raises(BatchRejected, match="more than 10 events before its clock pair"):
        b.add_batch(Batch("a", 1, 200, [Event("a", Kind.FUNC, 100 + t, 1) for t in range(3)]))
    b.add_clock(ClockPair("a", 0, 0))
    assert len(b.drain()) == 8, "what was taken before is kept"
    b.add_batch(Batch("a", 1, 200, [Event("a", Kind.FUNC, 100 + t, 1) for t in range(3)]))
    assert len(b.drain()) == 3


def test_the_bounds_must_be_positive():
    for bound in ("max_sends", "max_early", "max_queue"):
        with pytest.raises(ValueError):
            TimelineBuilder(**{bound: 0})
