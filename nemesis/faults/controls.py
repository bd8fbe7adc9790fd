"""Per-node fault controls for the faults enacted inside the SUT process (clock, disk).

Network namespaces share one kernel clock and one page cache, so clock and disk faults are
enacted by the project's preload shim (nemesis/preload/mallory_faults.c, built with make on
first use and cached), which maps a per-node control file the nemesis rewrites at run time:
a clock offset, a disk fault (errno or delay, on writes and/or syncs under a path prefix,
libc calls and kernel AIO requests alike), and counters the shim increments when the SUT
really got a faked time or a disk fault.

(Debian's libfaketime was the first choice; 0.9.10 aborts Redis 7 at start, its jemalloc
reading the clock before libfaketime is initialised, and it re-reads a file on every clock
call when switched at run time. The shim does neither.)

The control files live under `<run dir>/faults/`, journaled in the run registry BEFORE they
are created, so `mallory cleanup` removes them after a kill -9.

The SUT must be started with `env(node)` merged into its environment: `NodeControls` is an
environment overlay (mallory/harness/adapter.py `EnvOverlay`), so
`adapter.add_env_overlay(controls)` does that for an adapter that `TakesEnvOverlay`; a
process started otherwise cannot receive these faults, and `loaded_in(pid)` tells whether a
running process really has the shim.
"""

from __future__ import annotations

import fcntl
import mmap
import os
import struct
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from mallory import paths
from mallory.cluster.registry import RunRecord
from mallory.errors import MalloryError

PRELOAD_DIR = paths.PRELOAD
SHIM_NAME = "libmallory_faults.so"

# The control file (see the layout in mallory_faults.c).
CTL_MAGIC = 0x544C464D
CTL_VERSION = 1
CTL_SIZE = 4096
MODE_OFF, MODE_ERROR, MODE_SLOW = 0, 1, 2
OP_WRITE, OP_SYNC = 1, 2
_HEADER = struct.Struct("<IIIiIIQ")
_PREFIX_OFFSET = _HEADER.size
_PREFIX_SIZE = 256
_MODE_OFFSET = 8
_CLOCK = struct.Struct("<qQ")  # clock_offset_ns, clock_faked
_CLOCK_OFFSET = 288
_TRACK = struct.Struct("<IIII")  # track, lock, used, untracked
_TRACK_OFFSET = 304
_ENTRY = struct.Struct("<QQq")  # dev, ino, lowest unsynced offset
_TABLE_OFFSET = 320
_TRACK_PREFIX_OFFSET = 1856
_AIO_INJECTED_OFFSET = 2112


def fault_shim(build_dir: Path | None = None) -> Path:
    """The fault shim, built with make on first use (cached; rebuilt if the source
    changed). Serialised by a lock so parallel campaigns do not race the build."""
    build = build_dir or PRELOAD_DIR / "build"
    build.mkdir(parents=True, exist_ok=True)
    with open(build / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            result = subprocess.run(
                ["make", "-s", "-C", str(PRELOAD_DIR), f"BUILD={build}"], capture_output=True, text=True
            )
        except FileNotFoundError:
            raise MalloryError("clock and disk faults need make and gcc to build nemesis/preload (apt-get install make gcc)") from None
    if result.returncode != 0:
        raise MalloryError(f"building the fault shim in {PRELOAD_DIR} failed: {result.stderr.strip()}")
    return build / SHIM_NAME


def loaded_in(pid: int) -> set[str]:
    """Base names of the shared objects mapped into a process (empty once it is gone)."""
    try:
        maps = Path(f"/proc/{pid}/maps").read_text()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return set()
    return {os.path.basename(line.split()[-1]) for line in maps.splitlines() if ".so" in line}


@dataclass(frozen=True)
class DiskState:
    """A node's disk fault as its control file holds it; `injected` counts the disk calls
    the shim failed or delayed, `injected_aio` the part of them that were kernel AIO
    requests (io_submit)."""

    mode: int
    err: int
    ops: int
    delay_us: int
    injected: int
    prefix: str
    injected_aio: int


class NodeControls:
    """The fault control files of every node of one run, and the environment overlay that
    lets a node's SUT receive them (`merged_env`). `clock`/`disk` say which families the
    campaign enables (the shim carries both)."""

    def __init__(self, record: RunRecord, nodes: list[str], *, clock: bool = True, disk: bool = True) -> None:
        self.record = record
        self.nodes = list(nodes)
        self.dir = record.run_dir / "faults"
        self.clock = clock
        self.disk = disk
        self.shim = fault_shim()
        self._prepared = False

    def control_file(self, node: str) -> Path:
        return self.dir / f"{node}.control"

    def prepare(self) -> "NodeControls":
        """Create every node's control file (idempotent), journaled first."""
        if self._prepared:
            return self
        self.record.record(dir=str(self.dir))
        self.dir.mkdir(parents=True, exist_ok=True)
        for node in self.nodes:
            path = self.control_file(node)
            if not path.exists():
                buf = bytearray(CTL_SIZE)
                _HEADER.pack_into(buf, 0, CTL_MAGIC, CTL_VERSION, MODE_OFF, 0, 0, 0, 0)
                tmp = path.with_name(path.name + ".tmp")
                tmp.write_bytes(bytes(buf))
                tmp.rename(path)
        self._prepared = True
        return self

    def env(self, node: str) -> dict[str, str]:
        """What the node's SUT environment needs to receive clock and disk faults. An
        ASan-built SUT refuses a preload ahead of its runtime unless told not to check,
        so ASAN_OPTIONS (the controller's, if any) gets verify_asan_link_order=0."""
        self.prepare()
        return {
            "LD_PRELOAD": str(self.shim),
            "MALLORY_FAULT_CONTROL": str(self.control_file(node)),
            "ASAN_OPTIONS": with_asan_link_order_off(os.environ.get("ASAN_OPTIONS", "")),
        }

    def merged_env(self, node: str, env: Mapping[str, str]) -> dict[str, str]:
        """`env` (the SUT's own) with `env(node)` on top: the SUT's own LD_PRELOAD is kept,
        after the shim, and its own ASAN_OPTIONS get verify_asan_link_order=0."""
        extra = self.env(node)
        if env.get("LD_PRELOAD"):
            extra["LD_PRELOAD"] = f"{extra['LD_PRELOAD']} {env['LD_PRELOAD']}"
        if env.get("ASAN_OPTIONS"):
            extra["ASAN_OPTIONS"] = with_asan_link_order_off(env["ASAN_OPTIONS"])
        return {**env, **extra}

    def libraries(self) -> dict[str, str]:
        """Which library each enabled family needs loaded in the SUT: family -> base name."""
        return {family: self.shim.name for family, on in (("clock", self.clock), ("disk", self.disk)) if on}

    def _with(self, node: str, change: Any) -> Any:
        with open(self.control_file(node), "r+b") as f, mmap.mmap(f.fileno(), CTL_SIZE) as mem:
            return change(mem)

    # -- clock --------------------------------------------------------------------------

    def set_clock(self, node: str, offset_s: float) -> None:
        """Set the node's wall-clock offset; the SUT's next clock read sees it."""
        self._with(node, lambda mem: struct.pack_into("<q", mem, _CLOCK_OFFSET, round(offset_s * 1e9)))

    def clock_offset(self, node: str) -> float:
        return self._with(node, lambda mem: _CLOCK.unpack_from(mem, _CLOCK_OFFSET)[0] / 1e9)

    def clock_faked(self, node: str) -> int:
        """How many clock reads of the node's processes returned an offset time."""
        return self._with(node, lambda mem: _CLOCK.unpack_from(mem, _CLOCK_OFFSET)[1])

    # -- disk ----------------------------------------------------------------------------

    def set_disk(self, node: str, mode: int, *, err: int = 0, ops: int = OP_WRITE | OP_SYNC, delay_us: int = 0, prefix: str = "") -> None:
        """Switch the node's disk fault: mode off first, fields, then the mode last."""
        raw = prefix.encode()
        if len(raw) >= _PREFIX_SIZE:
            raise MalloryError(f"disk fault prefix {prefix!r} longer than {_PREFIX_SIZE - 1} bytes")

        def change(mem: mmap.mmap) -> None:
            struct.pack_into("<I", mem, _MODE_OFFSET, MODE_OFF)
            struct.pack_into("<iII", mem, 12, err, ops, delay_us)
            mem[_PREFIX_OFFSET : _PREFIX_OFFSET + _PREFIX_SIZE] = raw.ljust(_PREFIX_SIZE, b"\0")
            struct.pack_into("<I", mem, _MODE_OFFSET, mode)

        self._with(node, change)

    def disk_state(self, node: str) -> DiskState:
        def read(mem: mmap.mmap) -> DiskState:
            _, _, mode, err, ops, delay_us, injected = _HEADER.unpack_from(mem, 0)
            prefix = bytes(mem[_PREFIX_OFFSET : _PREFIX_OFFSET + _PREFIX_SIZE]).split(b"\0")[0].decode()
            (injected_aio,) = struct.unpack_from("<Q", mem, _AIO_INJECTED_OFFSET)
            return DiskState(mode, err, ops, delay_us, injected, prefix, injected_aio)

        return self._with(node, read)

    # -- unsynced writes ------------------------------------------------------------------

    def set_tracking(self, node: str, prefix: str | None) -> None:
        """Record unsynced writes to regular files under `prefix` (None: stop), from now on."""
        raw = (prefix or "").encode()
        if len(raw) >= _PREFIX_SIZE:
            raise MalloryError(f"tracking prefix {prefix!r} longer than {_PREFIX_SIZE - 1} bytes")

        def change(mem: mmap.mmap) -> None:
            struct.pack_into("<I", mem, _TRACK_OFFSET, 0)
            mem[_TRACK_PREFIX_OFFSET : _TRACK_PREFIX_OFFSET + _PREFIX_SIZE] = raw.ljust(_PREFIX_SIZE, b"\0")
            _TRACK.pack_into(mem, _TRACK_OFFSET, 1 if prefix is not None else 0, 0, 0, 0)

        self._with(node, change)

    def unsynced(self, node: str) -> tuple[list[tuple[int, int, int]], int]:
        """(dev, ino, lowest unsynced offset) of every tracked file, and how many files the
        full table could not record."""

        def read(mem: mmap.mmap) -> tuple[list[tuple[int, int, int]], int]:
            _, _, used, untracked = _TRACK.unpack_from(mem, _TRACK_OFFSET)
            entries = [_ENTRY.unpack_from(mem, _TABLE_OFFSET + i * _ENTRY.size) for i in range(min(used, 64))]
            return entries, untracked

        return self._with(node, read)

    def forget_unsynced(self, node: str) -> None:
        """Empty the table and free its lock (after the node's processes were killed)."""

        def change(mem: mmap.mmap) -> None:
            track = _TRACK.unpack_from(mem, _TRACK_OFFSET)[0]
            _TRACK.pack_into(mem, _TRACK_OFFSET, track, 0, 0, 0)

        self._with(node, change)

    def clear(self, node: str) -> None:
        self.set_clock(node, 0.0)
        self.set_disk(node, MODE_OFF)

    def clear_all(self) -> None:
        for node in self.nodes:
            self.clear(node)


def with_asan_link_order_off(options: str) -> str:
    kept = [o for o in options.split(":") if o and not o.startswith("verify_asan_link_order=")]
    return ":".join([*kept, "verify_asan_link_order=0"])
