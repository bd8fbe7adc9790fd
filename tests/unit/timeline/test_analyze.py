"""`mallory analyze`: a recorded stream in, one line per window out; bad input, clean errors."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from mallory.cli import main
from mallory.timeline.codec import write_records
from mallory.timeline.event import Batch, ClockPair, Event, Kind, packet_data
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


def recording_with_messages(path, windows: int = 6) -> None:
    """A recording as a campaign on an SUT that declares its messages makes one: n1 sends n2
    an append each 100 ms, each packet's data its message type and its first payload bytes
    (here a length field that differs in every window, as a stream protocol's do), and n2
    runs a code event on each. Two seconds a window."""
    s = 10**9
    records: list = [ClockPair("n1", 0, 1_700_000_000 * s), ClockPair("n2", 0, 1_700_000_000 * s)]
    seq = {"n1": 0, "n2": 0}
    for w in range(windows):
        sends, recvs = [], []
        for k in range(20):
            t = w * 2 * s + k * s // 10 + 1000
            ident = 1 + w * 100 + k
            data = packet_data("append", f"000000{w:02x}")
            sends.append(Event("n1", Kind.SEND, t, ident, data))
            recvs += [Event("n2", Kind.RECV, t + 1000, ident, data), Event("n2", Kind.FUNC, t + 2000, 0xA1, "")]
        for node, events in (("n1", sends), ("n2", recvs)):
            records.append(Batch(node, seq[node], (w + 1) * 2 * s, events))
            seq[node] += 1
    with open(path, "wb") as f:
        write_records(f, records)


def test_one_recording_gives_the_states_both_with_message_types_and_with_payload_bytes(tmp_path, capsys):
    """Every window holds the same messages, but their first bytes differ from window to
    window: by message type one state, by payload bytes one per window."""
    path = tmp_path / "events.jsonl"
    recording_with_messages(path)
    argv = ["analyze", str(path), "--window", "2", "--abstraction", "event-history", "--json"]
    assert main([*argv, "--packet-types", "both"]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    rows, total = lines[:-1], lines[-1]["total"]
    assert total["windows"] == len(rows) == 6
    assert total["states_by_packet_types"] == {"messages": 1, "bytes": 6} and total["states"] == 1
    assert [r["new_bytes"] for r in rows] == [True] * 6 and [r["new"] for r in rows] == [True] + [False] * 5
    assert total["sends_by_message_type"] == {"append": 120}
    for view, states in (("messages", 1), ("bytes", 6)):  # each view alone agrees
        assert main([*argv, "--packet-types", view]) == 0
        assert json.loads(capsys.readouterr().out.splitlines()[-1])["total"]["states"] == states
    assert main(["analyze", str(path), "--window", "2", "--packet-types", "both"]) == 0
    assert "1 distinct states (1 with message types and 6 with payload bytes)" in capsys.readouterr().out


def test_message_history_types_messages_and_code_history_does_not(tmp_path, capsys):
    path = tmp_path / "events.jsonl"
    recording_with_messages(path, windows=2)
    sizes = {}
    for abstraction in ("code-history", "message-history"):
        assert main(["analyze", str(path), "--window", "2", "--abstraction", abstraction, "--json"]) == 0
        sizes[abstraction] = json.loads(capsys.readouterr().out.splitlines()[0])["summary_size"]
    # code-history: FUNC after FUNC at n2, and the link; message-history: also the RECVs
    # typed "append" before and after the FUNCs, and n1's SENDs
    assert sizes["message-history"] > sizes["code-history"] >= 2
