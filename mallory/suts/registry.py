"""The SUTs Mallory knows by name, and the client kinds a TOML spec may name.

An SUT is either a built-in, a package under `mallory/suts/<name>/` whose adapter this
registry makes by name, or a TOML spec file (mallory/harness/spec.py) run by the generic
`SpecAdapter` with the client kinds below. Adding a built-in SUT is one new package and one
line in `BUILTIN` (its adapter, the workloads its clients run, where its instrumented
program is); adding a client protocol is one line in `SPEC_CLIENTS`. The registry also
answers, before any cluster comes up, which workloads an SUT can run and where the
catalogues naming its code events are.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from mallory.cluster.backend import ClusterBackend
from mallory.errors import MalloryError
from mallory.harness.adapter import SutAdapter
from mallory.harness.line_client import LineClient
from mallory.harness.spec import load_spec
from mallory.harness.spec_adapter import ClientFactory, SpecAdapter
from mallory.harness.workload import NO_WORKLOAD
from mallory.suts.etcd.adapter import EtcdAdapter
from mallory.suts.etcd.client import EtcdClient
from mallory.suts.pysyncobj.adapter import SPEC as PYSYNCOBJ_SPEC
from mallory.suts.pysyncobj.adapter import PysyncobjAdapter
from mallory.suts.raft_kv.adapter import DEFAULT_SPEC as RAFT_KV_SPEC
from mallory.suts.raft_kv.adapter import RaftKvAdapter
from mallory.suts.redis.build import finished_redis_builds
from mallory.suts.redis.client import RedisClient
from mallory.suts.redis.replication import RedisReplicationAdapter
from mallory.suts.redis.sentinel import RedisSentinelAdapter
from mallory.suts.redis.sentinel_client import SentinelRedisClient


@dataclass(frozen=True)
class BuiltinSut:
    """A built-in SUT: `make` makes its adapter on a backend (given the client port the
    redis built-ins take), `workloads` are those its clients run, and `programs` finds the
    instrumented programs it may have run, without building or starting anything (each
    one's annotation catalogue lies beside it; none for an uninstrumented SUT)."""

    make: Callable[[ClusterBackend, int], SutAdapter]
    workloads: tuple[str, ...]
    programs: Callable[[], list[Path]] = list


def _spec_program(spec: Path) -> list[Path]:
    return [Path(load_spec(spec).command[0])]


#: name -> the built-in SUT
BUILTIN: dict[str, BuiltinSut] = {
    # Debian's redis-server, not instrumented
    "redis-replication": BuiltinSut(lambda backend, port: RedisReplicationAdapter(backend, port=port),
                                    RedisClient.WORKLOADS),
    # the instrumented build of suts/redis (built on first use; every build has its own event ids)
    "redis-sentinel": BuiltinSut(lambda backend, port: RedisSentinelAdapter(backend, port=port),
                                 SentinelRedisClient.WORKLOADS,
                                 lambda: [build / "bin" / "redis-server" for build in finished_redis_builds()]),
    # Debian's etcd-server 3.4, ports 2379 (client) and 2380 (peer): log events, no catalogue
    "etcd": BuiltinSut(lambda backend, port: EtcdAdapter(backend), EtcdClient.WORKLOADS),
    "raft-kv": BuiltinSut(lambda backend, port: RaftKvAdapter.default(backend), RaftKvAdapter.WORKLOADS,
                          lambda: _spec_program(RAFT_KV_SPEC)),
    # suts/pysyncobj: a KV service on pysyncobj, Python-level instrumentation
    "pysyncobj": BuiltinSut(lambda backend, port: PysyncobjAdapter.default(backend), PysyncobjAdapter.WORKLOADS,
                            lambda: _spec_program(PYSYNCOBJ_SPEC)),
}
BUILTIN_SUTS = tuple(BUILTIN)

#: the `[client] kind`s a spec may name
SPEC_CLIENTS: dict[str, ClientFactory] = {"line": LineClient, "redis": RedisClient}


def resolve_sut(sut: str) -> str:
    """A built-in name as it is, a spec file as an absolute path, checked now (the file reads
    as a spec and names a known client kind), so a mistake is refused before any cluster
    comes up; MalloryError otherwise."""
    if sut in BUILTIN:
        return sut
    path = Path(sut).resolve()
    if not path.exists():
        raise MalloryError(f"SUT {sut}: no such spec file (built-ins: {', '.join(BUILTIN_SUTS)})")
    spec = load_spec(path)
    if spec.client is not None and spec.client.kind not in SPEC_CLIENTS:
        raise MalloryError(
            f"{spec.source}: client.kind {spec.client.kind!r} is not a known client (known: {', '.join(sorted(SPEC_CLIENTS))})"
        )
    return str(path)


def make_adapter(sut: str, backend: ClusterBackend, port: int = 6379) -> SutAdapter:
    """The adapter for `sut` (a built-in name or a spec path) on `backend`; `port` is the
    client port of the redis built-ins (raft-kv's ports are its spec's). A spec that cannot
    be read or is broken is a MalloryError."""
    if sut in BUILTIN:
        return BUILTIN[sut].make(backend, port)
    return SpecAdapter(load_spec(sut), backend, clients=SPEC_CLIENTS)


def sut_workloads(sut: str) -> tuple[str, ...]:
    """The workloads the SUT's clients run: a built-in's, or its spec's client kind's (none
    for a spec without [client]); MalloryError for a spec that cannot be read."""
    if sut in BUILTIN:
        return BUILTIN[sut].workloads
    spec = load_spec(sut)
    return () if spec.client is None else SPEC_CLIENTS[spec.client.kind].WORKLOADS


def check_workload(sut: str, workload: str) -> None:
    """Refuse, before anything starts, a workload the SUT's clients cannot run (MalloryError
    naming those they can); NO_WORKLOAD needs no client."""
    if workload == NO_WORKLOAD:
        return
    runs = sut_workloads(sut)
    if workload not in runs:
        can = f"its clients run {', '.join(runs)}" if runs else "it has no client (a spec without [client])"
        raise MalloryError(f"SUT {sut} cannot run the {workload} workload: {can}; choose with --workload "
                           f"({' or '.join([*runs, NO_WORKLOAD])})")


def sut_programs(sut: str) -> list[Path]:
    """The instrumented programs the SUT may have run, whose annotation catalogues
    (<program>.mallory.json) name its code events, found without building or starting
    anything: a spec's program, a built-in's (every build of it still on disk). Empty for an
    uninstrumented built-in, and for a spec that is gone or broken."""
    if sut in BUILTIN:
        return BUILTIN[sut].programs()
    try:
        return _spec_program(Path(sut))
    except MalloryError:
        return []
