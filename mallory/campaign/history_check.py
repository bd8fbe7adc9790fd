"""A schedule's history check, and the child process a live campaign runs it in.

- `check_run_history(run_dir, time_limit)` checks `run_dir/history.edn` in this process and
  writes the pictures of its verdict beside it.
- `check_run_history_in_child(run_dir, time_limit)` gives the same `RunVerdict`, computed
  by a fresh `python -m mallory.campaign.history_check` that writes the pictures itself and
  hands back the verdict's fields pickled on its stdout. The child dies with the campaign
  (`PR_SET_PDEATHSIG`), ignores SIGINT (a Ctrl-C at the terminal reaches the whole
  foreground group, and the campaign's first one lets the schedule in flight finish, its
  check included), is killed `CHILD_GRACE_S` after the checker's own time limit, and
  a child that dies or is killed gives `RunVerdict(error=...)`: a harness problem, as an
  unreadable history is, never a finding about the SUT.

Why a child: a linearizability search may reach its 512 MB budget, and what it allocated
stays with the process that ran it (CPython keeps an arena for each of a few survivors;
glibc keeps its high-water mark). In the soak, the fuzz process stepped up after its two
largest checks and never came back down; a child gives all of it back when it exits.
"""

from __future__ import annotations

import ctypes
import os
import pickle
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from mallory.cluster.backend import describe_exit
from mallory.errors import MalloryError
from mallory.files import atomic_write
from mallory.history.ops import Op, read_history
from mallory.oracles.check import CheckOptions, check_history
from mallory.oracles.result import CheckResult
from mallory.pictures.verdict import run_pictures

#: how long a child may run past the checker's time limit (reading the history, drawing the
#: pictures, starting Python) before it is killed
CHILD_GRACE_S = 60.0
_PR_SET_PDEATHSIG = 1


@dataclass
class RunVerdict:
    """The history checker's answer on a run: its result, or why the history could not be
    checked (both None: the run recorded no history), and the history's ops as read."""

    result: CheckResult | None = None
    error: str | None = None
    ops: list[Op] = field(default_factory=list)


def check_run_history(run_dir: Path, time_limit: float) -> RunVerdict:
    """Check the history a run recorded (run_dir/history.edn) and write the pictures of its
    verdict beside it (`mallory.pictures.verdict.run_pictures`: its latency plot, each
    anomaly case's cycle or linearizability diagram)."""
    path = _recorded_history(run_dir)
    if path is None:
        return RunVerdict()
    try:
        fmt, ops = read_history(path)
        result = check_history(ops, fmt, CheckOptions(time_limit=time_limit), str(path))
        pictures = run_pictures(ops, result.anomalies, str(path))
    except MalloryError as exc:
        return RunVerdict(error=str(exc))
    for picture in pictures:
        atomic_write(run_dir / picture.name, picture.svg.encode())
    return RunVerdict(result, ops=list(ops))


def check_run_history_in_child(run_dir: Path, time_limit: float) -> RunVerdict:
    """`check_run_history(run_dir, time_limit)`, run by a child process (see the module's
    docstring)."""
    if _recorded_history(run_dir) is None:
        return RunVerdict()
    try:
        done = subprocess.run(child_argv(run_dir, time_limit), capture_output=True,
                              timeout=time_limit + CHILD_GRACE_S, check=False)
    except subprocess.TimeoutExpired:
        return RunVerdict(error=f"the history check ran past its {time_limit:g} s limit by "
                                f"{CHILD_GRACE_S:g} s and was killed")
    if done.returncode != 0:
        return RunVerdict(error=f"the history check {describe_exit(done.returncode)}: "
                                f"{_last_line(done.stderr)}")
    return RunVerdict(*pickle.loads(done.stdout))


def _recorded_history(run_dir: Path) -> Path | None:
    """run_dir's history.edn, None when the run recorded none (no file, or an empty one)."""
    path = run_dir / "history.edn"
    return path if path.exists() and path.stat().st_size > 0 else None


def child_argv(run_dir: Path, time_limit: float) -> list[str]:
    """The command line of the child that checks run_dir's history."""
    return [sys.executable, "-m", "mallory.campaign.history_check", str(run_dir), repr(time_limit), str(os.getpid())]


def _last_line(stderr: bytes) -> str:
    lines = stderr.decode("utf-8", errors="replace").strip().splitlines()
    return lines[-1] if lines else "no message"


def _die_with(parent: int) -> None:
    """Be killed when the process that started this one dies (a campaign killed with -9
    leaves no check running); exit now if it already has."""
    ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent:
        os._exit(1)


def main(argv: list[str]) -> int:
    """The child: `RUN_DIR TIME_LIMIT PARENT_PID`; writes its `RunVerdict`'s fields pickled to stdout."""
    run_dir, time_limit, parent = argv
    _die_with(int(parent))
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    verdict = check_run_history(Path(run_dir), float(time_limit))
    # its fields, not the verdict: run with -m, this module's classes belong to __main__ here
    sys.stdout.buffer.write(pickle.dumps((verdict.result, verdict.error, verdict.ops)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
