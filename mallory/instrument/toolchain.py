"""Finds the LLVM to instrument with and builds the pass plugin and runtime for it, once.

`make -C llvm-pass LLVM_CONFIG=...` writes llvm-pass/build/llvm-<major>/{MalloryPass.so,
libmallory_rt.a,libmallory_rt.so}; `ensure_built` runs it under a file lock when those are missing or older
than their sources, so the first `mallory-cc` of a parallel `make -j` builds it and the
others wait.

Which LLVM: $MALLORY_LLVM_CONFIG, else llvm-config-14 (Debian bookworm's default), else llvm-config.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from mallory import paths
from mallory.errors import MalloryError

_SOURCES = ("Makefile", "pass/MalloryPass.cpp", "runtime/mallory_rt.c", "runtime/mallory_ring.h")


@dataclass(frozen=True)
class Toolchain:
    llvm_config: str
    major: int
    bindir: Path
    build_dir: Path

    @property
    def plugin(self) -> Path:
        return self.build_dir / "MalloryPass.so"

    @property
    def runtime(self) -> Path:
        return self.build_dir / "libmallory_rt.a"

    @property
    def runtime_shared(self) -> Path:
        """The runtime as a shared library (for ctypes writers: Python-level instrumentation)."""
        return self.build_dir / "libmallory_rt.so"

    @property
    def cc(self) -> Path:
        return self.bindir / "clang"

    @property
    def cxx(self) -> Path:
        return self.bindir / "clang++"


def pass_dir() -> Path:
    """llvm-pass/ of this checkout (or $MALLORY_LLVM_PASS_DIR)."""
    env = os.environ.get("MALLORY_LLVM_PASS_DIR")
    path = Path(env) if env else paths.LLVM_PASS
    if not (path / "Makefile").is_file():
        raise MalloryError(f"llvm-pass sources not found at {path} (set MALLORY_LLVM_PASS_DIR)")
    return path


def find_llvm_config(explicit: str | None = None) -> str:
    chosen = explicit or os.environ.get("MALLORY_LLVM_CONFIG")
    if chosen:
        found = shutil.which(chosen)
        if not found:
            raise MalloryError(f"llvm-config {chosen!r} not found")
        return found
    for candidate in ("llvm-config-14", "llvm-config"):
        found = shutil.which(candidate)
        if found:
            return found
    raise MalloryError("no llvm-config found: install Debian's clang and llvm-dev (see .ci/apt/llvm.txt)")


def _query(llvm_config: str, flag: str) -> str:
    return subprocess.run([llvm_config, flag], check=True, capture_output=True, text=True).stdout.strip()


def toolchain(llvm_config: str | None = None) -> Toolchain:
    config = find_llvm_config(llvm_config)
    major = int(_query(config, "--version").split(".")[0])
    return Toolchain(config, major, Path(_query(config, "--bindir")), pass_dir() / "build" / f"llvm-{major}")


def _stale(tc: Toolchain) -> bool:
    outputs = [tc.plugin, tc.runtime, tc.runtime_shared]
    if not all(p.exists() for p in outputs):
        return True
    newest_source = max((pass_dir() / s).stat().st_mtime for s in _SOURCES)
    return min(p.stat().st_mtime for p in outputs) < newest_source


def ensure_built(llvm_config: str | None = None) -> Toolchain:
    """The toolchain with its plugin and runtime built (building them if needed)."""
    tc = toolchain(llvm_config)
    if not _stale(tc):
        return tc
    tc.build_dir.mkdir(parents=True, exist_ok=True)
    with open(tc.build_dir.parent / ".build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if _stale(tc):
            result = subprocess.run(
                ["make", "-s", "-C", str(pass_dir()), f"LLVM_CONFIG={tc.llvm_config}", f"BUILD={tc.build_dir}"],
                stdout=sys.stderr, stderr=sys.stderr,
            )
            if result.returncode != 0:
                raise MalloryError(f"building the Mallory pass with {tc.llvm_config} failed (make -C {pass_dir()})")
    return tc
