"""Source locations for the frames of a crash backtrace the fault shim wrote
(`mallory.oracles.logs.crash_backtrace`), with binutils' addr2line: the function, and the
file and line where the object carries debug information (raft-kv is built with -g;
Debian's libraries without their -dbgsym packages give function names at best).

Done after the schedule, on the controller, where the SUT's objects are the same files
(netns and loopback share the host's filesystem). Without addr2line, or for an object that
is not there, frames stay as the shim wrote them.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

#: ELF types: an executable loaded where it was linked (addresses are absolute) or a
#: position-independent object (addresses are offsets from where it was loaded)
_ET_EXEC = 2


def symbolize(frames: list[dict[str, str | None]]) -> list[dict[str, str | None]]:
    """`frames`, innermost first, each with `where` added ("function at file:line", or the
    function alone) when addr2line can tell. The first frame is the signal trampoline and
    the second the instruction that faulted; the others are return addresses, looked up one
    byte back, at their call."""
    addr2line = shutil.which("addr2line")
    out = [dict(frame) for frame in frames]
    if addr2line is None:
        return out
    wanted: dict[str, list[tuple[int, str]]] = {}
    for i, frame in enumerate(out):
        module = frame.get("module") or ""
        if not module.startswith("/") or not Path(module).is_file():
            continue
        at = int(frame["address"] if _is_executable(module) else frame["offset"], 16) - (1 if i >= 2 else 0)
        wanted.setdefault(module, []).append((i, hex(at)))
    for module, lookups in wanted.items():
        try:
            result = subprocess.run([addr2line, "-f", "-C", "-e", module, *(at for _, at in lookups)],
                                    capture_output=True, text=True, timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            continue
        lines = result.stdout.splitlines()
        for (i, _), function, place in zip(lookups, lines[0::2], lines[1::2]):
            if function != "??":
                out[i]["where"] = function if place.startswith("??") else f"{function} at {place}"
    return out


def _is_executable(path: str) -> bool:
    """Whether the ELF object is a non-position-independent executable."""
    try:
        with open(path, "rb") as f:
            header = f.read(18)
    except OSError:
        return False
    return len(header) == 18 and header[:4] == b"\x7fELF" and int.from_bytes(header[16:18], "little") == _ET_EXEC
