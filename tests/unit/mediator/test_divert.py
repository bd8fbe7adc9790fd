"""The message layer's gateway rules (mallory/mediator/divert.py), with `_run` faked: only
node pairs and declared ports are diverted and captured, the jumps go in last, removal
undoes everything (rp_filter back as it was), and a failed install leaves nothing."""

from __future__ import annotations

import subprocess

import pytest

from mallory.errors import MalloryError
from mallory.mediator import divert
from mallory.mediator.divert import Diversion, capture_rules, divert_rules

NODES = {"n1": "10.9.1.2", "n2": "10.9.2.2"}


def test_only_node_pairs_and_declared_ports_are_diverted_and_captured():
    rules = divert_rules(NODES, [7001], 7102)
    pair = ["-s", "10.9.1.2", "-d", "10.9.2.2", "-p", "tcp"]
    assert rules[:3] == [
        [*pair, "!", "--syn", "-m", "socket", "--transparent", "-j", "MARK", "--set-xmark", divert.MARK],
        [*pair, "-m", "mark", "--mark", divert.MARK, "-j", "RETURN"],
        [*pair, "--dport", "7001", "-j", "TPROXY", "--on-port", "7102", "--tproxy-mark", divert.MARK],
    ]
    assert len(rules) == 6 and all(r[1:4] == ["10.9.2.2", "-d", "10.9.1.2"] for r in rules[3:])
    captured = capture_rules(NODES, [7001], 1)
    assert all(r[7:] == ["7001", "-j", "NFQUEUE", "--queue-num", "1", "--queue-bypass"] for r in captured)
    assert {(r[1], r[3], r[6]) for r in captured} == {
        ("10.9.1.2", "10.9.2.2", "--dport"), ("10.9.1.2", "10.9.2.2", "--sport"),
        ("10.9.2.2", "10.9.1.2", "--dport"), ("10.9.2.2", "10.9.1.2", "--sport")}


class FakeCommands:
    """A fake `_run`: records each command; `fail_on` makes the first command containing
    it fail; removals of what is not there fail as the real tools do."""

    def __init__(self, fail_on: str = "") -> None:
        self.commands: list[str] = []
        self.fail_on = fail_on

    def __call__(self, argv, check=True):
        line = " ".join(argv)
        self.commands.append(line)
        failed = (self.fail_on and self.fail_on in line) or " -D " in line or " del " in line
        if failed and check:
            raise MalloryError(f"`{line}` failed")
        return subprocess.CompletedProcess(argv, 1 if failed else 0)


@pytest.fixture
def conf(tmp_path, monkeypatch):
    for dev, value in (("all", "1"), ("to-n1", "2")):
        (tmp_path / dev).mkdir()
        (tmp_path / dev / "rp_filter").write_text(value + "\n")
    monkeypatch.setattr(divert, "SYSCTL_CONF", tmp_path)
    return tmp_path


def test_install_then_remove(monkeypatch, conf):
    fake = FakeCommands()
    monkeypatch.setattr(divert, "_run", fake)
    d = Diversion(NODES, [7001, 7001], 7102, 1)
    d.install()
    installed = fake.commands[fake.commands.index("ip route flush table 77") + 1:]
    assert installed[0].startswith("ip rule add fwmark") and "-I PREROUTING 1 -j MALLORY-DIVERT" in installed[-1]
    assert sum("TPROXY" in c for c in installed) == 2  # one per ordered pair: the port was named twice
    assert (conf / "all" / "rp_filter").read_text() == "0\n" and (conf / "to-n1" / "rp_filter").read_text() == "0\n"
    fake.commands.clear()
    d.remove()
    assert "iptables -w -t mangle -X MALLORY-DIVERT" in fake.commands and "iptables -w -t filter -X MALLORY-LEGS" in fake.commands
    assert (conf / "all" / "rp_filter").read_text() == "1\n" and (conf / "to-n1" / "rp_filter").read_text() == "2\n"


def test_a_failed_install_removes_what_it_made(monkeypatch, conf):
    fake = FakeCommands(fail_on="TPROXY")
    monkeypatch.setattr(divert, "_run", fake)
    with pytest.raises(MalloryError, match="TPROXY"):
        Diversion(NODES, [7001], 7102, 1).install()
    after = fake.commands[next(i for i, c in enumerate(fake.commands) if "TPROXY" in c) + 1:]
    assert "iptables -w -t mangle -X MALLORY-DIVERT" in after and "ip route flush table 77" in after
    assert not any("-I PREROUTING" in c for c in fake.commands)
    assert (conf / "all" / "rp_filter").read_text() == "1\n"
