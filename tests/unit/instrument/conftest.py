"""Fixtures of the LLVM pass, runtime and wrapper tests: an environment to build with
(the toolchain itself is tests/unit/conftest.py's `tc`)."""

from __future__ import annotations

import os

import pytest

from tests.unit.instrument.llvm_helpers import VENV_BIN


@pytest.fixture
def build_env(tc) -> dict[str, str]:
    """An environment with mallory-cc / mallory-c++ on PATH and no MALLORY_* settings."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MALLORY_")}
    env["PATH"] = f"{VENV_BIN}{os.pathsep}{env.get('PATH', '')}"
    return env
