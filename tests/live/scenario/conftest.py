"""The example SUT, built once for the scenario tests (with mallory-cc: its catalogue names
the code events a scenario's state machine may wait for)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.live.example_sut import example_cluster as ex


@pytest.fixture(scope="session")
def binary(tmp_path_factory) -> Path:
    return ex.build(tmp_path_factory.mktemp("example-build"))
