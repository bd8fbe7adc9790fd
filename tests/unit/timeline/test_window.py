"""Windows over the committed timeline: complete before taken, late entries counted."""

from mallory.timeline.builder import Committed, TimelineBuilder
from mallory.timeline.event import Batch, ClockPair, Event, Kind
from mallory.timeline.window import EntryBuffer, Timeline


def test_window_is_complete_only_when_every_node_has_passed_its_end():
    t = Timeline(TimelineBuilder(skew_ns=0, nodes=["a", "b"]))
    t.add(ClockPair("a", 0, 0))
    t.add(ClockPair("b", 0, 0))
    t.add(Batch("a", 0, 2_000, [Event("a", Kind.FUNC, 100, 1), Event("a", Kind.FUNC, 1_500, 2)]))
    assert t.origin() is None, "b has said nothing yet: no start is safe"
    assert not t.complete_until(1_000), "b has said nothing yet"
    t.add(Batch("b", 0, 1_000, [Event("b", Kind.FUNC, 900, 3)]))
    assert t.origin() == 100, "the earliest committed entry, not the frontier (1000)"
    assert t.complete_until(1_000) and not t.complete_until(1_001)
    window = t.take(0, 1_000)
    assert [e.event.id for e in window] == [1, 3]
    assert t.pending() == 1 and t.late == 0


def test_origin_is_the_frontier_when_it_is_earlier_than_every_entry():
    """A window starting at the earliest entry would skip events still to commit before it:
    while the frontier is earlier, the frontier is the safe start."""
    t = Timeline(TimelineBuilder(skew_ns=0, nodes=["a", "b"]))
    t.add(ClockPair("a", 0, 0))
    t.add(ClockPair("b", 0, 0))
    t.add(Batch("a", 0, 2_000, [Event("a", Kind.FUNC, 1_500, 1)]))
    t.add(Batch("b", 0, 1_000, []))
    assert t.builder.frontier_ns == 1_000 and t.earliest() == 1_500
    assert t.origin() == 1_000
    t.take(0, 2_000)
    assert t.pending() == 0 and t.origin() == 1_000, "nothing buffered: the frontier"


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


def _entries(*times_ns: int) -> list[Committed]:
    return [Committed(Event("a", Kind.FUNC, t, i), t, i + 1, i, None) for i, t in enumerate(times_ns)]


def test_entry_buffer_peek_leaves_entries_and_release_before_waits_for_its_slack():
    """The mediator's windows peek (a window may be asked again) and release what is older
    than they keep; the slack makes that a pass per slack of stream time, not per batch."""
    buffer = EntryBuffer()
    buffer.add(_entries(100, 200, 300, 400))
    assert [e.real_ns for e in buffer.peek(150, 400)] == [200, 300]
    assert len(buffer) == 4 and buffer.earliest() == 100
    buffer.release_before(250, slack=200)  # the oldest (100) is not yet 200 older than 250
    assert len(buffer) == 4
    buffer.release_before(350, slack=200)
    assert [e.real_ns for e in buffer.peek(0, 1_000)] == [400]
    buffer.release_before(1_000)
    assert len(buffer) == 0 and buffer.earliest() is None and buffer.late == 0
