"""Building a C SUT from its Makefile with Mallory's compiler wrapper: `make` with the
venv's `mallory-cc` (next to this Python) first on PATH, so the // INSTRUMENT_* comments
become code events and the catalogue lands next to the binary. The caller's MALLORY_*
variables are left out: a build must not write into some node's ring."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from mallory.errors import MalloryError


def make_with_mallory_cc(sut_dir: Path, build_dir: Path | None, what: str, *, hint: str = "",
                         timeout: float = 600) -> None:
    """`make -C sut_dir [BUILD=build_dir]`; MalloryError naming `what` (and `hint`, what a
    failed build usually lacks) when make cannot run or fails. A no-op when up to date."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MALLORY_")}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    argv = ["make", "-C", str(sut_dir)] + ([f"BUILD={build_dir}"] if build_dir else [])
    try:
        result = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise MalloryError(f"{what}: cannot build {sut_dir}: {exc}") from None
    if result.returncode != 0:
        raise MalloryError(
            f"{what}: building {sut_dir} failed{f' ({hint})' if hint else ''}:\n"
            f"{result.stdout[-2000:]}{result.stderr[-2000:]}"
        )
