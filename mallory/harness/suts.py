"""An SUT by name: a built-in adapter, or a TOML spec file."""

from __future__ import annotations

from mallory.harness.adapter import SutAdapter
from nemesis.backend import ClusterBackend

#: SUTs with a Python adapter of their own, usable by name instead of a spec file.
BUILTIN_SUTS = ("redis-replication", "redis-sentinel", "raft-kv", "etcd", "pysyncobj")


def make_adapter(sut: str, backend: ClusterBackend, port: int = 6379) -> SutAdapter:
    """The adapter for `sut` (a built-in name or a spec path) on `backend`; `port` is the
    client port of the redis built-ins (raft-kv's ports are its spec's). A spec that cannot
    be read or is broken is a MalloryError."""
    from mallory.harness.redis_sut import RedisReplicationAdapter
    from mallory.harness.spec import load_spec
    from mallory.harness.spec_adapter import SpecAdapter

    if sut == "redis-replication":
        return RedisReplicationAdapter(backend, port=port)
    if sut == "redis-sentinel":  # the instrumented build of suts/redis (built on first use)
        from mallory.harness.redis_sentinel import RedisSentinelAdapter

        return RedisSentinelAdapter(backend, port=port)
    if sut == "etcd":  # Debian's etcd-server 3.4, ports 2379 (client) and 2380 (peer)
        from mallory.harness.etcd_sut import EtcdAdapter

        return EtcdAdapter(backend)
    if sut == "raft-kv":
        from mallory.harness.raft_sut import RaftKvAdapter

        return RaftKvAdapter.default(backend)
    if sut == "pysyncobj":  # suts/pysyncobj: a KV service on pysyncobj, Python-level instrumentation
        from mallory.harness.pysyncobj_sut import PysyncobjAdapter

        return PysyncobjAdapter.default(backend)
    return SpecAdapter(load_spec(sut), backend)
