"""What every fault family shares: the context it acts through, the report it returns,
and the protocol a family implements.

A family (partition, process, packet, clock, disk, membership) offers specs (Jepsen's
names: `partition:majority`, `kill:one`, ...). `enact` does the fault and checks it took
effect, returning a `FaultReport` (which nodes, which links, the parameters, when, and the
evidence); `heal` undoes exactly what the report says was done. `unsupported` says why a
spec cannot be offered on this SUT/cluster (None if it can), so the nemesis refuses it up
front instead of pretending to enact it.
"""

from __future__ import annotations

import random
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

from mallory.errors import MalloryError


@dataclass
class FaultContext:
    """Everything a fault acts through. `backend` is a cluster backend (NetnsCluster:
    exec inside a node, the run record); `adapter` the SUT adapter; `mediator` a
    MediatorClient for the gateway firewall (None: no network faults); `controls` the
    per-node clock/disk controls (None: no preload faults)."""

    backend: Any
    adapter: Any
    mediator: Any = None
    controls: Any = None
    #: seconds a node gets to become ready in a reset
    ready_timeout: float = 20.0
    #: the faults in force (the Nemesis keeps it): healing one must not lift another's links
    active: list["FaultReport"] = field(default_factory=list)

    @property
    def nodes(self) -> list[str]:
        return list(self.backend.nodes)


@dataclass(eq=False)  # identity: two alike faults in force are still two faults
class FaultReport:
    """What a fault did, and the evidence that it took effect."""

    action: str  # the label, "partition:majority"
    family: str  # "partition"
    spec: str  # "majority"
    nodes: list[str] = field(default_factory=list)
    links: list[str] = field(default_factory=list)  # "n1->n2"
    params: dict[str, Any] = field(default_factory=dict)
    started_ns: int = field(default_factory=time.time_ns)  # wall clock of the controller
    verified: bool = False
    evidence: dict[str, Any] = field(default_factory=dict)
    healed: bool = False
    heal_evidence: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


class FaultFamily(Protocol):
    family: str
    specs: tuple[str, ...]

    def unsupported(self, ctx: FaultContext, spec: str) -> str | None:
        """Why `spec` cannot be enacted here, or None when it can."""
        ...

    def enact(self, ctx: FaultContext, spec: str, rng: random.Random) -> FaultReport: ...

    def heal(self, ctx: FaultContext, report: FaultReport) -> None: ...


def check_spec(family: FaultFamily, spec: str) -> None:
    if spec not in family.specs:
        raise MalloryError(f"{family.family}: no spec {spec!r} (specs: {', '.join(family.specs)})")
