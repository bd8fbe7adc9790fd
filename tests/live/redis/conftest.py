"""Fixtures of the instrumented-Redis tests: one build per session (cached across sessions
under build/redis/), and one observed 3-node netns cluster (mediator + observers + Redis
with Sentinel) per module, always taken down."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from mallory.suts.redis.build import ensure_redis_built


@pytest.fixture(scope="session")
def redis_build() -> Path:
    return ensure_redis_built()


@pytest.fixture(scope="module")
def observed(redis_build: Path, tmp_path_factory):
    """(stack, adapter, nemesis, events file): Redis + Sentinel on every node, started and
    ready, with kill/pause/partition of the primaries on offer."""
    from mallory.campaign.netns_stack import ObservedCluster
    from mallory.harness.session import start_all, teardown_all
    from mallory.suts.redis.sentinel import RedisSentinelAdapter
    from nemesis.faults.base import FaultContext
    from nemesis.nemesis import Nemesis

    record = tmp_path_factory.mktemp("redis-events")
    stack = ObservedCluster(f"rd-{uuid.uuid4().hex[:6]}", 3, record_dir=record)
    adapter = None
    try:
        adapter = RedisSentinelAdapter(stack.cluster, build_dir=redis_build)
        start_all(adapter)
        ctx = FaultContext(backend=stack.cluster, adapter=adapter, mediator=stack.client, ready_timeout=40.0)
        nemesis = Nemesis(ctx, ["kill:primaries", "pause:primaries", "partition:primaries"])
        yield stack, adapter, nemesis, record / "events.jsonl"
    finally:
        if adapter is not None:
            teardown_all(adapter)
        stack.close()
