"""Importing a bench script as a module (bench/ is not a package), for tests of its pure parts."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

BENCH_DIR = Path(__file__).resolve().parents[3] / "bench"


def load_bench(name: str) -> ModuleType:
    """bench/<name>.py, registered in sys.modules first (its dataclasses need it)."""
    spec = importlib.util.spec_from_file_location(name, BENCH_DIR / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
