"""A schedule's history check in a child process: the same verdict and pictures as in the
campaign's own process (a valid register history, an invalid transactional one), a child
that dies is an error verdict that says how, a child whose campaign is killed -9 in the
middle of a long search is gone with it, and a Ctrl-C does not end a check in flight."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from mallory.campaign import history_check
from mallory.campaign.history_check import check_run_history, check_run_history_in_child
from mallory.history.ops import write_edn
from tests.unit.oracles.test_linearizability import H, hard_history
from tests.unit.pictures.histories import failover_history


def _run_dir(root: Path, history) -> Path:
    root.mkdir()
    with open(root / "history.edn", "w") as f:
        write_edn(history, f)
    return root


def _untimed(result: dict) -> dict:
    """A result's JSON without the stats that time the check (`*seconds`), which differ run to run."""
    stats = {k: v for k, v in result["stats"].items() if not k.endswith("seconds")}
    return {**result, "stats": stats}


@pytest.mark.parametrize("history, drawn", [
    (H().inv(0, "write", 1).ret(0, "write", 1).inv(1, "read").ret(1, "read", 1).ops, False),  # no times: no plot
    (failover_history(), True),
], ids=["valid-register", "invalid-list-append"])
def test_the_child_gives_the_verdict_and_pictures_the_campaign_process_would(tmp_path, history, drawn):
    here = check_run_history(_run_dir(tmp_path / "here", history), 30.0)
    child_dir = _run_dir(tmp_path / "child", history)
    child = check_run_history_in_child(child_dir, 30.0)
    assert child.error is None and child.result is not None
    assert _untimed(child.result.to_json()) == _untimed(here.result.to_json())
    assert [op.to_edn() for op in child.ops] == [op.to_edn() for op in here.ops]
    pictures = sorted(p.name for p in (tmp_path / "here").glob("*.svg"))
    assert bool(pictures) == drawn and sorted(p.name for p in child_dir.glob("*.svg")) == pictures


def test_no_history_is_no_verdict_and_no_child(tmp_path, monkeypatch):
    monkeypatch.setattr(history_check, "child_argv", lambda *_: pytest.fail("a child was started"))
    verdict = check_run_history_in_child(tmp_path, 30.0)
    assert verdict.result is None and verdict.error is None


def test_a_child_that_dies_is_an_error_verdict_saying_how(tmp_path, monkeypatch):
    # a fake child: Python that kills itself, in place of the checker
    suicide = [sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"]
    monkeypatch.setattr(history_check, "child_argv", lambda *_: suicide)
    verdict = check_run_history_in_child(_run_dir(tmp_path / "run", failover_history()), 30.0)
    assert verdict.result is None and "killed by SIGKILL" in verdict.error


def _checks_of(run_dir: Path) -> list[int]:
    """pids of the history-check children working on run_dir."""
    pids = []
    for proc in Path("/proc").iterdir():
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"mallory.campaign.history_check" in argv and str(run_dir).encode() in argv:
            pids.append(int(proc.name))
    return pids


def test_a_check_dies_with_the_campaign_killed_mid_search(tmp_path):
    run_dir = _run_dir(tmp_path / "run", hard_history(18, 200, 1))
    campaign = subprocess.Popen([sys.executable, "-c",
                                 "import sys; from pathlib import Path; "
                                 "from mallory.campaign.history_check import check_run_history_in_child; "
                                 "check_run_history_in_child(Path(sys.argv[1]), 300.0)", str(run_dir)])
    try:
        deadline = time.monotonic() + 20
        while not _checks_of(run_dir):
            assert time.monotonic() < deadline, "no check started"
            time.sleep(0.05)
        time.sleep(1.0)  # into the search (about 8 s on this history)
        assert _checks_of(run_dir), "the search ended before the kill: the test needs a harder history"
    finally:
        os.kill(campaign.pid, signal.SIGKILL)
        campaign.wait()
    deadline = time.monotonic() + 5
    while _checks_of(run_dir):
        assert time.monotonic() < deadline, "the check outlived its campaign"
        time.sleep(0.05)


def _ignores_sigint(pid: int) -> bool:
    """Whether process pid ignores SIGINT now (its SigIgn mask in /proc/PID/status)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("SigIgn:"):
            return bool(int(line.split()[1], 16) & (1 << (signal.SIGINT - 1)))
    return False


def test_a_ctrl_c_at_the_terminal_does_not_end_the_check_in_flight(tmp_path):
    run_dir = _run_dir(tmp_path / "run", hard_history(18, 200, 1))
    verdict: list = []
    check = threading.Thread(target=lambda: verdict.append(check_run_history_in_child(run_dir, 2.0)))
    check.start()
    deadline = time.monotonic() + 20
    while not (children := _checks_of(run_dir)):
        assert time.monotonic() < deadline, "no check started"
        time.sleep(0.05)
    while not _ignores_sigint(children[0]):
        assert time.monotonic() < deadline, "the check never ignored SIGINT"
        time.sleep(0.01)
    os.kill(children[0], signal.SIGINT)
    check.join(60)
    (result,) = verdict
    assert result.error is None and result.result.valid == "unknown", "the search ran to its 2 s limit"


def test_a_child_whose_parent_is_already_gone_exits_at_once(tmp_path):
    run_dir = _run_dir(tmp_path / "run", hard_history(18, 200, 1))
    not_my_parent = os.getpid() + 1_000_000
    done = subprocess.run([sys.executable, "-m", "mallory.campaign.history_check", str(run_dir), "300.0",
                           str(not_my_parent)], capture_output=True, timeout=60)
    assert done.returncode == 1 and done.stdout == b"", "it checked the history for nobody"
