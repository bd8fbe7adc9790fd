"""`mallory analyze`: a recorded stream in, one line per window out; bad input, clean errors."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from mallory.cli import main
from mallory.timeline.codec import write_records
from mallory.timeline.synthetic import synthetic_stream


@pytest.fixture
def recording(tmp_path):
    path = tmp_path / "events.jsonl"
    with open(path, "wb") as f:
        write_records(f, synthetic_stream(20_000, events_per_s=1_000, behaviours=3, phase_ns=5 * 10**9, seed=7))
    return path


def test_json_output_has_a_row_per_window_and_recurring_states(recording, capsys):
    assert main(["analyze", str(recording), "--json"]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    rows, total = lines[:-1], lines[-1]["total"]
    assert total["events"] == 20_000
    assert total["windows"] == len(rows) == 8  # 20 s of events in 2.5 s windows
    assert sum(r["events"] for r in rows) == 20_000 and total["late_events"] == 0
    assert [r["window"] for r in rows] == list(range(len(rows)))
    new = [r for r in rows if r["new"]]
    assert len(new) == total["states"] and 1 < total["states"] <= 3, "three behaviours, at most three states"
    assert any(not r["new"] for r in rows), "behaviours recur, so some windows revisit a state"
    assert all(r["summary_size"] > 0 for r in rows)


def test_table_output_and_window_length(recording, capsys):
    assert main(["analyze", str(recording), "--window", "5"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split() == ["window", "start_s", "events", "state", "new", "summary"]
    assert len(out) == 1 + 4 + 1 and "4 windows" in out[-1]


def test_malformed_line_names_the_line_and_keeps_earlier_windows(recording, tmp_path, capsys):
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(recording.read_bytes() + b'{"batch": "n1", "seq": 1, "until_ns": "soon", "events": []}\n')
    n_lines = len(bad.read_bytes().splitlines())
    assert main(["analyze", str(bad), "--json"]) == 254
    captured = capsys.readouterr()
    assert f"bad.jsonl:{n_lines}: malformed record: batch.until_ns" in captured.err
    rows = [json.loads(line) for line in captured.out.splitlines()]
    assert len(rows) >= 6, "windows completed before the bad line are still printed"


def test_errors_exit_nonzero_without_traceback(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"clock": "n1", "mono_ns": 0, "real_ns": 0}\n["n1", "NOPE", 1, 2, ""]\n')
    for argv in ([str(bad)], [str(tmp_path / "missing.jsonl")], [str(bad), "--window", "0"]):
        proc = subprocess.run([sys.executable, "-m", "mallory.cli", "analyze", *argv], capture_output=True, text=True)
        assert proc.returncode == 254, proc.stderr
        assert "Traceback" not in proc.stderr and proc.stderr.startswith("mallory analyze: error:")
    assert "bad.jsonl:2: malformed record: unknown event kind 'NOPE'" in subprocess.run(
        [sys.executable, "-m", "mallory.cli", "analyze", str(bad)], capture_output=True, text=True
    ).stderr


def test_synthesize_writes_what_analyze_reads(tmp_path, capsys):
    out = tmp_path / "s.jsonl"
    assert main(["synthesize", "--out", str(out), "--events", "3000", "--nodes", "3", "--seed", "2"]) == 0
    assert main(["analyze", str(out), "--json"]) == 0
    total = json.loads(capsys.readouterr().out.splitlines()[-1])["total"]
    assert total["events"] == 3000 and total["late_events"] == 0
    assert main(["synthesize", "--out", str(out), "--nodes", "1"]) == 254
