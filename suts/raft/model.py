"""A Raft model of raft-kv (raft_kv.c on libraft 0.15), for
`mallory fuzz --sut raft-kv --model suts/raft/model.py`.

What it sees. raft-kv's annotations carry a label and nothing else, and its log events
(suts/raft/raft.toml) a name: no term, no index, no candidate. So the model follows, per
node, its role (follower, candidate, leader, or unknown until an event tells), whether it
is up, and its last snapshot event (taken, or restored: installed from a leader or loaded
at start); per cluster, which nodes the partitions in force cut off from a majority, the
votes granted since the last election began (0, 1, 2 or more), whether a leader lost its
quorum since the last election, and whether the configuration changed during the
schedule. Faults come from the fuzzer: kill, stop, pause, and the membership faults that
stop or pause their node (remove: stopped and wiped, added back fresh by the heal;
promote-paused) take a node down until `heal` (a killed or stopped node restarts with its
role unknown); partitions and promote-cut-off cut links; a node that logs
`unavailable-exit` is down too. Nodes are interchangeable: a state is the multiset of the
nodes' states.

Roles come from the role blocks (became-follower/-candidate/-leader), code events whose
order is exact. raft-kv samples its role once per event-loop iteration (`watch`, a uv
check handle) and runs a block when the sample changed: a role that came and went within
one iteration never shows. An election won that fast is common (the timer fires, the
votes come back 2 ms later in the same poll: "became leader (was follower)" in the node's
log), so a follower may become leader; a role cannot follow itself, though. Votes, lost
quorum and snapshot installs come from log lines, which are timed when the observer reads
them (up to a batch late): the model only counts those and never checks them against a
role, so their lateness makes no mismatch.

A fault's event comes once the fault is done, and a heal's once every fault is healed. So
two ways back are seen before their event: a stop of a paused node resumes it first
(SIGCONT: it could not act on its stop signal otherwise), and the heal of a removal starts
the node afresh and waits for it to join, its FAULT event after the node's first events.
A paused node that speaks was resumed (by a stop), and a removed node that speaks was
added back (by a heal, role unknown): the model takes them as up from that event on.

What it cannot see: terms (two leaders in one term is the replica oracle's job), which
node a vote went to, log indexes and commit progress, and who is in the configuration.

What it refuses (a mismatch, counted by event):
  - a role block on a node already in that role (the block runs on a change of role);
  - became-candidate on a leader (libraft's leader steps down first, and its election
    timer fires in a later iteration);
  - became-leader while the partitions in force cut the node off from a majority (it
    cannot have had a majority's votes);
  - any code event of a node that is down (killed, stopped, removed, exited).
A schedule starts with every role unknown: the model knows the cluster only from the
events of that schedule's windows.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

from mallory.learner.model import Step, cut_off

NAME = "raft-kv-raft"

UNKNOWN, FOLLOWER, CANDIDATE, LEADER = "?", "follower", "candidate", "leader"
PAUSED, REMOVED = "pause", "removed"
#: fault actions or families -> how they take their nodes down; a heal brings a stopped,
#: killed or removed node back with a fresh process, a paused one as it was
DOWN_FAULTS = {"kill": "kill", "stop": "stop", PAUSED: PAUSED,
               "membership:remove": REMOVED, "membership:promote-paused": PAUSED}
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


def _awake(state: State, step: Step) -> State | None:
    """The state in which the step's node can have spoken: None if it is down; a paused
    node is taken as resumed, a removed one as added back (see the module docstring)."""
    why = state.down.get(step.node)
    if why is None:
        return state
    if why not in (PAUSED, REMOVED):
        return None
    back = state._replace(down={n: w for n, w in state.down.items() if n != step.node})
    return back if why == PAUSED else _role(back, step.node, UNKNOWN)


def _role(state: State, node: str, role: str, **changes: object) -> State:
    return state._replace(roles={**state.roles, node: role}, **changes)


def became_follower(state: State, step: Step) -> State | None:
    state = _awake(state, step)
    if state is None or state.roles[step.node] == FOLLOWER:
        return None
    return _role(state, step.node, FOLLOWER)


def became_candidate(state: State, step: Step) -> State | None:
    state = _awake(state, step)
    if state is None or state.roles[step.node] in (LEADER, CANDIDATE):
        return None
    return _role(state, step.node, CANDIDATE, votes=0)


def became_leader(state: State, step: Step) -> State | None:
    state = _awake(state, step)
    if state is None or state.roles[step.node] == LEADER:
        return None
    if step.node in cut_off(state.nodes, state.links):
        return None
    return _role(state, step.node, LEADER, votes=0, lost_quorum=False)


def snapshot(kind: str) -> Callable[[State, Step], State | None]:
    """The action of a snapshot event of `kind` ("taken", "restored") on its node."""
    def take(state: State, step: Step) -> State | None:
        state = _awake(state, step)
        return None if state is None else state._replace(snapshots={**state.snapshots, step.node: kind})
    return take


def reconfigured(state: State, step: Step) -> State | None:
    state = _awake(state, step)
    return None if state is None else state._replace(reconfigured=True)


def alive(state: State, step: Step) -> State | None:
    """A code event that changes nothing the model follows, but says the node runs."""
    return _awake(state, step)


def exited(state: State, step: Step) -> State | None:
    state = _awake(state, step)
    if state is None:
        return None
    return _role(state, step.node, UNKNOWN, down={**state.down, step.node: EXITED})


def vote_granted(state: State, step: Step) -> State:
    return state._replace(votes=min(state.votes + 1, 2))


def lost_quorum(state: State, step: Step) -> State:
    return state._replace(lost_quorum=True)


def fault(state: State, step: Step) -> State:
    """A fault that takes its nodes down (DOWN_FAULTS: by action, else by family), or one
    whose report's links are dropped (a partition, promote-cut-off)."""
    action = step.event.removeprefix("fault:")
    how = DOWN_FAULTS.get(action, DOWN_FAULTS.get(action.partition(":")[0]))
    if how is not None:
        return state._replace(down={**state.down, **{n: how for n in step.targets}})
    return state._replace(links=state.links | frozenset(step.links))


def heal(state: State, step: Step) -> State:
    """Every fault healed: paused nodes resume as they were, the others start afresh (role
    unknown until they speak)."""
    roles = {n: UNKNOWN if state.down.get(n, PAUSED) != PAUSED else r for n, r in state.roles.items()}
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
    "fault:membership:remove": "fault",
    "fault:membership:promote-paused": "fault",
    "fault:membership:promote-cut-off": "fault",
    "fault:heal": "heal",
}


def abstract(state: State) -> tuple:
    cut = cut_off(state.nodes, state.links)
    per_node = tuple(sorted(
        (state.roles[n], state.down.get(n, "up"), n in cut, state.snapshots.get(n, "")) for n in state.nodes))
    return per_node, state.votes, state.lost_quorum, state.reconfigured
