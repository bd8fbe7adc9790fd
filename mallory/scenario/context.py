"""The state a scenario's conditions and actions share during one run.

Netrix keeps it in its context's VarSet (netrix sm/context.go, types/generic.go): counters
and message sets by label, recorded messages, once-flags, the partition (testlib/
parition.go, under the key "_partition") and the state machine's current state (sm/sm.go
sets "curState"). Here each has a field of its own. Counters and sets spring into being at
0 / empty the first time a label is used, as Netrix's `Count(label)` and `Set(label)` make
them. A set keeps its messages in arrival order, so `DeliverAllFromSet` releases them in the
order they were held (Netrix's map leaves the order unspecified).

One `Context` per run: the engine (mallory/scenario/engine.py) makes it with the run's
nodes, the state machine's start state and, for a filter set in force as a campaign fault,
the nodes its roles are bound to (mallory/scenario/roles.py).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Union

from mallory.scenario.events import Message, ScenarioError, ScenarioEvent

#: a node named in a scenario: its name, or a function of the event and context that gives
#: it (None when it cannot: the condition is then false), Netrix's `...F` variants
#: (IsMessageFromF, IsEventOfF)
NodeRef = Union[str, Callable[[ScenarioEvent, "Context"], "str | None"]]


class Partition:
    """The cluster's nodes in labelled parts (Netrix's `Partition`): every node in one part."""

    def __init__(self, parts: Mapping[str, Sequence[str]]) -> None:
        self.parts = {label: tuple(nodes) for label, nodes in parts.items()}
        self._label: dict[str, str] = {}
        for label, nodes in self.parts.items():
            for node in nodes:
                if node in self._label:
                    raise ScenarioError(f"partition: {node} is in parts {self._label[node]!r} and {label!r}")
                self._label[node] = label

    def part_of(self, node: str) -> str | None:
        """The label of `node`'s part (None: in no part)."""
        return self._label.get(node)

    def __str__(self) -> str:
        return " | ".join(f"{label}: {' '.join(nodes)}" for label, nodes in self.parts.items())


class Context:
    """What conditions and actions read and change (see the module docstring)."""

    def __init__(self, nodes: Sequence[str], state: str, roles: Mapping[str, str] | None = None) -> None:
        if len(set(nodes)) != len(nodes) or not all(nodes):
            raise ScenarioError(f"a run's nodes are distinct names, not {list(nodes)}")
        self.nodes = tuple(nodes)
        self.state = state
        #: role -> the node bound to it for this run (mallory/scenario/roles.py)
        self.roles: dict[str, str] = dict(roles or {})
        if strangers := sorted(n for n in self.roles.values() if n not in self.nodes):
            raise ScenarioError(f"roles bound to {', '.join(strangers)}, not a node of this run ({', '.join(self.nodes)})")
        self.counters: dict[str, int] = {}
        self.sets: dict[str, dict[str, Message]] = {}
        self.recorded: dict[str, Message] = {}
        #: names of the `Once` conditions that held and `OnceAction`s that ran (Netrix's
        #: "<name>_cond_once" / "<name>_action_once" keys: two name spaces)
        self.once: set[str] = set()
        self.partition: Partition | None = None
        #: messages `Delay` gave to be delivered later, with their delays (ns), until the
        #: filter set takes them into its decision
        self.delayed: list[tuple[Message, int]] = []

    def counter(self, label: str) -> int:
        return self.counters.setdefault(label, 0)

    def message_set(self, label: str) -> dict[str, Message]:
        """The set `label`, by message id."""
        return self.sets.setdefault(label, {})

    def node(self, ref: NodeRef, event: ScenarioEvent) -> str | None:
        return ref if isinstance(ref, str) else ref(event, self)

    def create_partition(self, parts: Mapping[str, Sequence[str] | int]) -> Partition:
        """Put every node of the run in a part and make it the partition: a part given as
        node names holds those, a part given as a size takes that many of the nodes no part
        names, in the run's node order (Netrix's `Partition.Setup` fills its parts in replica
        order). The sizes must add up to the run's nodes (Netrix's ErrNotEnoughReplicas)."""
        if any(isinstance(size, int) and size < 0 for size in parts.values()):
            raise ScenarioError(f"partition {dict(parts)}: a part's size is not negative")
        named = {n for nodes in parts.values() if not isinstance(nodes, int) for n in nodes}
        if unknown := sorted(named - set(self.nodes)):
            raise ScenarioError(f"partition: {', '.join(unknown)} is not a node of this run ({', '.join(self.nodes)})")
        rest = [n for n in self.nodes if n not in named]
        if sum(size for size in parts.values() if isinstance(size, int)) != len(rest):
            raise ScenarioError(f"partition {dict(parts)} does not cover the run's {len(self.nodes)} nodes exactly")
        resolved: dict[str, Sequence[str]] = {}
        for label, nodes in parts.items():
            if isinstance(nodes, int):
                resolved[label], rest = rest[:nodes], rest[nodes:]
            else:
                resolved[label] = nodes
        self.partition = Partition(resolved)
        return self.partition
