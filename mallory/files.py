"""Writing a file so that a reader, or a process killed mid-write, never sees half of it."""

from __future__ import annotations

import os
from pathlib import Path


def atomic_write(path: str | os.PathLike[str], data: bytes, *, private: bool = False) -> None:
    """Replace `path` with `data`: written to a hidden temporary name beside it (unique per
    process, so two writers never share one), then renamed over it. A reader sees the old
    file or the new one. `private`: mode 0600 from the file's creation, so a secret is never
    readable by others, not even for a moment. No fsync: what a killed process wrote
    survives in the page cache; only a power cut could lose it."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        tmp.unlink(missing_ok=True)  # a killed writer's, whose pid we now have: its mode is not ours
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600 if private else 0o666)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
