"""Fixtures shared by raft-kv's tests: one build for the whole session, and a 3-node
network-namespace cluster per test (root), always taken down."""

from __future__ import annotations

import os
import shutil
import uuid
from pathlib import Path

import pytest

from mallory.harness.raft_sut import build


@pytest.fixture(scope="session")
def binary(tmp_path_factory) -> Path:
    return build(tmp_path_factory.mktemp("raft-build"))


@pytest.fixture
def cluster(tmp_path: Path):
    if os.geteuid() != 0 or shutil.which("ip") is None:
        pytest.skip("needs root and iproute2 (network namespaces)")
    from nemesis.netns import NetnsCluster

    c = NetnsCluster.up(f"rkv-{uuid.uuid4().hex[:6]}", 3, data_root=tmp_path / "data")
    try:
        yield c
    finally:
        c.down()
