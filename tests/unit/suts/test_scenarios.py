"""The shipped scenarios (suts/*/scenarios/*.py) load, and on hand-built runs (what a correct
and a buggy SUT would do, message by message) their filters drop what they say and their
state machines pass and fail where they say. Live runs are the scenario runner's tests."""

from __future__ import annotations

from itertools import count

import pytest

from mallory import paths
from mallory.harness.scenario_file import load_scenario
from mallory.scenario.engine import Engine
from mallory.scenario.events import Message, ScenarioEvent, client, code, fault, send
from mallory.timeline.event import Kind

NODES = ("n1", "n2", "n3")
SCENARIOS = sorted(paths.SUTS.glob("*/scenarios/*.py"))
EXAMPLE_TYPES = {"vote-request", "vote-reply", "append", "append-reply"}
RAFT_TYPES = {"append-entries", "append-entries-result", "request-vote", "request-vote-result", "install-snapshot",
              "timeout-now"}


class Cluster:
    """Hand-made messages with fresh ids, stepped through one engine."""

    def __init__(self, scenario: str) -> None:
        self.engine: Engine = load_scenario(paths.SUTS / scenario).engine(NODES)
        self.ids = count()

    def send(self, src: str, dst: str, type: str, payload: bytes = b"") -> bool:
        """Whether the filters deliver the message at once."""
        message = Message(str(next(self.ids)), src, dst, type, payload)
        return self.engine.step(send(message)).deliver == (message,)

    def event(self, event: ScenarioEvent) -> None:
        self.engine.step(event)

    @property
    def state(self) -> str:
        return self.engine.run.state.label


def test_every_shipped_scenario_loads_with_the_message_types_its_sut_declares():
    assert {p.relative_to(paths.SUTS).as_posix() for p in SCENARIOS} >= {
        "example/scenarios/sticky_leader.py", "example/scenarios/old_leader_rollback.py",
        "example/scenarios/stall_catchup.py", "example/scenarios/sticky_leader_rollback.py",
        "raft/scenarios/starved_follower.py"}
    for path in SCENARIOS:
        scenario = load_scenario(path)
        conditions = [str(c) for state in scenario.machine.states.values() for c, _ in state.transitions]
        text = " ".join([*map(str, scenario.filters.filters), *conditions])
        named = {word.split("'")[1] for word in text.split("IsMessageType(")[1:]}
        assert named and named <= (EXAMPLE_TYPES if path.parts[-3] == "example" else RAFT_TYPES), (path, named)


def sticky_leader_cut() -> Cluster:
    """sticky_leader.py up to the heal: n1 leads; n2 and n3 campaign 8 times."""
    c = Cluster("example/scenarios/sticky_leader.py")
    assert not c.send("n1", "n2", "append")  # names the leader, and is the first one held back
    assert c.state == "cut"
    assert not c.send("n1", "n3", "append") and not c.send("n3", "n1", "vote-request")
    for i in range(7):
        src, dst = ("n2", "n3") if i % 2 else ("n3", "n2")
        assert c.send(src, dst, "vote-request")
        assert not c.send(dst, src, "vote-reply")  # no election succeeds
        c.event(code(src, "stepped-down"))  # the others step down all along: not the leader
    assert c.send("n2", "n3", "vote-request")
    assert c.state == "cut" and c.engine.ctx.counters == {"elections": 8}
    assert not c.send("n3", "n2", "vote-reply")  # the machine sees the 8th count on the next event: healed
    assert c.state == "healed"
    return c


def test_sticky_leader_passes_when_the_leader_steps_down():
    c = sticky_leader_cut()
    assert c.send("n2", "n1", "vote-request")  # healed: the partition is gone
    assert not c.send("n1", "n2", "vote-reply")  # vote replies stay dropped: no other leader first
    c.event(code("n2", "stepped-down"))
    assert not c.engine.ended
    c.event(code("n1", "stepped-down"))
    verdict = c.engine.verdict()
    assert verdict.passed and [t.target for t in verdict.path] == ["cut", "healed", "successState"]


def test_sticky_leader_fails_when_the_leader_keeps_its_term():
    c = sticky_leader_cut()
    c.send("n2", "n1", "vote-request")
    c.event(code("n1", "sticky-leader-kept-term", Kind.BLOCK))
    assert c.engine.ended and not c.engine.verdict().passed and c.engine.verdict().state == "failState"


def rollback_cut() -> Cluster:
    c = Cluster("example/scenarios/old_leader_rollback.py")
    assert c.send("n1", "n2", "append", b"A 2 10.0.0.1:7001 5 2 5 0\n")  # a heartbeat passes
    assert c.state == "startState"
    c.event(client("write", "invoke"))
    assert not c.send("n1", "n2", "append", b"A 2 10.0.0.1:7001 5 2 5 1 2,P,k,1,-\n")  # the write: held back
    assert c.state == "cut"
    assert not c.send("n1", "n3", "append", b"A 2 10.0.0.1:7001 5 2 5 1 2,P,k,1,-\n")
    assert not c.send("n2", "n1", "vote-request")
    c.event(code("n1", "commit"))  # the old leader's events take no transition
    c.event(code("n2", "became-leader"))
    assert c.state == "new-leader"
    assert c.send("n2", "n3", "append", b"A 3 10.0.0.2:7001 5 2 5 1 3,G,_,-,-\n")  # within the majority
    assert not c.send("n2", "n1", "append", b"A 3 10.0.0.2:7001 5 2 5 1 3,G,_,-,-\n")  # still cut
    c.event(code("n3", "commit"))
    assert c.state == "healed"
    assert c.send("n2", "n1", "append", b"A 3 10.0.0.2:7001 6 3 6 0\n")
    return c


def test_old_leader_rollback_passes_when_the_old_leader_truncates():
    c = rollback_cut()
    c.event(code("n1", "truncate"))
    assert c.engine.ended and c.engine.verdict().passed


def test_old_leader_rollback_fails_when_the_stalled_leader_applies_its_own_writes():
    c = rollback_cut()
    c.event(code("n1", "stall-catchup-applied", Kind.BLOCK))
    assert c.engine.ended and not c.engine.verdict().passed


def test_old_leader_rollback_times_out_failed_when_no_new_leader_commits():
    c = Cluster("example/scenarios/old_leader_rollback.py")
    c.send("n1", "n2", "append", b"A 2 10.0.0.1:7001 5 2 5 1 2,P,k,1,-\n")
    c.event(code("n2", "became-leader"))
    c.event(code("n1", "truncate"))  # not from "new-leader": no transition
    verdict = c.engine.verdict()
    assert not verdict.passed and verdict.state == "new-leader"


def sticky_rollback_healed() -> Cluster:
    """sticky_leader_rollback.py up to the heal: n1 led and was cut off, n2 led and committed,
    then vanished; n3 campaigned 4 times."""
    c = Cluster("example/scenarios/sticky_leader_rollback.py")
    assert not c.send("n2", "n1", "vote-request") and c.send("n1", "n3", "vote-request")  # only n1 may win
    c.event(code("n1", "became-leader"))
    assert not c.send("n1", "n2", "append", b"A 2 10.0.0.1:7001 0 0 0 1 2,G,_,-,-\n")  # its no-op: dropped
    assert c.state == "cut"
    assert not c.send("n1", "n3", "append", b"A 2 10.0.0.1:7001 0 0 0 0\n") and not c.send("n3", "n1", "append-reply")
    assert c.send("n3", "n2", "vote-request") and not c.send("n2", "n3", "vote-reply")  # n3 cannot win
    assert c.send("n2", "n3", "vote-request") and c.send("n3", "n2", "vote-reply")  # n2 can
    c.event(code("n3", "became-leader"))  # cannot happen; takes no transition anyway
    c.event(code("n2", "became-leader"))
    assert c.state == "new-leader"
    assert c.send("n2", "n3", "append", b"A 3 10.0.0.2:7001 0 0 0 1 3,G,_,-,-\n")
    c.event(code("n2", "commit"))
    c.event(code("n3", "commit"))
    assert c.state == "committed"
    assert not c.send("n2", "n3", "append", b"A 3 10.0.0.2:7001 1 3 1 0\n")  # n2 gone
    for _ in range(4):  # one election a term, each a vote request to n1 and to n2
        assert not c.send("n3", "n1", "vote-request") and not c.send("n3", "n2", "vote-request")
    assert c.engine.ctx.counters == {"elections": 4}
    assert not c.send("n3", "n2", "vote-request")  # the machine sees the 4th count on the next event
    assert c.state == "healed"
    assert c.send("n3", "n1", "vote-request") and c.send("n1", "n3", "vote-reply")
    assert not c.send("n2", "n3", "append")
    return c


def test_sticky_leader_rollback_passes_when_the_old_leader_steps_down():
    c = sticky_rollback_healed()
    c.event(code("n1", "stepped-down"))
    verdict = c.engine.verdict()
    assert c.engine.ended and verdict.passed
    assert [t.target for t in verdict.path] == ["cut", "new-leader", "committed", "healed", "successState"]


def test_sticky_leader_rollback_fails_when_the_kept_term_overwrites_a_committed_entry():
    c = sticky_rollback_healed()
    c.event(code("n1", "sticky-leader-kept-term", Kind.BLOCK))
    assert c.state == "kept-term"
    assert c.send("n1", "n3", "append", b"A 7 10.0.0.1:7001 0 0 0 1 2,G,_,-,-\n")
    c.event(code("n3", "truncate"))
    verdict = c.engine.verdict()
    assert c.engine.ended and not verdict.passed and verdict.state == "failState"


def stall_catchup_paused() -> Cluster:
    """stall_catchup.py up to n1's pause: n1 made leader, cut off with its no-op, n2 elected."""
    c = Cluster("example/scenarios/stall_catchup.py")
    assert not c.send("n2", "n1", "vote-request") and not c.send("n3", "n2", "vote-request")  # only n1 may win
    assert c.send("n1", "n2", "vote-request") and c.send("n2", "n1", "vote-reply")
    c.event(code("n1", "became-leader"))
    assert not c.send("n1", "n2", "append", b"A 4 10.0.0.1:7001 0 0 0 1 4,G,_,-,-\n")  # its no-op: dropped
    assert c.state == "cut"
    assert not c.send("n1", "n3", "append", b"A 4 10.0.0.1:7001 0 0 0 1 4,G,_,-,-\n")
    assert not c.send("n1", "n2", "append", b"A 4 10.0.0.1:7001 0 0 0 0\n")  # heartbeats too: cut off
    assert c.send("n2", "n3", "vote-request") and c.send("n3", "n2", "vote-reply")  # no longer dropped
    assert not c.send("n2", "n1", "vote-request")
    c.event(code("n2", "became-leader"))
    assert c.state == "new-leader"
    c.event(code("n1", "commit"))  # n1's events take no transition
    c.event(code("n3", "commit"))
    assert c.state == "committed"
    assert not c.send("n2", "n1", "append", b"A 6 10.0.0.2:7001 0 0 1 1 6,G,_,-,-\n")  # still cut
    c.event(fault("pause:n1"))
    assert c.state == "paused"
    assert c.send("n2", "n1", "append", b"A 6 10.0.0.2:7001 0 0 1 1 6,G,_,-,-\n")  # queued at the paused n1
    c.event(fault("resume:n1"))
    return c


def test_stall_catchup_passes_when_the_resumed_old_leader_drops_its_uncommitted_entry():
    c = stall_catchup_paused()
    c.event(code("n1", "stepped-down"))
    c.event(code("n1", "truncate"))
    verdict = c.engine.verdict()
    assert c.engine.ended and verdict.passed
    assert [t.target for t in verdict.path] == ["cut", "new-leader", "committed", "paused", "successState"]


def test_stall_catchup_fails_when_the_stalled_old_leader_applies_then_truncates_its_entry():
    c = stall_catchup_paused()
    c.event(code("n1", "stall-catchup-applied", Kind.BLOCK))
    assert c.state == "applied-uncommitted" and not c.engine.ended
    c.event(code("n1", "truncate"))  # where example_sut.c aborts: "truncating a committed entry"
    verdict = c.engine.verdict()
    assert c.engine.ended and not verdict.passed and verdict.state == "failState"


def test_stall_catchup_fails_at_the_timeout_when_the_old_leader_dies_otherwise_after_applying():
    c = stall_catchup_paused()
    c.event(code("n1", "stall-catchup-applied", Kind.BLOCK))
    verdict = c.engine.verdict()
    assert not verdict.passed and verdict.state == "applied-uncommitted"


def test_starved_follower_passes_when_the_leader_is_deposed_and_a_leader_elected():
    c = Cluster("raft/scenarios/starved_follower.py")
    assert not c.send("n1", "n2", "append-entries")  # names leader n1 and follower n2
    assert c.state == "starving"
    assert c.send("n1", "n3", "append-entries") and c.send("n3", "n1", "append-entries-result")
    assert not c.send("n1", "n2", "install-snapshot") and not c.send("n1", "n2", "append-entries")
    assert c.engine.ctx.counters == {"starved": 2}
    c.event(code("n3", "became-candidate", Kind.BLOCK))  # not the starved one
    assert c.state == "starving"
    c.event(code("n2", "became-candidate", Kind.BLOCK))
    assert c.state == "campaigning"
    assert c.send("n1", "n2", "append-entries")  # no longer starved
    c.event(code("n1", "became-follower", Kind.BLOCK))
    c.event(code("n2", "became-leader", Kind.BLOCK))
    verdict = c.engine.verdict()
    assert verdict.passed and [t.target for t in verdict.path] == ["starving", "campaigning", "deposed", "successState"]


def test_starved_follower_fails_at_the_timeout_when_the_leader_is_never_deposed():
    c = Cluster("raft/scenarios/starved_follower.py")
    c.send("n1", "n2", "append-entries")
    c.event(code("n2", "became-candidate", Kind.BLOCK))
    c.event(code("n2", "became-follower", Kind.BLOCK))  # pre-vote: the candidate gives up, n1 leads on
    verdict = c.engine.verdict()
    assert not verdict.passed and verdict.state == "campaigning"


@pytest.mark.parametrize("path", SCENARIOS, ids=lambda p: p.relative_to(paths.SUTS).as_posix())
def test_a_scenario_left_alone_times_out_failed(path):
    engine = load_scenario(path).engine(NODES)
    assert not engine.verdict().passed and engine.verdict().state == "startState"
