"""What every fault family shares: the context it acts through (and the protocols of the
backend and firewall it uses), the report it returns, and the protocol a family implements.

A family (partition, process, packet, clock, disk, membership) offers specs (Jepsen's
names: `partition:majority`, `kill:one`, ...). `enact` does the fault and checks it took
effect, returning a `FaultReport` (which nodes, which links, the parameters, when, and the
evidence); `heal` undoes exactly what the report says was done. `unsupported` says why a
spec cannot be offered on this SUT/cluster (None if it can), so the nemesis refuses it up
front instead of pretending to enact it. A family that must start watching early is also
`Armed`; one whose faults keep acting in the background `HasBackgroundWork`; one whose
faults last their step's window only `LastsOneWindow`.
"""

from __future__ import annotations

import random
import subprocess
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from mallory.errors import MalloryError
from mallory.harness.adapter import SutAdapter
from nemesis.faults.controls import NodeControls
from nemesis.faults.targets import Link


class FaultBackend(Protocol):
    """What the faults use of the cluster backend: its nodes, a node's data directory (disk
    faults act under it) and a short command run inside a node (the clock and disk probes,
    under the SUT's fault env). The netns and docker backends offer it; loopback cannot
    exec. The run record is not read here: the fault controls journal their files in it."""

    @property
    def nodes(self) -> Sequence[str]: ...

    def data_dir(self, node: str) -> Path: ...

    def exec(self, node: str, argv: Sequence[str], *, timeout: float = 30.0, check: bool = True) -> subprocess.CompletedProcess[str]:
        """Run argv inside the node to completion, its output captured as text; MalloryError
        on a non-zero exit when `check`."""
        ...


class Firewall(Protocol):
    """The gateway firewall calls the network faults make (mallory/mediator/client.py
    `MediatorClient` makes them over the mediator's API). The firewall keeps one rule per
    directed link; each change answers the mediator's JSON, with the `links` it changed
    ("src->dst") and, when known, `applied_us`. A refused or unanswered call raises
    MalloryError."""

    def drop(self, links: Sequence[Link]) -> dict[str, Any]:
        """Drop every packet on `links`."""
        ...

    def delay(self, links: Sequence[Link], ms: float) -> dict[str, Any]:
        """Hold every packet on `links` for `ms` (order kept); 0 lifts the delay."""
        ...

    def duplicate(self, links: Sequence[Link], copies: int = 1) -> dict[str, Any]:
        """Send `copies` extra copies of every packet on `links`; 0 lifts it."""
        ...

    def heal(self, links: Sequence[Link] | None = None) -> dict[str, Any]:
        """Clear the whole rule of `links` (None: of every link)."""
        ...

    def rules(self) -> list[dict[str, Any]]:
        """The rules in force: src, dst, drop, delay_ms, copies, and the packets `affected`."""
        ...

    def metrics(self) -> dict[str, Any]:
        """The mediator's counters; `["firewall"]` counts packets dropped, delayed and
        duplicated so far."""
        ...


@dataclass
class FaultContext:
    """Everything a fault acts through: the cluster `backend`, the SUT `adapter` (what a
    fault needs beyond `SutAdapter` it asks for with the ability protocols of
    mallory/harness/adapter.py), the gateway `mediator` (None: no network faults) and the
    per-node clock/disk `controls` (None: no preload faults)."""

    backend: FaultBackend
    adapter: SutAdapter
    mediator: Firewall | None = None
    controls: NodeControls | None = None
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

    def enact(self, ctx: FaultContext, spec: str, rng: random.Random) -> FaultReport:
        """Do the fault and check it took effect. Called only for specs `unsupported`
        allowed, so it may use the abilities and parts of `ctx` that checked."""
        ...

    def heal(self, ctx: FaultContext, report: FaultReport) -> None:
        """Undo exactly what `report` says was done (and mark it healed); MalloryError when
        that cannot be done now."""
        ...


@runtime_checkable
class Armed(Protocol):
    """A family that must start watching before its first fault (disk: recording unsynced
    writes, so that `lose-unsynced` knows what a crash would lose)."""

    def arm(self, ctx: FaultContext, specs: list[str]) -> None:
        """Prepare for the family's enabled `specs` (at least one); the Nemesis calls it
        once, when it is built."""
        ...


@runtime_checkable
class HasBackgroundWork(Protocol):
    """A family whose faults keep acting after `enact` returned (clock: the strobe thread
    flipping offsets)."""

    def stop_background_work(self) -> None:
        """Stop all of it now, healed or not. Every reset calls it after the heals and
        before the fault controls are cleared, so nothing sets a fault again afterwards."""
        ...


@runtime_checkable
class LastsOneWindow(Protocol):
    """A family whose faults last one step's window (filter sets: one window's message
    control): the campaign loop heals such a fault as soon as its window is observed, so it
    never accumulates with the faults of later steps."""

    def lasts_one_window(self, report: FaultReport) -> bool:
        """Whether the fault `report` describes is to be healed after its window."""
        ...


def check_spec(family: FaultFamily, spec: str) -> None:
    if spec not in family.specs:
        raise MalloryError(f"{family.family}: no spec {spec!r} (specs: {', '.join(family.specs)})")
