"""The SUTs Mallory knows by name, and the client kinds a TOML spec may name.

An SUT is either a built-in, a package under `mallory/suts/<name>/` whose adapter this
registry makes by name, or a TOML spec file (mallory/harness/spec.py) run by the generic
`SpecAdapter` with the client kinds below. Adding a built-in SUT is one new package and one
line in `BUILTIN`; adding a client protocol is one line in `SPEC_CLIENTS`.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from mallory.cluster.backend import ClusterBackend
from mallory.errors import MalloryError
from mallory.harness.adapter import SutAdapter
from mallory.harness.line_client import LineClient
from mallory.harness.spec import load_spec
from mallory.harness.spec_adapter import ClientFactory, SpecAdapter
from mallory.suts.etcd.adapter import EtcdAdapter
from mallory.suts.pysyncobj.adapter import PysyncobjAdapter
from mallory.suts.raft_kv.adapter import RaftKvAdapter
from mallory.suts.redis.client import RedisClient
from mallory.suts.redis.replication import RedisReplicationAdapter
from mallory.suts.redis.sentinel import RedisSentinelAdapter

#: name -> factory(backend, client port of the redis built-ins) -> adapter
BUILTIN: dict[str, Callable[[ClusterBackend, int], SutAdapter]] = {
    "redis-replication": lambda backend, port: RedisReplicationAdapter(backend, port=port),
    # the instrumented build of suts/redis (built on first use)
    "redis-sentinel": lambda backend, port: RedisSentinelAdapter(backend, port=port),
    # Debian's etcd-server 3.4, ports 2379 (client) and 2380 (peer)
    "etcd": lambda backend, port: EtcdAdapter(backend),
    "raft-kv": lambda backend, port: RaftKvAdapter.default(backend),
    # suts/pysyncobj: a KV service on pysyncobj, Python-level instrumentation
    "pysyncobj": lambda backend, port: PysyncobjAdapter.default(backend),
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
        return BUILTIN[sut](backend, port)
    return SpecAdapter(load_spec(sut), backend, clients=SPEC_CLIENTS)
