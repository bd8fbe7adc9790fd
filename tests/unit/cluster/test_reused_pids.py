"""A process is known by its pid *and* its start time: on a machine whose pid_max is 32768
the kernel hands a dead node process's pid to a later one within a campaign. A soak died
of it ("n3 already runs a process named 'sut'") once a fresh start gave n1's new SUT the
pid an old n3 SUT had had. The journal here is a real run registry under tmp_path; the
live process is a real `sleep`; the dead one is the same pid with an earlier start time."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from mallory.cluster.backend import NodeProcess
from mallory.cluster.journaled import JournaledCluster
from mallory.cluster.registry import proc_start_ticks, register_run
from mallory.errors import MalloryError


class JournalOnly(JournaledCluster):
    """A journaled cluster with nothing but its registered run (no namespaces): the
    process bookkeeping JournaledCluster itself does."""

    def __init__(self, record) -> None:
        self.record = record
        self.run = record.name


@pytest.fixture
def cluster(tmp_path, monkeypatch) -> JournalOnly:
    monkeypatch.setenv("MALLORY_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("MALLORY_DATA_ROOT", str(tmp_path / "data"))
    return JournalOnly(register_run("pidreuse"))


@pytest.fixture
def sleeper():
    child = subprocess.Popen(["sleep", "60"])
    yield child
    child.kill()
    child.wait()


def test_a_dead_process_whose_pid_went_to_a_later_one_is_not_running(cluster, sleeper, tmp_path):
    pid, start = sleeper.pid, proc_start_ticks(sleeper.pid)
    log = str(tmp_path / "x.log")
    cluster.record.record(proc=pid, start=start - 500, node="n3", name="sut", log=log)  # long gone
    cluster.record.record(proc=pid, start=start, node="n1", name="sut", log=log)  # lives now
    old, new = cluster.processes()
    assert (old.node, old.start) == ("n3", start - 500) and (new.node, new.start) == ("n1", start)
    assert not cluster.is_running(old)
    assert cluster.is_running(new)
    cluster._check_name_free("n3", "sut")  # the old n3 SUT's pid is n1's now: n3 runs none
    with pytest.raises(MalloryError, match="n1 already runs a process named 'sut'"):
        cluster._check_name_free("n1", "sut")


def test_a_dead_process_is_never_signalled_through_its_reused_pid(cluster, sleeper, tmp_path):
    start = proc_start_ticks(sleeper.pid)
    old = NodeProcess("n3", "sut", sleeper.pid, Path(tmp_path / "x.log"), start=start - 500)
    cluster._kill(old, 9, group=False)
    assert sleeper.poll() is None  # the later process lives on


def test_a_process_described_without_its_start_takes_it_from_its_own_journal_entry(cluster, sleeper, tmp_path):
    pid, start = sleeper.pid, proc_start_ticks(sleeper.pid)
    log = tmp_path / "x.log"
    cluster.record.record(proc=pid, start=start - 500, node="n3", name="sut", log=str(log))
    cluster.record.record(proc=pid, start=start, node="n1", name="sut", log=str(log))
    assert not cluster.is_running(NodeProcess("n3", "sut", pid, log))
    assert cluster.is_running(NodeProcess("n1", "sut", pid, log))
