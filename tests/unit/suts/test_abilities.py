"""Every built-in SUT adapter, and the generic SpecAdapter on the example spec, against the
ability protocols of mallory/harness/adapter.py: each implements exactly the abilities the
table below gives it, with the protocols' signatures and no stub for the others, and the
nemesis built on it offers the faults those abilities allow and refuses the rest.

The adapters are made on a loopback backend and never started: no process runs, and the
two built-ins that build their binary when made get a stand-in build.
"""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest

import mallory.suts.raft_kv.adapter as raft_kv_adapter
import mallory.suts.redis.sentinel as redis_sentinel
from mallory import paths
from mallory.cluster.loopback import LoopbackBackend
from mallory.errors import MalloryError
from mallory.harness.adapter import (
    FramesMessages,
    HasPrimaries,
    HasProcess,
    Killable,
    LogWatching,
    Membership,
    Pausable,
    Promotable,
    ReportsApplied,
    Stoppable,
    SutAdapter,
    TakesEnvOverlay,
    UnsupportedOperation,
)
from mallory.harness.workload import WORKLOADS, make_workload
from mallory.suts.registry import BUILTIN, make_adapter, sut_workloads
from nemesis.faults.base import FaultContext
from nemesis.nemesis import Nemesis

EXAMPLE = paths.SUTS / "example" / "example.toml"

ABILITIES = (Killable, Stoppable, Pausable, HasProcess, LogWatching, TakesEnvOverlay, HasPrimaries, Promotable, Membership,
             ReportsApplied, FramesMessages)
#: what every ProcessAdapter can do
PROCESS = frozenset({Killable, Stoppable, Pausable, HasProcess, LogWatching, TakesEnvOverlay})
#: what every SpecAdapter can do beyond: its spec's [messages]
SPEC = PROCESS | {FramesMessages}
#: SUT -> the abilities its adapter has ("example": the generic SpecAdapter on EXAMPLE)
EXPECTED = {
    "redis-replication": PROCESS | {HasPrimaries, Promotable},
    "redis-sentinel": PROCESS | {HasPrimaries},
    "etcd": PROCESS | {HasPrimaries, Promotable, Membership},
    "raft-kv": SPEC | {HasPrimaries, Promotable, Membership, ReportsApplied},
    "pysyncobj": SPEC | {ReportsApplied},
    "example": SPEC,
}
#: faults that need the SUT to name its primaries
PRIMARIES_FAULTS = ("kill:primaries", "pause:primaries", "partition:primaries")


class UnstartedBackend(LoopbackBackend):
    """A loopback backend on which nothing may start."""

    def spawn(self, node, argv, **kwargs):
        pytest.fail(f"{argv[0]} was started on {node}: adapters here are only made")


class UnusedFirewall:
    """A mediator for the partition faults' offer; building the catalogue calls none of it."""

    def __getattr__(self, call: str):
        pytest.fail(f"the firewall was asked {call} while the nemesis was built")


@pytest.fixture
def made(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """name -> its adapter, made as `mallory fuzz --sut name` makes it, on 3 unstarted nodes."""
    monkeypatch.setattr(redis_sentinel, "ensure_redis_built", lambda asan=False: tmp_path / "redis-build")
    monkeypatch.setattr(raft_kv_adapter, "build", lambda build_dir=None: tmp_path / "raft-kv")
    backend = UnstartedBackend(3, tmp_path / "cluster")

    def make(name: str) -> SutAdapter:
        return make_adapter(str(EXAMPLE) if name == "example" else name, backend)

    return make


def methods(protocol: type) -> list[str]:
    return [name for name, _ in inspect.getmembers(protocol, inspect.isfunction) if not name.startswith("_")]


def parameters(function) -> list[str]:
    return list(inspect.signature(function).parameters)


def test_the_table_covers_every_builtin_sut():
    assert set(EXPECTED) == {*BUILTIN, "example"}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_every_adapter_is_a_sut_adapter(name: str, made) -> None:
    adapter = made(name)
    assert isinstance(adapter, SutAdapter) and isinstance(adapter.name, str) and adapter.backend.nodes
    for method in methods(SutAdapter):
        assert parameters(getattr(type(adapter), method)) == parameters(getattr(SutAdapter, method)), method


@pytest.mark.parametrize("name", sorted(EXPECTED))
@pytest.mark.parametrize("ability", ABILITIES, ids=lambda ability: ability.__name__)
def test_an_adapter_has_an_ability_exactly_when_the_table_says(ability: type, name: str, made) -> None:
    adapter = made(name)
    assert isinstance(adapter, ability) == (ability in EXPECTED[name])
    for method in methods(ability):
        if ability in EXPECTED[name]:
            own = getattr(type(adapter), method)
            assert own is not getattr(ability, method), f"{name} declares {ability.__name__} but does not define {method}"
            assert parameters(own) == parameters(getattr(ability, method)), method
        else:
            assert not hasattr(adapter, method), f"{name} has {method} but is no {ability.__name__}: no stubs"


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_the_nemesis_offers_the_faults_the_abilities_allow(name: str, made) -> None:
    adapter = made(name)
    abilities = EXPECTED[name]
    ctx = FaultContext(adapter.backend, adapter, mediator=UnusedFirewall())
    nemesis = Nemesis(ctx)
    offered = set(nemesis.actions())
    assert {"kill:one", "stop:one", "pause:one"} <= offered
    wanted = {label: HasPrimaries in abilities for label in PRIMARIES_FAULTS}
    wanted["membership:promote"] = {Promotable, HasPrimaries} <= abilities
    wanted["membership:promote-cut-off"] = wanted["membership:promote-lagging"] = {Promotable, HasPrimaries} <= abilities
    wanted["membership:promote-paused"] = {Promotable, HasPrimaries, Pausable} <= abilities
    wanted["membership:remove"] = Membership in abilities
    for label, allowed in wanted.items():
        assert (label in offered) == allowed, label
        if not allowed:
            assert adapter.name in nemesis.refused[label]
            with pytest.raises(MalloryError, match=f"fault {label} refused: {adapter.name} cannot"):
                Nemesis(ctx, enabled=[label])


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_an_adapter_makes_clients_for_exactly_the_workloads_the_registry_names(name: str, made) -> None:
    """What `mallory fuzz` refuses up front (registry.check_workload) is what the adapter
    would fail at in a worker thread, and nothing more."""
    adapter = made(name)
    runs = sut_workloads(str(EXAMPLE) if name == "example" else name)
    assert runs and set(runs) <= set(WORKLOADS)
    node = adapter.backend.nodes[0]
    for workload in WORKLOADS:
        if workload in runs:
            assert adapter.client(node, make_workload(workload)) is not None, workload
        else:
            with pytest.raises((ValueError, UnsupportedOperation)):
                adapter.client(node, make_workload(workload))
