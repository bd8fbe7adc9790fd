"""Each abstraction against a brute-force reference computed from the definition."""

from __future__ import annotations

import random
from collections import defaultdict

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mallory.errors import MalloryError
from mallory.timeline.abstraction import (
    Abstraction,
    CodeHistory,
    EventCount,
    EventHistory,
    VectorClock,
    abstract,
    behaviour,
    count_bucket,
    event_type,
    make_abstraction,
)
from mallory.timeline.builder import Committed, TimelineBuilder
from mallory.timeline.event import Event, Kind
from mallory.timeline.window import Timeline, summarize

from .executions import arrival_order, batches, generate

SKEW = 1_000_000


def committed_window(seed: int, n_nodes: int, n_steps: int) -> list[Committed]:
    """A random execution, built by the real builder, cut to a random time window."""
    rng = random.Random(seed)
    ex = generate(rng, n_nodes, n_steps, SKEW)
    timeline = Timeline(TimelineBuilder(skew_ns=SKEW, nodes=ex.nodes))
    for record in arrival_order(rng, ex, batches(rng, ex)):
        timeline.add(record)
    timeline.finish()
    start = timeline.earliest() or 0
    span = n_steps * SKEW
    t0 = start + rng.randint(0, max(1, span // 3))
    t1 = t0 + rng.randint(1, max(2, span))
    return timeline.take(t0, t1)


def happens_before(entries: list[Committed]) -> dict[int, set[int]]:
    """Strict happens-before within the window, by transitive closure of program order and
    message arrows whose both ends are in the window."""
    pos = {id(e): i for i, e in enumerate(entries)}
    succ: dict[int, set[int]] = defaultdict(set)
    last_on_node: dict[str, int] = {}
    for i, e in sorted(enumerate(entries), key=lambda p: (p[1].event.node, p[1].index)):
        prev = last_on_node.get(e.event.node)
        if prev is not None:
            succ[prev].add(i)
        last_on_node[e.event.node] = i
    for i, e in enumerate(entries):
        if e.send is not None and id(e.send) in pos:
            succ[pos[id(e.send)]].add(i)
    before: dict[int, set[int]] = {}
    for i in range(len(entries)):  # all successors reachable from i
        seen, stack = set(), [i]
        while stack:
            for j in succ[stack.pop()]:
                if j not in seen:
                    seen.add(j)
                    stack.append(j)
        before[i] = seen
    return before


@settings(max_examples=80, deadline=None)
@given(seed=st.integers(0, 2**32), n_nodes=st.integers(1, 4), n_steps=st.integers(1, 60))
def test_event_history_equals_pairs_by_definition(seed, n_nodes, n_steps):
    entries = committed_window(seed, n_nodes, n_steps)
    hb = happens_before(entries)
    expected = {
        (b.event.node, event_type(a.event), event_type(b.event))
        for i, a in enumerate(entries)
        for j in hb[i]
        for b in [entries[j]]
    }
    got = abstract(entries, EventHistory())
    assert got.pairs() == expected
    assert got.summary() == frozenset(f"{n}|{a}|{b}" for n, a, b in expected)
    # the inlined hot path and the paper's update/merge interface agree
    generic = EventHistory()
    Abstraction.run(generic, entries)
    assert generic.pairs() == expected


BEHAVIOUR = (Kind.FUNC, Kind.BLOCK, Kind.LOG)


def with_code_events(entries: list[Committed], seed: int) -> list[Committed]:
    """The window with a random half of its local events turned into code and log events
    (the generator makes local events of other kinds only), so code-history has types."""
    rng = random.Random(seed)
    out = []
    for e in entries:
        if e.event.kind not in (Kind.SEND, Kind.RECV) and rng.random() < 0.5:
            kind = rng.choice(BEHAVIOUR)
            event = e.event._replace(kind=kind, id=rng.randint(1, 5))
            e = Committed(event, e.real_ns, e.lamport, e.index, e.send)
        out.append(e)
    return out


@settings(max_examples=80, deadline=None)
@given(seed=st.integers(0, 2**32), n_nodes=st.integers(1, 4), n_steps=st.integers(1, 60))
def test_code_history_equals_behaviour_pairs_and_links_by_definition(seed, n_nodes, n_steps):
    """Pairs of code/log events related by happens-before (packets carry causality but are
    no types), and a link token per message sent and received inside the window."""
    entries = with_code_events(committed_window(seed, n_nodes, n_steps), seed)
    hb = happens_before(entries)
    expected = {
        (b.event.node, event_type(a.event), event_type(b.event))
        for i, a in enumerate(entries)
        for j in hb[i]
        for b in [entries[j]]
        if a.event.kind in BEHAVIOUR and b.event.kind in BEHAVIOUR
    }
    pos = {id(e) for e in entries}
    links = {(e.send.event.node, e.event.node) for e in entries if e.send is not None and id(e.send) in pos}
    got = abstract(entries, CodeHistory())
    assert got.pairs() == expected
    assert got.links() == links
    assert got.summary() == frozenset(f"{n}|{a}|{b}" for n, a, b in expected) | {f"link|{a}>{b}" for a, b in links}
    seen = behaviour(entries)
    crossing = {
        f"{event_type(a.event)}{'>' if a.event.node == b.event.node else '~>'}{event_type(b.event)}"
        for i, a in enumerate(entries)
        for j in hb[i]
        for b in [entries[j]]
        if a.event.kind in BEHAVIOUR and b.event.kind in BEHAVIOUR
    }
    assert seen.pairs == crossing
    assert {p.replace("~>", ">") for p in seen.pairs} == frozenset(f"{a}>{b}" for _, a, b in expected)
    assert seen.types == frozenset(event_type(e.event) for e in entries if e.event.kind in BEHAVIOUR)


def test_code_history_ignores_payload_bytes_and_client_ops():
    """Two windows that differ only in what their packets carried and which client ops ran
    are the same behaviour."""

    def window(payload: str, op: str) -> list[Committed]:
        send = Committed(Event("n1", Kind.SEND, 1, 7, payload), 1, 1, 0, None)
        recv = Committed(Event("n2", Kind.RECV, 2, 7, payload), 2, 2, 0, send)
        code = Committed(Event("n2", Kind.FUNC, 3, 9, ""), 3, 3, 1, None)
        client = Committed(Event("mediator", Kind.CLIENT_COMPLETE, 4, 1, op), 4, 4, 0, None)
        before = Committed(Event("n1", Kind.BLOCK, 0, 4, ""), 0, 0, 0, None)
        return [before, send, recv, code, client]

    a, b = window("41203120", "write:ok"), window("24352c30", "read:fail")
    assert summarize(a, "code-history") == summarize(b, "code-history")
    assert summarize(a, "code-history") == {"n2|BLOCK:4|FUNC:9", "link|n1>n2"}
    assert summarize(a, "event-history") != summarize(b, "event-history")


def message_window(data: str) -> list[Committed]:
    """n1's code event, then its packet (`data`) to n2, which runs a code event on it."""
    before = Committed(Event("n1", Kind.BLOCK, 0, 4, ""), 0, 0, 0, None)
    send = Committed(Event("n1", Kind.SEND, 1, 7, data), 1, 1, 1, None)
    recv = Committed(Event("n2", Kind.RECV, 2, 7, data), 2, 2, 0, send)
    code = Committed(Event("n2", Kind.FUNC, 3, 9, ""), 3, 3, 1, None)
    return [before, send, recv, code]


def test_packets_are_typed_by_their_message_types_or_by_their_payload_bytes():
    """A declared flow's packet carries both (packet_data); `packet_types` picks one, and
    a packet of an undeclared flow is its bytes either way."""
    one, two = message_window("append#41203120"), message_window("append#41203230")
    assert summarize(one, "event-history") == summarize(two, "event-history")
    assert "n2|SEND:append|RECV:append" in summarize(one, "event-history")
    assert summarize(one, "event-history", "bytes") != summarize(two, "event-history", "bytes")
    assert "n2|SEND:41203120|RECV:41203120" in summarize(one, "event-history", "bytes")
    plain = message_window("41203120")
    assert summarize(plain, "event-history") == summarize(plain, "event-history", "bytes") \
        == summarize(one, "event-history", "bytes")
    assert event_type(one[1].event) == "SEND:append" and event_type(plain[1].event) == "SEND:41203120"
    counts = abstract(one, make_abstraction("event-count", "bytes"))
    assert counts.counts()["n1"] == {"BLOCK:4": 1, "SEND:41203120": 1}
    with pytest.raises(MalloryError, match="packet types 'words': choose one of messages, bytes"):
        make_abstraction("event-history", "words")


def test_message_history_is_code_history_with_declared_messages_as_types():
    typed = summarize(message_window("append#41203120"), "message-history")
    assert typed == {"n1|BLOCK:4|SEND:append", "n2|BLOCK:4|RECV:append", "n2|SEND:append|RECV:append",
                     "n2|BLOCK:4|FUNC:9", "n2|SEND:append|FUNC:9", "n2|RECV:append|FUNC:9", "link|n1>n2"}
    code = summarize(message_window("append#41203120"), "code-history")
    # continuations, lost sync and undeclared flows are carriers only, and under payload
    # bytes no packet names a message: code-history then
    for data in ("cont#cont", "?#41203120", "41203120"):
        assert summarize(message_window(data), "message-history") == code
    assert summarize(message_window("append#41203120"), "message-history", "bytes") == code


@settings(max_examples=80, deadline=None)
@given(seed=st.integers(0, 2**32), n_nodes=st.integers(1, 4), n_steps=st.integers(1, 60))
def test_vector_clock_equals_reference_clocks(seed, n_nodes, n_steps):
    entries = committed_window(seed, n_nodes, n_steps)
    hb = happens_before(entries)
    last: dict[str, int] = {}
    for i, e in enumerate(entries):
        if e.event.node not in last or e.index > entries[last[e.event.node]].index:
            last[e.event.node] = i
    expected = {}
    for node, i in last.items():
        clock: dict[str, int] = defaultdict(int)
        for j, e in enumerate(entries):
            if j == i or i in hb[j]:
                clock[e.event.node] += 1
        expected[node] = dict(clock)
    assert abstract(entries, VectorClock()).clocks() == expected


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**32), n_steps=st.integers(1, 80))
def test_event_count_counts_types_per_node(seed, n_steps):
    entries = committed_window(seed, 3, n_steps)
    expected: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for e in entries:
        expected[e.event.node][event_type(e.event)] += 1
    got = abstract(entries, EventCount())
    assert got.counts() == {n: dict(c) for n, c in expected.items()}
    assert got.summary() == frozenset(
        f"{n}|{t}|{count_bucket(k)}" for n, c in expected.items() for t, k in c.items()
    )


def test_count_buckets_follow_afl():
    assert [count_bucket(n) for n in (1, 2, 3, 4, 7, 8, 15, 16, 31, 32, 127, 128, 10**6)] == [
        1, 2, 3, 4, 4, 8, 8, 16, 16, 32, 32, 128, 128,
    ]


def test_packet_ids_never_enter_a_type():
    a = Event("n1", Kind.SEND, 1, 111, "abcd")
    b = Event("n1", Kind.SEND, 2, 222, "abcd")
    assert event_type(a) == event_type(b) == "SEND:abcd"
    assert event_type(Event("n1", Kind.FUNC, 1, 0x1F, "")) == "FUNC:1f"


def test_window_markers_and_faults_are_not_behaviour():
    marker = Committed(Event("n1", Kind.WINDOW_START, 1, 0, ""), 1, 1, 0, None)
    fault = Committed(Event("mediator", Kind.FAULT, 1, 0, "partition:majority"), 1, 1, 0, None)
    func = Committed(Event("n1", Kind.FUNC, 2, 5, ""), 2, 2, 1, None)
    assert summarize([marker, fault, func]) == summarize([func])


def test_unknown_abstraction_names_the_choices():
    with pytest.raises(MalloryError, match="event-history"):
        make_abstraction("nope")


def test_event_history_caps_the_payload_types_of_a_window():
    """Open-ended payload bytes (a stream's chunks) share one "other" type past the cap, so
    the summary stays bounded; code events keep their own types whatever the cap."""
    from mallory.timeline.abstraction import MAX_PAYLOAD_TYPES

    entries = []
    for i in range(3 * MAX_PAYLOAD_TYPES):
        entries.append(Committed(Event("n1", Kind.SEND, 2 * i, i, f"{i:08x}"), 2 * i, 2 * i, 2 * i, None))
        entries.append(Committed(Event("n1", Kind.FUNC, 2 * i + 1, 10_000 + i, ""), 2 * i + 1, 2 * i + 1, 2 * i + 1, None))
    history = EventHistory()
    history.run(entries)
    types = {t for _, a, b in history.pairs() for t in (a, b)}
    sends = {t for t in types if t.startswith("SEND:")}
    assert len(sends) == MAX_PAYLOAD_TYPES + 1 and "SEND:other" in sends
    assert len([t for t in types if t.startswith("FUNC:")]) == 3 * MAX_PAYLOAD_TYPES
    # the same cap through update() (the reference path) as through the inlined run()
    stepwise = EventHistory()
    for entry in entries:
        stepwise.update(entry)
    assert stepwise.summary() == history.summary()
