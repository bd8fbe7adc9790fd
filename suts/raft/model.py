"""A Raft model of raft-kv (raft_kv.c on libraft 0.15), for
`mallory fuzz --sut raft-kv --model suts/raft/model.py`.

What it sees. raft-kv's annotations carry a label and nothing else, and its log events
(suts/raft/raft.toml) a name: no term, no index, no candidate. So the model follows, per
node, its role (follower, candidate, leader, or unknown until an event tells), whether it
is up, and its last snapshot event (taken, or restored: installed from a leader or loaded
at start); per cluster, which nodes the partitions in force cut off from a majority, the
votes granted since the last election began (0, 1, 2 or more), whether a leader lost its
quorum since the last election, and whether the configuration changed during the
schedule. Faults come from the fuzzer: kill, stop and pause take a node down until `heal`
(a killed or stopped node restarts with its role unknown); partitions cut links; a node
that logs `unavailable-exit` is down too. Nodes are interchangeable: a state is the
multiset of the nodes' states.

Roles come from the role blocks (became-follower/-candidate/-leader), code events whose
order is exact. Votes, lost quorum and snapshot installs come from log lines, which are
timed when the observer reads them (up to a batch late): the model only counts those and
never checks them against a role, so their lateness makes no mismatch.

What it cannot see: terms (two leaders in one term is the replica oracle's job), which
node a vote went to, log indexes and commit progress, and who is in the configuration.

What it refuses (a mismatch, counted by event):
  - became-follower on a follower (the block runs on a change of role only);
  - became-candidate on a leader (libraft's leader steps down first);
  - became-leader on a follower (it must have been a candidate), or while the partitions
    in force cut it off from a majority (it cannot have had a majority's votes);
  - any code event of a node that is down (killed, stopped, paused, exited).
A schedule starts with every role unknown: the model knows the cluster only from the
events of that schedule's windows.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

from mallory.learner.model import Step, cut_off

NAME = "raft-kv-raft"

UNKNOWN, FOLLOWER, CANDIDATE, LEADER = "?", "follower", "candidate", "leader"
#: fault families that take a node down; a killed or stopped node comes back with a fresh
#: process, a paused one as it was
DOWN_FAULTS = {"kill", "stop", "pause"}
#: how a node that exited on its own (unavailable-exit) is down
EXITED = "exited"


class State(NamedTuple):
    nodes: tuple[str, ...]
    roles: dict[str, str]
    #: node -> why it is down (a fault family, or EXITED)
    down: dict[str, str]
    #: node -> "taken" or "restored", its last snapshot event
    snapshots: dict[str, str]
    links: frozenset[tuple[str, str]]
    votes: int
    lost_quorum: bool
    reconfigured: bool


def initial(nodes: tuple[str, ...]) -> State:
    return State(nodes, {n: UNKNOWN for n in nodes}, {}, {}, frozenset(), 0, False, False)


def _up(state: State, step: Step) -> bool:
    return step.node not in state.down


def _role(state: State, node: str, role: str, **changes: object) -> State:
    return state._replace(roles={**state.roles, node: role}, **changes)


def became_follower(state: State, step: Step) -> State | None:
    if not _up(state, step) or state.roles[step.node] == FOLLOWER:
        return None
    return _role(state, step.node, FOLLOWER)


def became_candidate(state: State, step: Step) -> State | None:
    if not _up(state, step) or state.roles[step.node] in (LEADER, CANDIDATE):
        return None
    return _role(state, step.node, CANDIDATE, votes=0)


def became_leader(state: State, step: Step) -> State | None:
    if not _up(state, step) or state.roles[step.node] not in (CANDIDATE, UNKNOWN):
        return None
    if step.node in cut_off(state.nodes, state.links):
        return None
    return _role(state, step.node, LEADER, votes=0, lost_quorum=False)


def snapshot(kind: str) -> Callable[[State, Step], State | None]:
    """The action of a snapshot event of `kind` ("taken", "restored") on its node."""
    def take(state: State, step: Step) -> State | None:
        return state._replace(snapshots={**state.snapshots, step.node: kind}) if _up(state, step) else None
    return take


def reconfigured(state: State, step: Step) -> State | None:
    return state._replace(reconfigured=True) if _up(state, step) else None


def alive(state: State, step: Step) -> State | None:
    """A code event that changes nothing the model follows, but says the node runs."""
    return state if _up(state, step) else None


def exited(state: State, step: Step) -> State | None:
    if not _up(state, step):
        return None
    return _role(state, step.node, UNKNOWN, down={**state.down, step.node: EXITED})


def vote_granted(state: State, step: Step) -> State:
    return state._replace(votes=min(state.votes + 1, 2))


def lost_quorum(state: State, step: Step) -> State:
    return state._replace(lost_quorum=True)


def fault(state: State, step: Step) -> State:
    family = step.event.removeprefix("fault:")
    if family in DOWN_FAULTS:
        return state._replace(down={**state.down, **{n: family for n in step.targets}})
    return state._replace(links=state.links | frozenset(step.links))


def heal(state: State, step: Step) -> State:
    """Every fault healed: paused nodes resume as they were, the others start afresh (role
    unknown until they speak)."""
    roles = {n: UNKNOWN if state.down.get(n, "pause") != "pause" else r for n, r in state.roles.items()}
    return state._replace(roles=roles, down={}, links=frozenset())


ACTIONS = {
    "became-follower": became_follower,
    "became-candidate": became_candidate,
    "became-leader": became_leader,
    "snapshot-taken": snapshot("taken"),
    "snapshot-restored": snapshot("restored"),
    "reconfigured": reconfigured,
    "alive": alive,
    "exited": exited,
    "vote-granted": vote_granted,
    "lost-quorum": lost_quorum,
    "fault": fault,
    "heal": heal,
}

EVENTS = {
    "became-follower": "became-follower",
    "became-candidate": "became-candidate",
    "became-leader": "became-leader",
    "snapshot": "snapshot-taken",
    "restore": "snapshot-restored",
    "membership-change": "reconfigured",
    "apply": "alive",
    "leader-lost": "alive",
    "unavailable-exit": "exited",
    "libraft-vote-granted": "vote-granted",
    "libraft-lost-quorum": "lost-quorum",
    "fault:kill": "fault",
    "fault:stop": "fault",
    "fault:pause": "fault",
    "fault:partition": "fault",
    "fault:heal": "heal",
}


def abstract(state: State) -> tuple:
    cut = cut_off(state.nodes, state.links)
    per_node = tuple(sorted(
        (state.roles[n], state.down.get(n, "up"), n in cut, state.snapshots.get(n, "")) for n in state.nodes))
    return per_node, state.votes, state.lost_quorum, state.reconfigured
