"""The liveness oracles on fake data: cannot restart fires for the one node a reset could
not bring back (naming the bug line among its last, unsigned) and stays quiet when none or
several failed; stuck fires when no client op succeeded within the limit after the last
heal and stays quiet when one did, when the history was not watched that long, or when
nothing was healed."""

from __future__ import annotations

import pytest

from mallory.history.edn import Keyword
from mallory.history.ops import NEMESIS, Op
from mallory.log_lines import LogPattern
from mallory.oracles.liveness import cannot_restart_findings, stuck_findings

NODES = ["n1", "n2", "n3"]
S = 1_000_000_000


def test_cannot_restart_fires_for_the_one_node_that_did_not_come_back_with_its_last_lines():
    log = "starting\n==mallory== caught SIGSEGV: backtrace\nraft_start: malformed metadata1\n"
    unready = {"n2": {"how": "exited", "message": "raft-kv: n2 exited before it was ready; see n2/sut.log"}}
    (finding,) = cannot_restart_findings(unready, NODES, {"n2": log, "n1": "fine\n"})
    assert (finding.oracle, finding.kind, finding.node) == ("liveness", "cannot-restart", "n2")
    assert finding.details["how"] == "exited" and finding.details["last_log_lines"] == ["starting", "raft_start: malformed metadata1"]
    assert "n2 did not come back after the reset (exited)" in finding.message
    never = cannot_restart_findings({"n1": {"how": "not-ready", "message": "not ready after 20 s"}}, NODES, {})[0]
    assert never.signature != finding.signature  # exits and never-ready are told apart
    assert cannot_restart_findings({"n3": {"how": "exited", "message": "x"}}, NODES, {})[0].signature == finding.signature


def test_cannot_restart_names_the_first_bug_line_among_the_last_lines_but_is_not_signed_by_it():
    unready = {"n2": {"how": "exited", "message": "n2 exited before it was ready"}}
    log = "starting\nreplica 2: applied 7\nassertion failed: applied <= committed\nabort\n"
    (finding,) = cannot_restart_findings(unready, NODES, {"n2": log})
    assert finding.details["log_bug"] == {"name": "assertion", "line": "assertion failed: applied <= committed"}
    assert finding.message.endswith("(its log: assertion: assertion failed: applied <= committed)")
    lost = LogPattern(r"lost committed entry \d+", "lost-entry")
    (named,) = cannot_restart_findings(unready, NODES, {"n2": "lost committed entry 9\n" + log}, (lost,))
    assert named.details["log_bug"]["name"] == "lost-entry"
    (plain,) = cannot_restart_findings(unready, NODES, {"n2": "starting\n"})
    assert plain.details["log_bug"] is None and "its log" not in plain.message
    assert finding.signature == named.signature == plain.signature


@pytest.mark.parametrize("unready, nodes", [
    ({}, NODES),
    ({"n1": {"how": "exited"}, "n2": {"how": "not-ready"}}, NODES),  # two down: the cluster, not the node
    ({"n1": {"how": "exited"}}, ["n1"]),  # no other node to compare with
])  # fmt: skip
def test_cannot_restart_is_quiet_unless_exactly_one_of_several_nodes_failed(unready, nodes):
    assert cannot_restart_findings(unready, nodes, {}) == []


def _history(heal_at_s: float | None, oks_at_s: list[float], end_s: float) -> list[Op]:
    """Client ops invoked every 0.5 s until `end_s`, ok at `oks_at_s` (info otherwise), and a
    heal nemesis op at `heal_at_s`."""
    ops: list[Op] = []
    t = 0.0
    while t < end_s:
        ops.append(Op(len(ops), 0, Keyword("invoke"), Keyword("txn"), [], int(t * S)))
        done = t + 0.4
        ops.append(Op(len(ops), 0, Keyword("ok" if any(abs(done - ok) < 0.25 for ok in oks_at_s) else "info"),
                      Keyword("txn"), [], int(done * S)))
        t += 0.5
    if heal_at_s is not None:
        ops.append(Op(len(ops), NEMESIS, Keyword("info"), Keyword("heal"), None, int(heal_at_s * S)))
    return sorted(ops, key=lambda op: op.time)


def test_stuck_fires_when_nothing_succeeds_for_the_limit_after_the_heal():
    (finding,) = stuck_findings(_history(2.0, [0.4, 0.9], end_s=20.0), limit_s=15.0)
    assert (finding.oracle, finding.kind) == ("liveness", "stuck")
    assert finding.details["first_ok_after_s"] is None and finding.details["watched_s"] >= 15.0
    assert finding.details["invoked_after_heal"] > 20
    (late,) = stuck_findings(_history(2.0, [0.4, 18.4], end_s=20.0), limit_s=15.0)
    assert late.details["first_ok_after_s"] == pytest.approx(16.4)
    assert late.signature == finding.signature


@pytest.mark.parametrize("history", [
    _history(2.0, [0.4, 5.9], end_s=20.0),  # served again 3.9 s after the heal
    _history(2.0, [0.4], end_s=8.0),  # not watched for the limit: cannot tell
    _history(None, [0.4], end_s=20.0),  # nothing healed while clients ran
])  # fmt: skip
def test_stuck_is_quiet_when_the_cluster_served_again_or_cannot_be_judged(history):
    assert stuck_findings(history, limit_s=15.0) == []


def test_stuck_counts_the_watch_until_the_recording_stopped_not_its_last_op():
    """Clients that fail fast record their last op a tick before the limit; the recording
    itself went on until it was stopped."""
    history = _history(2.0, [0.4], end_s=16.9)  # last op at 16.9 s: 14.9 s after the heal
    assert stuck_findings(history, limit_s=15.0) == []
    (finding,) = stuck_findings(history, limit_s=15.0, watched_until=int(17.1 * S))
    assert finding.details["watched_s"] == pytest.approx(15.1)
