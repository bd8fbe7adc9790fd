"""A kill at any write of the campaign directory leaves one that `--resume` continues and
`mallory report` reads: killed at each rename of a rewritten file in turn, and with what a
kill mid-write leaves behind (torn temporaries, torn last lines of the appended files).
The campaign is test_loop.py's, on named fakes."""

from __future__ import annotations

import os
from pathlib import Path

import orjson
import pytest

from mallory.files import atomic_write, cut_torn_tail
from mallory.report.campaign_data import load_campaign
from mallory.shrink.bundle import write_shrunk_bundle
from tests.unit.campaign.test_loop import FakeChecker, make_campaign


class Killed(BaseException):
    """The process died here (BaseException: nothing may catch and carry on)."""


def kill_at_rename(monkeypatch, k: int) -> list[int]:
    """From the k-th os.replace on (counted in the returned list), every one dies."""
    calls = [0]
    real = os.replace

    def replace(src, dst):
        calls[0] += 1
        if calls[0] >= k:
            raise Killed(f"killed at rename {calls[0]}: {dst}")
        return real(src, dst)

    monkeypatch.setattr(os, "replace", replace)
    return calls


def resume_and_read(tmp_path, schedules_before: int) -> None:
    """A new incarnation resumes the directory, runs a schedule, and the report reads it all."""
    again, _ = make_campaign(tmp_path, "qlearning", checker=FakeChecker(), create=False)
    done = again.progress.schedules_done
    assert done in (schedules_before - 1, schedules_before), "at most the schedule in flight is lost"
    again.run(schedules=1)
    data = load_campaign(again.dir.root)
    assert [s["index"] for s in data.schedules] == list(range(done + 1))
    assert len(data.plot) >= 12 * (done + 1) and data.plot[-1].steps_done == again.progress.steps_done
    for bug in data.bugs:
        assert bug.report and bug.sightings


def count_renames(tmp_path) -> int:
    campaign, _ = make_campaign(tmp_path / "count", "qlearning", checker=FakeChecker())
    calls = [0]
    real = os.replace

    def counting(src, dst):
        calls[0] += 1
        return real(src, dst)

    os.replace = counting
    try:
        campaign.run(schedules=3)
    finally:
        os.replace = real
    return calls[0]


def test_a_kill_at_any_rename_leaves_a_directory_resume_and_report_read(tmp_path, monkeypatch):
    renames = count_renames(tmp_path)
    assert renames > 40  # stats after every step, learner, schedule, bundles
    for k in range(1, renames + 1):
        root = tmp_path / f"k{k}"
        campaign, _ = make_campaign(root, "qlearning", checker=FakeChecker())
        calls = kill_at_rename(monkeypatch, k)
        with pytest.raises(Killed):
            campaign.run(schedules=3)
        monkeypatch.undo()
        schedules_before = campaign.progress.schedules_done + 1  # the one in flight
        resume_and_read(root, schedules_before)
        assert calls[0] >= k


def test_what_a_kill_mid_write_leaves_behind_is_read_past_and_cut_off(tmp_path):
    campaign, _ = make_campaign(tmp_path, "qlearning", checker=FakeChecker())
    campaign.run(schedules=4)
    root = campaign.dir.root
    bugs = sorted(campaign.dir.known_bugs())
    assert bugs, "the fake checker finds its bug"
    sightings = root / "bugs" / bugs[0] / "sightings.jsonl"
    seen = len(sightings.read_text().splitlines())
    # torn temporaries of every rewritten file, and torn last lines of the appended ones
    for name in ("learner", "fuzzer_stats", "campaign.json", "plot_data"):
        (root / f".{name}.tmp-4242").write_bytes(b'{"half": ')
    (root / "schedules" / ".000004.json.tmp-4242").write_bytes(b'{"index": 4, "ste')
    (root / "bugs" / ".log_half.tmp").mkdir()
    (root / "bugs" / ".log_half.tmp" / "report.json").write_bytes(b"{")
    with open(root / "plot_data", "a") as f:
        f.write("123.4, 4, 48, 7")
    with open(sightings, "ab") as f:
        f.write(b'{"schedule": 9, "ti')

    load_campaign(root)  # the report reads it as it is
    resume_and_read(tmp_path, 4)
    lines = (root / "plot_data").read_text().splitlines()
    assert not any(line.startswith("123.4, 4, 48, 7") for line in lines), "the torn line was cut, not merged"
    whole = [orjson.loads(line) for line in sightings.read_bytes().splitlines()]
    assert len(whole) >= seen and all(isinstance(s, dict) for s in whole)


def test_cut_torn_tail(tmp_path):
    path = tmp_path / "lines"
    assert cut_torn_tail(path) == 0  # no file
    path.write_bytes(b"a\nb\n")
    assert cut_torn_tail(path) == 0 and path.read_bytes() == b"a\nb\n"
    path.write_bytes(b"a\nb\n" + b"x" * 200_000)  # a fragment longer than one block
    assert cut_torn_tail(path) == 200_000 and path.read_bytes() == b"a\nb\n"
    path.write_bytes(b"only a fragment")
    assert cut_torn_tail(path) == 15 and path.read_bytes() == b""


def test_a_shrunk_bundle_is_whole_or_absent_even_killed_between_its_renames(tmp_path, monkeypatch):
    replay = tmp_path / "replay"
    source = replay / "bugs" / "sig"
    source.mkdir(parents=True)
    atomic_write(source / "report.json", b'{"new": true}')
    out = tmp_path / "shrunk"
    out.mkdir()
    (out / "report.json").write_bytes(b'{"old": true}')
    (out / "provenance.json").write_bytes(b'{"signature": "sig"}')
    calls = kill_at_rename(monkeypatch, 2)  # the old bundle is aside, the new one not yet in place
    with pytest.raises(Killed):
        write_shrunk_bundle(out, replay, "sig", {"from": "x"})
    monkeypatch.undo()
    assert calls[0] == 2 and not out.exists(), "absent, never half of one"
    write_shrunk_bundle(out, replay, "sig", {"from": "x"})  # the next attempt tidies up
    assert orjson.loads((out / "report.json").read_bytes()) == {"new": True}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["replay", "shrunk"]


def test_a_journal_torn_by_a_kill_takes_appends_and_reads_back(tmp_path):
    from mallory.campaign.loop import ScriptedStep
    from mallory.shrink.journal import Journal

    path = tmp_path / "journal.jsonl"
    step = [ScriptedStep("kill:one", 1, 1.0)]
    Journal(path).record(step, True, None)
    with open(path, "ab") as f:
        f.write(b'{"candidate": [["kill:one", 1')  # the line a killed shrink was writing
    journal = Journal(path)
    journal.record(step, False, "d")
    assert [a["hit"] for a in Journal(path).answers(step)] == [True, False]
    assert Path(path).read_bytes().count(b"\n") == 2
