"""Reading a long event recording says how far it got (a day-long one holds tens of
millions of events and takes minutes)."""

from __future__ import annotations

import logging

import mallory.report.recording as recording
from mallory.timeline.codec import write_records
from mallory.timeline.synthetic import synthetic_stream


def test_reading_a_recording_logs_its_progress(tmp_path, monkeypatch, caplog):
    path = tmp_path / "events.jsonl"
    with open(path, "wb") as out:
        write_records(out, synthetic_stream(20_000, n_nodes=3, seed=1))
    monkeypatch.setattr(recording, "PROGRESS_EVERY_S", 0.0)
    with caplog.at_level(logging.INFO, logger="mallory.report.recording"):
        read = recording.read_recording([path], [recording.ALL_TIME])
    assert read.spans[0] and not read.warnings
    messages = [r.getMessage() for r in caplog.records]
    assert messages[0].startswith(f"reading the event recording {path} (")
    shares = [int(m.split("%")[0].rsplit(" ", 1)[1]) for m in messages[1:]]
    assert shares and shares == sorted(shares) and all(0 <= s <= 100 for s in shares) and shares[-1] > 90, messages
