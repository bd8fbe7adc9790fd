"""Windows over the committed timeline: complete before taken, late entries counted."""

from mallory.timeline.builder import TimelineBuilder
from mallory.timeline.event import Batch, ClockPair, Event, Kind
from mallory.timeline.window import Timeline


def test_window_is_complete_only_when_every_node_has_passed_its_end():
    t = Timeline(TimelineBuilder(skew_ns=0, nodes=["a", "b"]))
    t.add(ClockPair("a", 0, 0))
    t.add(ClockPair("b", 0, 0))
    t.add(Batch("a", 0, 2_000, [Event("a", Kind.FUNC, 100, 1), Event("a", Kind.FUNC, 1_500, 2)]))
    assert t.origin() is None or t.origin() <= 100
    assert not t.complete_until(1_000), "b has said nothing yet"
    t.add(Batch("b", 0, 1_000, [Event("b", Kind.FUNC, 900, 3)]))
    assert t.complete_until(1_000) and not t.complete_until(1_001)
    window = t.take(0, 1_000)
    assert [e.event.id for e in window] == [1, 3]
    assert t.pending() == 1 and t.late == 0


def test_entries_committed_after_their_window_was_taken_are_counted_late():
    t = Timeline(TimelineBuilder(skew_ns=0, nodes=["a", "b"]))
    t.add(ClockPair("a", 0, 0))
    t.add(ClockPair("b", 0, 0))
    t.add(Batch("a", 0, 2_000, [Event("a", Kind.FUNC, 100, 1)]))
    t.add(Batch("b", 0, 500, [Event("b", Kind.FUNC, 400, 2)]))
    assert [e.event.id for e in t.take(0, 1_000)] == [1, 2]  # taken early, on purpose
    t.add(Batch("b", 1, 1_200, [Event("b", Kind.FUNC, 800, 3), Event("b", Kind.FUNC, 1_100, 4)]))
    assert [e.event.id for e in t.take(1_000, 2_000)] == [4]
    assert t.late == 1
