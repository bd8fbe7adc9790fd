"""raft-kv's removal of a member when no leader is left to confirm it: the change may have
committed all the same (a 1-hour campaign saw it: the node, never wiped, restarted as a voter
of a configuration without it and campaigned forever). A scripted cluster stands in for the
servers' answers (a fake, for the adapter's decision only; tests/live/raft_kv run the real one)."""

from __future__ import annotations

from pathlib import Path

import pytest

from mallory.errors import MalloryError
from mallory.harness.spec import load_spec
from mallory.suts.raft_kv.adapter import DEFAULT_SPEC, RaftKvAdapter

NODES = ["n1", "n2", "n3"]


class FakeBackend:
    """The addresses and data dirs of three nodes; nothing runs."""

    def __init__(self, root: Path) -> None:
        self.nodes = list(NODES)
        self.root = root

    def node_address(self, node: str) -> str:
        return f"10.0.0.{node[1]}"

    def client_address(self, node: str) -> str:
        return self.node_address(node)

    def data_dir(self, node: str) -> Path:
        return self.root / node


class ScriptedRaftKv(RaftKvAdapter):
    """Answers raft-kv's admin lines from a script: n1 leads until the REMOVE reaches it, then
    no node leads; `stored_by` are the nodes whose configuration the REMOVE reached."""

    def __init__(self, root: Path, stored_by: set[str]) -> None:
        super().__init__(load_spec(DEFAULT_SPEC), FakeBackend(root))
        self.change_timeout = self.fault_leader_timeout = 0.3
        self.stored_by = stored_by
        self.removed: str | None = None

    def is_running(self, node: str) -> bool:
        return True

    def ask(self, node: str, line: str, timeout: float = 2.0) -> str:
        if line == "STATUS":
            leads = node == "n1" and self.removed is None
            return f"OK state={'leader' if leads else 'follower'} leader={'n1' if self.removed is None else '-'}"
        if line == "MEMBERS":
            gone = self.removed if node in self.stored_by else None
            return "OK" + "".join(f" {self.raft_address(n)}/voter" for n in NODES if self.raft_address(n) != gone)
        if line.startswith("REMOVE "):
            self.removed = line.split()[1]
            return ""  # leadership lost before the reply
        raise AssertionError(f"unexpected line {line!r} to {node}")


def test_a_removal_a_majority_stored_is_done_though_no_leader_confirmed_it(tmp_path):
    sut = ScriptedRaftKv(tmp_path, stored_by={"n1", "n2"})
    sut.remove_member("n3")
    assert "n3" in sut._joining and "n3" in sut._ids, "wiped and waiting to be added back, under a fresh id"


@pytest.mark.parametrize("stored_by", [set(), {"n1"}])
def test_a_removal_no_majority_stored_is_refused(tmp_path, stored_by):
    sut = ScriptedRaftKv(tmp_path, stored_by=stored_by)
    with pytest.raises(MalloryError, match="no single leader"):
        sut.remove_member("n3")
    assert "n3" not in sut._joining
