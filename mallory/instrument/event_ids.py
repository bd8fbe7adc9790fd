"""Stable code-event ids, identical to the ones the LLVM pass computes (llvm-pass/pass/MalloryPass.cpp).

    id = FNV-1a 64 over the UTF-8 bytes of "<relpath>:<line>:<KIND>"

relpath: the source file's path relative to the build root ("src/raft.c"), or its absolute
         path when the file is outside the root; both sides resolve symlinks first.
line:    the 1-based line of the code the annotation points at (the first code line after
         the `// INSTRUMENT_*` comment), not the comment's own line.
KIND:    "FUNC" or "BLOCK" (`mallory.timeline.event.Kind` names).

Python-level instrumentation must use `event_id` so its events and the C ones share one
id space; never derive ids from counters.
"""

from __future__ import annotations

import os

from mallory.timeline.event import Kind

FNV64_OFFSET = 0xCBF29CE484222325
FNV64_PRIME = 0x100000001B3
_MASK64 = (1 << 64) - 1


def fnv1a64(data: bytes) -> int:
    h = FNV64_OFFSET
    for byte in data:
        h = ((h ^ byte) * FNV64_PRIME) & _MASK64
    return h


def relative_path(path: str | os.PathLike[str], build_root: str | os.PathLike[str]) -> str:
    """The path ids are built from: relative to `build_root` when under it, else absolute."""
    real = os.path.realpath(path)
    root = os.path.realpath(build_root)
    prefix = root.rstrip("/") + "/"
    return real[len(prefix):] if real.startswith(prefix) else real


def event_id(relpath: str, line: int, kind: Kind | str) -> int:
    """The 64-bit id of the code event at `relpath:line` of `kind` (FUNC or BLOCK)."""
    name = kind.name if isinstance(kind, Kind) else str(kind)
    if name not in ("FUNC", "BLOCK"):
        raise ValueError(f"code events are FUNC or BLOCK, not {name!r}")
    if line < 1:
        raise ValueError(f"line must be >= 1, got {line}")
    return fnv1a64(f"{relpath}:{line}:{name}".encode())
