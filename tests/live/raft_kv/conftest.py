"""Fixtures shared by raft-kv's tests: one build for the whole session, and a 3-node
network-namespace cluster per test (root), always taken down."""

from __future__ import annotations

from pathlib import Path

import pytest

from mallory.suts.raft_kv.adapter import build
from tests.live.stack import netns_cluster


@pytest.fixture(scope="session")
def binary(tmp_path_factory) -> Path:
    return build(tmp_path_factory.mktemp("raft-build"))


@pytest.fixture
def cluster(tmp_path: Path):
    with netns_cluster("rkv", tmp_path / "data") as c:
        yield c
