"""The window endpoint on a real in-process mediator and HTTP server (no firewall: no root)."""

from __future__ import annotations

import threading
import time

import pytest

from mallory.errors import MalloryError
from mallory.mediator.client import MediatorClient, TimelineWindows
from mallory.mediator.ingest import Ingest
from mallory.mediator.service import Mediator
from mallory.mediator.windows import WindowService, trace_of
from mallory.timeline.builder import Committed, TimelineBuilder
from mallory.timeline.event import Batch, ClockPair, Event, Kind

NODES = {"n1": "10.9.1.2", "n2": "10.9.2.2"}
TOKEN = "window-test"


@pytest.fixture
def mediator(tmp_path):
    m = Mediator(NODES, token=TOKEN, api_address=("127.0.0.1", 0), batch_address=("127.0.0.1", 0),
                 batch_interval=0.02).start()
    yield m
    m.stop()


def client(m: Mediator) -> MediatorClient:
    host, port = m.api.server_address[:2]
    return MediatorClient(host, port, TOKEN)


def feed(m: Mediator, base: int) -> None:
    """Two nodes whose clocks map mono 0 to real `base`; n1 sends to n2 inside [base, base + 1 s)."""
    for n in NODES:
        m.ingest.on_clock(ClockPair(n, 0, base))
    m.ingest.on_batch(Batch("n1", 0, 2_000_000_000, [Event("n1", Kind.FUNC, 100, 7), Event("n1", Kind.SEND, 200, 99, "abcd")]))
    m.ingest.on_batch(Batch("n2", 0, 2_000_000_000, [Event("n2", Kind.RECV, 300, 99, "abcd"), Event("n2", Kind.FUNC, 400, 8)]))


def test_window_waits_for_completion_then_summarises(mediator):
    base = time.time_ns() - 10_000_000_000
    feed(mediator, base)
    source = TimelineWindows(client(mediator))
    window = source.window(base, base + 1_000_000_000, wait_s=5.0)
    assert window.complete and window.events == 4
    assert "n2|SEND:abcd|FUNC:8" in window.summary, "the message carries n1's history to n2"
    assert "n1|FUNC:7|SEND:abcd" in window.summary


def test_incomplete_window_says_so_after_the_wait(mediator):
    base = time.time_ns() - 10_000_000_000
    feed(mediator, base)
    started = time.monotonic()
    answer = client(mediator).window(base, base + 5_000_000_000, wait_s=0.3)
    assert not answer["complete"] and 0.25 < time.monotonic() - started < 3
    # ... and it completes once the nodes' streams pass its end, while the caller waits
    late = threading.Timer(0.3, lambda: [
        mediator.ingest.on_batch(Batch(n, 1, 6_000_000_000, [])) for n in NODES
    ])
    late.start()
    answer = client(mediator).window(base, base + 5_000_000_000, wait_s=5.0)
    late.join()
    assert answer["complete"] and answer["events"] == 4


def test_a_trace_gives_the_asked_types_in_causal_order_and_misses_nothing_between_windows(mediator):
    base = time.time_ns() - 10_000_000_000
    for n in NODES:
        mediator.ingest.on_clock(ClockPair(n, 0, base))
    ms = 1_000_000
    mediator.ingest.on_batch(Batch("n1", 0, 2_000 * ms, [
        Event("n1", Kind.FUNC, 100 * ms, 7), Event("n1", Kind.SEND, 150 * ms, 99, "abcd"),
        Event("n1", Kind.LOG, 1_050 * ms, 5, "lost-leader"),  # in the gap between the two windows
        Event("n1", Kind.FUNC, 1_500 * ms, 7)]))
    mediator.ingest.on_batch(Batch("n2", 0, 2_000 * ms, [
        Event("n2", Kind.RECV, 120 * ms, 99, "abcd"), Event("n2", Kind.FUNC, 130 * ms, 8)]))
    source = TimelineWindows(client(mediator), trace=frozenset({"FUNC:7", "FUNC:8", "LOG:5"}))
    first = source.window(base, base + 1_000 * ms, wait_s=5.0)
    assert first.trace == (("n1", "FUNC:7"), ("n2", "FUNC:8"))  # the RECV waited for its SEND: causal order
    second = source.window(base + 1_100 * ms, base + 2_000 * ms, wait_s=5.0)
    assert second.trace == (("n1", "LOG:5"), ("n1", "FUNC:7"))
    assert second.events == 1, "the window itself is what it always was: the gap is not summarised"
    untraced = TimelineWindows(client(mediator)).window(base + 2_000 * ms, base + 3_000 * ms, wait_s=0.1)
    assert untraced.trace == ()


def test_restarting_the_trace_leaves_out_what_came_before_the_next_window(mediator):
    base = time.time_ns() - 10_000_000_000
    for n in NODES:
        mediator.ingest.on_clock(ClockPair(n, 0, base))
    ms = 1_000_000
    mediator.ingest.on_batch(Batch("n1", 0, 3_000 * ms, [
        Event("n1", Kind.FUNC, 100 * ms, 7), Event("n1", Kind.FUNC, 1_500 * ms, 8), Event("n1", Kind.FUNC, 2_500 * ms, 7)]))
    mediator.ingest.on_batch(Batch("n2", 0, 3_000 * ms, []))
    source = TimelineWindows(client(mediator), trace=frozenset({"FUNC:7", "FUNC:8"}))
    assert source.window(base, base + 1_000 * ms, wait_s=5.0).trace == (("n1", "FUNC:7"),)
    source.restart_trace()
    assert source.window(base + 2_000 * ms, base + 3_000 * ms, wait_s=5.0).trace == (("n1", "FUNC:7"),)


def committed(node: str, kind: Kind, real_ms: int, ident: int, data: str = "",
              send: Committed | None = None) -> Committed:
    return Committed(Event(node, kind, 0, ident, data), real_ms * 1_000_000, 0, 0, send)


def test_a_trace_places_the_mediators_own_events_by_their_time():
    """As a recorded raft-kv heal went: the heal's FAULT event (+11 ms) committed after the
    first events of the nodes it restarted (+51 ms and later); a client op likewise."""
    entries = [committed("n2", Kind.FUNC, 51, 7), committed("n3", Kind.FUNC, 53, 7),
               committed("mediator", Kind.FAULT, 11, 0, "heal"),
               committed("mediator", Kind.CLIENT_INVOKE, 52, 1, "write:invoke"),
               committed("mediator", Kind.FAULT, 90, 0, "kill:one")]
    types = frozenset({"FUNC:7", "FAULT:heal", "FAULT:kill:one", "CLIENT_INVOKE:write:invoke"})
    assert trace_of(entries, types) == (
        ("mediator", "FAULT:heal"), ("n2", "FUNC:7"), ("mediator", "CLIENT_INVOKE:write:invoke"),
        ("n3", "FUNC:7"), ("mediator", "FAULT:kill:one"))


def test_a_trace_places_a_late_committed_nodes_events_at_their_time():
    """As a recorded example-SUT kill went: n3's last events (0 and 3 ms) committed after
    n1's (19 and 30 ms), and the kill of n3 (27 ms) came between n1's by time: by commit
    order n3 spoke after its kill."""
    entries = [committed("n1", Kind.FUNC, 19, 7), committed("n1", Kind.FUNC, 30, 7),
               committed("n3", Kind.FUNC, 0, 8), committed("n3", Kind.FUNC, 3, 8),
               committed("mediator", Kind.FAULT, 27, 0, "kill:one")]
    types = frozenset({"FUNC:7", "FUNC:8", "FAULT:kill:one"})
    assert trace_of(entries, types) == (
        ("n3", "FUNC:8"), ("n3", "FUNC:8"), ("n1", "FUNC:7"), ("mediator", "FAULT:kill:one"), ("n1", "FUNC:7"))


def test_a_trace_stays_causal_where_clocks_disagree():
    """n2 received at 8 ms what n1 sent at 12: n2's event after the RECV (9 ms) follows the
    SEND, and so follows the mediator's event at 11 ms, as do n2's later events."""
    send = committed("n1", Kind.SEND, 12, 99, "ab")
    entries = [committed("n1", Kind.FUNC, 10, 7), send, committed("n2", Kind.RECV, 8, 99, "ab", send),
               committed("n2", Kind.FUNC, 9, 8), committed("mediator", Kind.FAULT, 11, 0, "kill:one"),
               committed("n2", Kind.FUNC, 10, 7)]
    types = frozenset({"FUNC:7", "FUNC:8", "FAULT:kill:one"})
    assert trace_of(entries, types) == (
        ("n1", "FUNC:7"), ("mediator", "FAULT:kill:one"), ("n2", "FUNC:8"), ("n2", "FUNC:7"))


@pytest.mark.parametrize(
    "body, reason",
    [
        ({"end_ns": 5}, "missing field 'start_ns'"),
        ({"start_ns": 5, "end_ns": 5}, "end_ns > start_ns"),
        ({"start_ns": 1, "end_ns": 5, "wait_ms": -1}, "wait_ms"),
        ({"start_ns": 1, "end_ns": 5, "abstraction": "nope"}, "unknown abstraction"),
        ({"start_ns": 1, "end_ns": 5, "trace": "FUNC:7"}, "'trace' must be a list"),
        ({"start_ns": 1, "end_ns": 5, "trace": ["FUNC:7"], "trace_from_ns": 2}, "cannot start after its window"),
    ],
)
def test_bad_window_requests_are_rejected_with_a_reason(mediator, body, reason):
    with pytest.raises(MalloryError, match=reason):
        client(mediator)._call("POST", "/window", body)
    assert mediator.api.rejected == 1


def test_entries_nobody_asks_for_are_released_after_the_retention(mediator):
    """A mediator no campaign asks for windows must not grow without bound."""
    windows = mediator.windows
    windows.retain_ns = 1_000_000_000
    for n in NODES:
        mediator.ingest.on_clock(ClockPair(n, 0, 0))
    for second in range(6):
        ts = second * 1_000_000_000
        mediator.ingest.on_batch(Batch("n1", second, ts + 1, [Event("n1", Kind.FUNC, ts, 7)]))
    assert 1 <= len(windows._buffer) <= 3, "only the last retention period (+ slack) is kept"


def test_entries_beyond_the_bound_are_dropped_and_a_window_missing_some_says_truncated(mediator):
    """Whatever the event rate, the mediator keeps at most max_entries entries; a window
    that lost some of its entries that way is not whole, so nothing may learn from it."""
    mediator.windows = windows = WindowService(mediator.ingest.frontier_ns, max_entries=100)
    mediator.ingest.subscribers[:] = [windows.on_commit]
    base = time.time_ns() - 10_000_000_000
    for n in NODES:
        mediator.ingest.on_clock(ClockPair(n, 0, base))
    ms = 1_000_000
    # n1: one event a ms for 1 s; n2 passes the second without events
    mediator.ingest.on_batch(Batch("n1", 0, 1_000 * ms, [Event("n1", Kind.FUNC, t * ms, 7 + t % 3) for t in range(1_000)]))
    mediator.ingest.on_batch(Batch("n2", 0, 1_000 * ms, []))
    stats = client(mediator).metrics()["windows"]
    assert stats["retained"] == 100 and stats["dropped"] == 900 and stats["max_entries"] == 100
    source = TimelineWindows(client(mediator))
    kept = source.window(base + 900 * ms, base + 950 * ms, wait_s=1.0)
    assert kept.complete and not kept.truncated and kept.events == 50
    assert kept.summary == {"n1|FUNC:7|FUNC:8", "n1|FUNC:8|FUNC:9", "n1|FUNC:9|FUNC:7", "n1|FUNC:7|FUNC:7",
                            "n1|FUNC:8|FUNC:8", "n1|FUNC:9|FUNC:9", "n1|FUNC:7|FUNC:9", "n1|FUNC:8|FUNC:7",
                            "n1|FUNC:9|FUNC:8"}
    part = source.window(base + 850 * ms, base + 1_000 * ms, wait_s=1.0)
    assert part.truncated and not part.complete and part.events == 50, (
        "[850, 900) ms were dropped, [900, 950) ms taken by the window before")
    stats = client(mediator).metrics()["windows"]
    assert stats["served"] == 2 and stats["incomplete"] == 1 and stats["truncated"] == 1


def test_a_trace_whose_beginning_was_dropped_starts_at_its_window_and_says_so(mediator):
    """The part of a trace before its window (since the last complete window) lost entries
    to the bound: the trace would pass for whole without them, so it is cut to the window."""
    mediator.windows = windows = WindowService(mediator.ingest.frontier_ns, max_entries=100)
    mediator.ingest.subscribers[:] = [windows.on_commit]
    base = time.time_ns() - 10_000_000_000
    for n in NODES:
        mediator.ingest.on_clock(ClockPair(n, 0, base))
    ms = 1_000_000
    events = [Event("n1", Kind.FUNC, t * ms, 7 + t % 3) for t in range(1_000)]
    mediator.ingest.on_batch(Batch("n1", 0, 100 * ms, events[:100]))
    mediator.ingest.on_batch(Batch("n2", 0, 100 * ms, []))
    source = TimelineWindows(client(mediator), trace=frozenset({"FUNC:7", "FUNC:8", "FUNC:9"}))
    first = source.window(base + 50 * ms, base + 100 * ms, wait_s=1.0)
    assert first.complete and not first.trace_cut and len(first.trace) == 50
    mediator.ingest.on_batch(Batch("n1", 1, 1_000 * ms, events[100:]))  # [100, 900) ms are dropped
    mediator.ingest.on_batch(Batch("n2", 1, 1_000 * ms, []))
    cut = source.window(base + 950 * ms, base + 1_000 * ms, wait_s=1.0)
    assert cut.complete and not cut.truncated and cut.trace_cut
    assert cut.trace == tuple(("n1", f"FUNC:{7 + t % 3}") for t in range(950, 1_000))
    following = source.window(base + 1_000 * ms, base + 1_100 * ms, wait_s=0.1)
    assert not following.trace_cut


def test_a_window_over_what_the_builders_bounds_left_out_says_truncated():
    """n1's batch 1 never comes; the builder gives the gap up beyond max_early events
    (timeline/builder.py). The window over the gap cannot be whole, and says so like one whose
    entries the buffer dropped; the next one is whole. The metrics count what was skipped."""
    ingest = Ingest(TimelineBuilder(skew_ns=10, nodes=["n1", "n2"], max_early=4))
    windows = WindowService(ingest.frontier_ns, lost_until=ingest.lost_until_ns)
    ingest.subscribers.append(windows.on_commit)
    ms = 1_000_000
    for n in ("n1", "n2"):
        ingest.on_clock(ClockPair(n, 0, 0))
    ingest.on_batch(Batch("n2", 0, 10_000 * ms, []))
    ingest.on_batch(Batch("n1", 0, 100 * ms, [Event("n1", Kind.FUNC, 50 * ms, 7)]))
    before = windows.window(0, 100 * ms, wait_s=0)
    assert before.complete and before.events == 1 and not before.truncated, "asked before the gap was given up"
    for seq in range(2, 4):  # batch 1 ([100, 200) ms) never comes
        ingest.on_batch(Batch("n1", seq, (seq + 1) * 100 * ms, [Event("n1", Kind.FUNC, seq * 100 * ms, 8)]))
    assert not windows.window(100 * ms, 300 * ms, wait_s=0).complete, "n1's horizon stands at the gap"
    assert ingest.stats()["skipped_batches"] == {"n1": 0, "n2": 0}
    ingest.on_batch(Batch("n1", 4, 500 * ms, [Event("n1", Kind.FUNC, 400 * ms, 9)]))  # beyond max_early
    assert ingest.stats()["skipped_batches"] == {"n1": 1, "n2": 0} and ingest.stats()["forced_recvs"] == 0
    over = windows.window(100 * ms, 300 * ms, wait_s=0)
    assert over.truncated and not over.complete and over.events == 1
    after = windows.window(300 * ms, 500 * ms, wait_s=0)
    assert after.complete and not after.truncated and after.events == 2


def test_the_metrics_count_what_the_builders_bounds_left_out(mediator):
    ingest = client(mediator).metrics()["ingest"]
    assert ingest["forced_recvs"] == 0 and ingest["skipped_batches"] == {n: 0 for n in [*NODES, "mediator"]}
