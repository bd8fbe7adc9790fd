"""Fixtures of the instrumented-Redis tests: one build per session (cached across sessions
under build/redis/), and one observed 3-node netns cluster (mediator + observers + Redis
with Sentinel) per module, always taken down."""

from __future__ import annotations

import os
import shutil
import uuid
from pathlib import Path

import pytest

from mallory.harness.redis_build import ensure_redis_built


def _needs_root() -> None:
    if os.geteuid() != 0 or shutil.which("ip") is None:
        pytest.skip("needs root and iproute2 (network namespaces; apt-get source may need a deb-src entry)")


@pytest.fixture(scope="session")
def redis_build() -> Path:
    _needs_root()
    return ensure_redis_built()


@pytest.fixture(scope="module")
def observed(redis_build: Path, tmp_path_factory):
    """(stack, adapter, nemesis, events file): Redis + Sentinel on every node, started and
    ready, with kill/pause/partition of the primaries on offer."""
    from mallory.harness.redis_sentinel import RedisSentinelAdapter
    from mallory.harness.session import start_all, teardown_all
    from mallory.mediator.stack import ObservedCluster
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
