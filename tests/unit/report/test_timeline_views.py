"""Vector clocks, ShiViz export and the SVG timeline on synthetic streams (pure)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from mallory.report.names import EventNamer
from mallory.report.shiviz import SHIVIZ_REGEX, shiviz_log
from mallory.report.timeline_view import (
    FaultSpan,
    Section,
    fault_spans,
    head_by_time,
    schedule_sections,
    tail_by_time,
    timeline_svg,
)
from mallory.report.vclock import happened_before, vector_clocks
from mallory.timeline.event import Batch, ClockPair, Event, Kind
from mallory.timeline.synthetic import synthetic_stream
from tests.unit.report.timeline_checks import (
    ancestors,
    assert_view_matches,
    committed,
    parse_shiviz,
    svg_elements,
)


def synthetic(seed: int, n: int = 240) -> list:
    return committed(synthetic_stream(n, n_nodes=3, packet_share=0.5, events_per_s=2000, seed=seed))


def hand_built() -> list:
    """n1 sends to n2 (packet 7), n2 sends back (packet 8); n3 is concurrent."""
    records = [ClockPair(n, 0, 1_000) for n in ("n1", "n2", "n3")]
    records += [
        Batch("n1", 0, 100, [Event("n1", Kind.FUNC, 10, 1), Event("n1", Kind.SEND, 20, 7, "aa"),
                             Event("n1", Kind.RECV, 60, 8)]),
        Batch("n2", 0, 100, [Event("n2", Kind.RECV, 30, 7, "aa"), Event("n2", Kind.SEND, 40, 8)]),
        Batch("n3", 0, 100, [Event("n3", Kind.BLOCK, 35, 2)]),
    ]
    return committed(records, ["n1", "n2", "n3"])


def test_vector_clocks_by_hand():
    entries = hand_built()
    clocks = {f"{e.event.node}#{e.index}": c for e, c in zip(entries, vector_clocks(entries))}
    assert clocks == {
        "n1#0": {"n1": 1}, "n1#1": {"n1": 2}, "n2#0": {"n1": 2, "n2": 1}, "n2#1": {"n1": 2, "n2": 2},
        "n1#2": {"n1": 3, "n2": 2}, "n3#0": {"n3": 1},
    }


@settings(max_examples=15, deadline=None)
@given(st.integers(1, 10_000))
def test_vector_clocks_characterise_happens_before(seed):
    entries = synthetic(seed)
    clocks = vector_clocks(entries)
    before = ancestors(entries)
    assert any(e.send is not None for e in entries), "the stream has messages"
    for j in range(len(entries)):
        for i in range(len(entries)):
            if i != j:
                assert happened_before(clocks[i], clocks[j]) == bool(before[j] >> i & 1), (entries[i], entries[j])


@settings(max_examples=10, deadline=None)
@given(st.integers(1, 10_000), st.integers(20, 240))
def test_shiviz_log_parses_with_shiviz_regex_and_counts_from_one(seed, keep):
    entries = tail_by_time(synthetic(seed), keep)
    regex, delimiter, events = parse_shiviz(shiviz_log(entries, EventNamer()))
    assert regex == SHIVIZ_REGEX and delimiter == ""
    assert len(events) == len(entries)
    seen: dict[str, int] = {}
    for (text, host, clock), entry in zip(events, entries):
        assert host == entry.event.node and f"({host}#{entry.index} " in text
        seen[host] = seen.get(host, 0) + 1
        assert clock[host] == seen[host], "a host's own component counts its events from 1"


def test_svg_shows_every_event_and_message_in_causal_order():
    entries = hand_built()
    svg = timeline_svg(entries, EventNamer(), [FaultSpan("partition:one n1", 1_030, 1_050)])
    assert_view_matches(svg, entries)
    _, arrows, faults = svg_elements(svg)
    assert len(arrows) == 2
    assert [f["data-fault"] for f in faults] == ["partition:one n1"]


@settings(max_examples=10, deadline=None)
@given(st.integers(1, 10_000), st.integers(20, 240))
def test_svg_of_a_tail_holds_exactly_that_tail(seed, keep):
    entries = tail_by_time(synthetic(seed), keep)
    assert_view_matches(timeline_svg(entries, EventNamer()), entries)


def test_message_types_label_their_arrows_and_name_their_packets_in_both_views():
    records = [ClockPair(n, 0, 1_000) for n in ("n1", "n2")]
    records += [
        Batch("n1", 0, 100, [Event("n1", Kind.SEND, 20, 7, "append-entries+timeout-now"),
                             Event("n1", Kind.RECV, 60, 8, "17030300")]),
        Batch("n2", 0, 100, [Event("n2", Kind.RECV, 30, 7, "append-entries+timeout-now"),
                             Event("n2", Kind.SEND, 40, 8, "17030300")]),
    ]
    entries = committed(records, ["n1", "n2"])
    svg = timeline_svg(entries, EventNamer())
    assert_view_matches(svg, entries)
    _, arrows, _ = svg_elements(svg)
    labels = {a["data-send"]: a.get("data-message") for a in arrows}
    assert labels == {"n1#0": "append-entries+timeout-now", "n2#1": None}  # payload hex is no message type
    assert svg.count('class="msg-label"') == 1
    _, _, events = parse_shiviz(shiviz_log(entries, EventNamer()))
    texts = [text for text, _, _ in events]
    assert any(t.startswith("SEND send append-entries+timeout-now -> n2 ") for t in texts)
    assert any(t.startswith("SEND send [17030300] -> n1 ") for t in texts)


def test_fault_spans_last_until_heal_or_the_schedule_end():
    schedule = {"ended_ns": 100, "steps": [
        {"action": "partition:one", "window_ns": [10, 20], "report": {"nodes": ["n1"], "started_ns": 11}},
        {"action": "kill:one", "window_ns": [20, 30], "refused": "no target"},
        {"action": "heal", "window_ns": [30, 40]},
        {"action": "noop", "window_ns": [40, 50]},
        {"action": "pause:one", "window_ns": [50, 60], "report": {"nodes": ["n2"]}},
    ]}
    assert fault_spans(schedule) == [FaultSpan("partition:one n1", 11, 30), FaultSpan("pause:one n2", 50, 100)]


def test_sections_cover_the_schedule_from_its_first_step_contiguously():
    schedule = {"ended_ns": 100, "steps": [
        {"step": 0, "action": "partition:one", "window_ns": [10, 20]},
        {"step": 1, "action": "kill:one", "window_ns": [22, 32], "refused": "no target"},
        {"step": 2, "action": "heal", "window_ns": [35, 45]},
    ]}
    assert schedule_sections(schedule) == [
        Section("step 0: partition:one", 10, 22), Section("step 1: kill:one (refused)", 22, 35),
        Section("step 2: heal", 35, 45), Section("reset", 45, 100),
    ]


def test_head_and_tail_keep_causal_order_and_whole_instants():
    entries = synthetic(5)
    head, tail = head_by_time(entries, 50), tail_by_time(entries, 50)
    times = sorted(e.real_ns for e in entries)
    assert {id(e) for e in head} == {id(e) for e in entries if e.real_ns <= times[49]}
    assert {id(e) for e in tail} == {id(e) for e in entries if e.real_ns >= times[-50]}
    order = {id(e): i for i, e in enumerate(entries)}
    assert [order[id(e)] for e in head] == sorted(order[id(e)] for e in head)
    assert [order[id(e)] for e in tail] == sorted(order[id(e)] for e in tail)
