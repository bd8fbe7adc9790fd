"""The TXN client's mapping of replies to completions, against the fake line server of the
line client's tests: the wire line of a txn, reads filled in per workload, a reply whose
token count does not match the txn is info (applied, reads unknown), UNKNOWN is info,
other errors fail, and a follower's hint is followed (the redirect logic both clients share)."""

from __future__ import annotations

import pytest

from mallory.harness.workload import APPEND, READ, WRITE
from mallory.history.edn import Keyword
from mallory.suts.raft_kv.client import RaftTxnClient
from tests.live.stack import free_ports
from tests.unit.harness.test_line_client import FakeLineServer


@pytest.fixture
def port() -> int:
    return free_ports(1)[0]


def test_txn_replies_become_completions(port: int) -> None:
    replies = {
        "TXN a:l1:5 r:l1 r:l2": "OK _ 4,5 nil",
        "TXN r:l3": "OK 1 2",  # two tokens for one mop
        "TXN a:l4:1": "UNKNOWN stepped-down",
        "TXN a:l5:1": "ERR busy",
        "TXN w:w1:7 r:w1 r:w2": "OK _ 7 nil",
    }
    server = FakeLineServer("127.0.0.1", port, replies.get)
    appends = RaftTxnClient("127.0.0.1", port, "list-append", timeout=0.5)
    registers = RaftTxnClient("127.0.0.1", port, "rw-register", timeout=0.5)
    try:
        appends.open()
        done = appends.invoke({"f": "txn", "value": [[APPEND, 1, 5], [READ, 1, None], [READ, 2, None]]})
        assert (done.type, done.value) == ("ok", [[APPEND, 1, 5], [READ, 1, [4, 5]], [READ, 2, []]])
        done = appends.invoke({"f": "txn", "value": [[READ, 3, None]]})
        assert (done.type, done.error) == ("info", [Keyword("bad-reply"), "1 2"])
        done = appends.invoke({"f": "txn", "value": [[APPEND, 4, 1]]})
        assert (done.type, done.error) == ("info", [Keyword("unknown"), "stepped-down"])
        done = appends.invoke({"f": "txn", "value": [[APPEND, 5, 1]]})
        assert (done.type, done.error) == ("fail", [Keyword("error"), "ERR busy"])
        done = appends.invoke({"f": "txn", "value": [[WRITE, 1, 1]]})  # not a list-append mop: never sent
        assert done.type == "fail" and done.error[0] == Keyword("unknown-mop")
        registers.open()
        done = registers.invoke({"f": "txn", "value": [[WRITE, 1, 7], [READ, 1, None], [READ, 2, None]]})
        assert (done.type, done.value) == ("ok", [[WRITE, 1, 7], [READ, 1, 7], [READ, 2, None]])
        assert len(server.requests) == 5  # the unknown-mop txn never went out
    finally:
        appends.close()
        registers.close()
        server.close()


def test_txn_follows_the_leader_hint(port: int) -> None:
    follower = FakeLineServer("127.0.0.2", port, lambda line: "ERR not-leader 127.0.0.3")
    leader = FakeLineServer("127.0.0.3", port, lambda line: "OK _ 1")
    client = RaftTxnClient("127.0.0.2", port, "list-append", timeout=0.5)
    try:
        client.open()
        done = client.invoke({"f": "txn", "value": [[APPEND, 9, 1], [READ, 9, None]]})
        assert (done.type, done.value) == ("ok", [[APPEND, 9, 1], [READ, 9, [1]]])
        assert follower.requests == leader.requests == ["TXN a:l9:1 r:l9"]
    finally:
        client.close()
        follower.close()
        leader.close()
