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
