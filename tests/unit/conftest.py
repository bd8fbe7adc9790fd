"""Fixtures shared by unit tests of several packages."""

from __future__ import annotations

import os
import uuid

import pytest

from mallory.instrument import toolchain
from mallory.observer.ring import unlink_ring


@pytest.fixture
def shm_name():
    """A unique ring name, unlinked after the test whatever happened."""
    name = f"mallory-test-{os.getpid()}-{uuid.uuid4().hex[:10]}"
    yield name
    unlink_ring(name)


@pytest.fixture(scope="session")
def tc() -> toolchain.Toolchain:
    """The LLVM 14 toolchain with the plugin and runtime built (the wrappers' default)."""
    try:
        return toolchain.ensure_built()
    except Exception as exc:  # no clang/llvm-dev: every build test would fail the same way
        pytest.fail(f"cannot build the Mallory pass: {exc}")
