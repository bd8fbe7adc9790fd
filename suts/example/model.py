"""A Raft model of the example SUT (example_sut.c), for `mallory fuzz --model suts/example/model.py`.

What it sees. The SUT's annotations carry a label and nothing else: no term, no index, no
vote's candidate. So the model follows, per node, its role (follower, candidate, leader,
or unknown until an event tells) and whether it is up; per cluster, which nodes the
partitions in force cut off from a majority, whether any entry was applied since the last
election, and whether a log was truncated since then. Faults come from the fuzzer: kill,
stop and pause take a node down until `heal` (a killed or stopped node restarts with its
role unknown); partitions cut links. Nodes are interchangeable, so a state is the multiset
of the nodes' states (node names do not make states).

A heal's event comes once every fault is healed, and the heal resumes paused nodes last
(Nemesis.heal_all), up to 10 ms before its event: a resumed node's first steps (its backlog of
appends, a step down, a leader's replicates) precede the event. A paused process runs
nothing, so a paused node that speaks was resumed: the model takes it as up from that
event on, its role as it was.

What it cannot see: terms (two leaders in one term is the replica oracle's job, from the
leader's log line), votes (the example SUT annotates none), indexes (commit progress is
"applied since the election", not how far), and which leader a follower follows.

What it refuses (a mismatch, counted by event):
  - became-leader on a node that was not a candidate, or while the partitions in force
    cut it off from a majority (it cannot have had a majority's votes);
  - election-started on a leader (a leader's timer never fires: it sends heartbeats);
  - replicate or client-request on a node known not to lead (only a leader sends appends
    and takes requests);
  - any event of a node that is killed or stopped (until the heal restarts it);
  - sticky-leader-kept-term and stall-catchup-applied: the seeded bugs' own blocks, steps
    Raft does not have (a leader taking a higher term without stepping down; applying
    entries before checking the log matches the leader's).
A schedule starts with every role unknown: the model knows the cluster only from the
events of that schedule's windows.
"""

from __future__ import annotations

from typing import NamedTuple

from mallory.learner.model import Step, cut_off

NAME = "example-raft"

UNKNOWN, FOLLOWER, CANDIDATE, LEADER = "?", "follower", "candidate", "leader"
#: fault families that take a node down; a killed or stopped node comes back with a fresh
#: process, a paused one as it was
PAUSED = "pause"
DOWN_FAULTS = {"kill", "stop", PAUSED}


class State(NamedTuple):
    nodes: tuple[str, ...]
    roles: dict[str, str]
    #: node -> the family of the fault that took it down
    down: dict[str, str]
    #: links the partitions in force drop
    links: frozenset[tuple[str, str]]
    applied: bool
    truncated: bool


def initial(nodes: tuple[str, ...]) -> State:
    return State(nodes, {n: UNKNOWN for n in nodes}, {}, frozenset(), False, False)


def _awake(state: State, step: Step) -> State | None:
    """The state in which the step's node can have spoken: None if it is killed or stopped;
    a paused one is taken as resumed (see the module docstring)."""
    why = state.down.get(step.node)
    if why is None:
        return state
    if why != PAUSED:
        return None
    return state._replace(down={n: w for n, w in state.down.items() if n != step.node})


def _role(state: State, node: str, role: str, **changes: object) -> State:
    return state._replace(roles={**state.roles, node: role}, **changes)


def election_started(state: State, step: Step) -> State | None:
    state = _awake(state, step)
    if state is None or state.roles[step.node] == LEADER:
        return None
    return _role(state, step.node, CANDIDATE)


def became_leader(state: State, step: Step) -> State | None:
    state = _awake(state, step)
    if state is None or state.roles[step.node] not in (CANDIDATE, UNKNOWN):
        return None
    if step.node in cut_off(state.nodes, state.links):
        return None
    return _role(state, step.node, LEADER, applied=False, truncated=False)


def stepped_down(state: State, step: Step) -> State | None:
    state = _awake(state, step)
    return None if state is None else _role(state, step.node, FOLLOWER)


def appended(state: State, step: Step) -> State | None:
    """An append came in: a follower's daily bread, and the leader of a lower term steps
    down on it (a leader of the same term would be two leaders: the SUT asserts)."""
    return _awake(state, step)


def leads(state: State, step: Step) -> State | None:
    state = _awake(state, step)
    if state is None or state.roles[step.node] in (FOLLOWER, CANDIDATE):
        return None
    return _role(state, step.node, LEADER)


def applied(state: State, step: Step) -> State | None:
    state = _awake(state, step)
    return None if state is None else state._replace(applied=True)


def truncated(state: State, step: Step) -> State | None:
    state = _awake(state, step)
    return None if state is None else state._replace(truncated=True)


def not_raft(state: State, step: Step) -> None:
    return None


def fault(state: State, step: Step) -> State:
    family = step.event.removeprefix("fault:")
    if family in DOWN_FAULTS:
        return state._replace(down={**state.down, **{n: family for n in step.targets}})
    return state._replace(links=state.links | frozenset(step.links))


def heal(state: State, step: Step) -> State:
    """Every fault healed: paused nodes resume as they were, killed and stopped ones start
    afresh (role unknown until they speak)."""
    roles = {n: UNKNOWN if state.down.get(n) in ("kill", "stop") else r for n, r in state.roles.items()}
    return state._replace(roles=roles, down={}, links=frozenset())


ACTIONS = {
    "election-started": election_started,
    "became-leader": became_leader,
    "stepped-down": stepped_down,
    "appended": appended,
    "leads": leads,
    "applied": applied,
    "truncated": truncated,
    "not-raft": not_raft,
    "fault": fault,
    "heal": heal,
}

EVENTS = {
    "election-started": "election-started",
    "became-leader": "became-leader",
    "stepped-down": "stepped-down",
    "append-received": "appended",
    "replicate": "leads",
    "client-request": "leads",
    "apply": "applied",
    "truncate": "truncated",
    "sticky-leader-kept-term": "not-raft",
    "stall-catchup-applied": "not-raft",
    "fault:kill": "fault",
    "fault:stop": "fault",
    "fault:pause": "fault",
    "fault:partition": "fault",
    "fault:heal": "heal",
}


def abstract(state: State) -> tuple:
    cut = cut_off(state.nodes, state.links)
    per_node = tuple(sorted((state.roles[n], state.down.get(n, "up"), n in cut) for n in state.nodes))
    return per_node, state.applied, state.truncated
