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


def cut_torn_tail(path: str | os.PathLike[str]) -> int:
    """Make an append-only file of lines whole again: a writer killed mid-line leaves it
    without its final newline, and the next append would merge that fragment with a new
    line into one unreadable line in the middle of the file. Cut the fragment off (nothing
    when the file ends with a newline or does not exist); the bytes removed."""
    try:
        with open(path, "rb+") as f:
            size = f.seek(0, os.SEEK_END)
            end = size
            while end > 0:  # back to the last newline, a block at a time
                start = max(0, end - 65536)
                f.seek(start)
                block = f.read(end - start)
                newline = block.rfind(b"\n")
                if newline >= 0:
                    end = start + newline + 1
                    break
                end = start
            f.truncate(end)
            return size - end
    except FileNotFoundError:
        return 0
