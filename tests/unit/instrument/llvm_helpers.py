"""Helpers of the LLVM pass, runtime and wrapper tests: the sample projects and running
commands in them."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

SAMPLES = Path(__file__).parent / "samples"
VENV_BIN = Path(sys.executable).parent


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
