"""Fixtures shared by raft-kv's tests: one build for the whole session."""

from __future__ import annotations

from pathlib import Path

import pytest

from mallory.harness.raft_sut import build


@pytest.fixture(scope="session")
def binary(tmp_path_factory) -> Path:
    return build(tmp_path_factory.mktemp("raft-build"))
