"""The wire codec round-trips exactly and names the line of anything malformed."""

from __future__ import annotations

import io

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mallory.timeline.codec import (
    MalformedRecord,
    decode,
    encode,
    read_records,
    write_records,
)
from mallory.timeline.event import MAX_ID, Batch, ClockPair, Event, Kind

nodes = st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), min_size=1, max_size=8)
events = st.builds(
    Event,
    node=nodes,
    kind=st.sampled_from(list(Kind)),
    ts=st.integers(0, 2**63 - 1),
    id=st.integers(0, MAX_ID),
    data=st.text(max_size=16),
)


@given(events)
def test_event_round_trips(event):
    assert decode(encode(event)) == event


@given(nodes, st.integers(0, 2**40), st.integers(0, 2**63 - 1), st.integers(0, 1000), st.lists(events, max_size=5))
def test_batch_round_trips(node, seq, until, lost, evs):
    evs = [e._replace(node=node) for e in evs]
    batch = Batch(node, seq, until, evs, lost)
    assert decode(encode(batch)) == batch


def test_clock_round_trips():
    pair = ClockPair("n1", 123, 1_700_000_000_000_000_000)
    assert decode(encode(pair)) == pair


def test_stream_round_trips():
    records = [ClockPair("n1", 0, 5), Batch("n1", 0, 10, [Event("n1", Kind.SEND, 3, MAX_ID, "0a0b")]), Event("n2", Kind.FUNC, 1, 2)]
    buf = io.BytesIO()
    write_records(buf, records)
    buf.seek(0)
    assert list(read_records(buf)) == records


@pytest.mark.parametrize(
    "line, reason",
    [
        (b"{not json", "not JSON"),
        (b'["n1", "SEND", 1, 2]', "got 4 fields"),
        (b'["n1", "BOGUS", 1, 2, ""]', "unknown event kind"),
        (b'["n1", "FUNC", -1, 2, ""]', "ts must be"),
        (b'["n1", "FUNC", 1, 18446744073709551616, ""]', "id must be"),
        (b'["", "FUNC", 1, 2, ""]', "node must be"),
        (b'["n1", "FUNC", 1, 2, 7]', "data must be"),
        (b'{"batch": "n1", "seq": 0, "until_ns": 1, "events": 3}', "events must be a list"),
        (b'{"batch": "n1", "seq": "0", "until_ns": 1, "events": []}', "batch.seq"),
        (b'{"batch": "n1", "seq": 0, "until_ns": 1, "events": [], "extra": 1}', "unknown fields"),
        (b'{"clock": "n1", "mono_ns": 1}', "clock.real_ns"),
        (b'{"hello": 1}', "needs a 'batch' or 'clock'"),
        (b"42", "got int"),
    ],
)
def test_malformed_lines_name_the_line_and_reason(line, reason):
    buf = io.BytesIO(b'{"clock": "n1", "mono_ns": 1, "real_ns": 2}\n\n' + line + b"\n")
    with pytest.raises(MalformedRecord) as info:
        list(read_records(buf, source="events.jsonl"))
    assert info.value.line == 3
    assert str(info.value).startswith("events.jsonl:3: malformed record")
    assert reason in str(info.value)
