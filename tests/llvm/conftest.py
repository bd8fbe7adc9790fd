"""Shared fixtures for the LLVM pass, runtime, wrappers and ring reader tests."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from mallory.observer import toolchain
from mallory.observer.ring import unlink_ring

SAMPLES = Path(__file__).parent / "samples"
VENV_BIN = Path(sys.executable).parent


@pytest.fixture(scope="session")
def tc() -> toolchain.Toolchain:
    """The LLVM 14 toolchain with the plugin and runtime built (the wrappers' default)."""
    try:
        return toolchain.ensure_built()
    except Exception as exc:  # no clang/llvm-dev: every build test would fail the same way
        pytest.fail(f"cannot build the Mallory pass: {exc}")


@pytest.fixture
def build_env(tc) -> dict[str, str]:
    """An environment with mallory-cc / mallory-c++ on PATH and no MALLORY_* settings."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MALLORY_")}
    env["PATH"] = f"{VENV_BIN}{os.pathsep}{env.get('PATH', '')}"
    return env


@pytest.fixture
def shm_name():
    """A unique ring name, unlinked after the test whatever happened."""
    name = f"mallory-test-{os.getpid()}-{uuid.uuid4().hex[:10]}"
    yield name
    unlink_ring(name)


def copy_sample(name: str, dest: Path) -> Path:
    target = dest / name
    shutil.copytree(SAMPLES / name, target)
    return target


def run(cmd: list[str], cwd: Path, env: dict[str, str], check: bool = True) -> subprocess.CompletedProcess:
    result = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
    if check and result.returncode != 0:
        raise AssertionError(f"{cmd} failed ({result.returncode}):\n{result.stdout}\n{result.stderr}")
    return result


def code_line_after(path: Path, marker: str) -> int:
    """1-based line of the code right below the (unique) comment `marker`."""
    lines = path.read_text().splitlines()
    hits = [i for i, line in enumerate(lines) if line.strip() == marker]
    assert len(hits) == 1, f"{marker!r} found {len(hits)} times in {path}"
    return hits[0] + 2
