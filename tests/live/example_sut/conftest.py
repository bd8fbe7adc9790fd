"""Fixtures shared by the example SUT's tests: one build for the whole session, and a
3-node network-namespace cluster per test (root), always taken down."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.live.example_sut import example_cluster as ex
from tests.live.stack import netns_cluster


@pytest.fixture(scope="session")
def binary(tmp_path_factory) -> Path:
    return ex.build(tmp_path_factory.mktemp("example-build"))


@pytest.fixture
def cluster(tmp_path: Path):
    with netns_cluster("ex", tmp_path / "data") as c:
        yield c
