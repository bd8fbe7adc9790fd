"""Per-node fault controls for the preload-based faults (clock and disk).

Namespaces share one kernel clock and one page cache, so clock and disk faults are enacted
inside the SUT process, by libraries the node's SUT is started with (LD_PRELOAD):

- clock: Debian's libfaketime, reading a per-node timestamp file ("+12.5" = 12.5 s ahead)
  on every call (FAKETIME_NO_CACHE=1), so a rewrite takes effect at the next clock read.
  Only the wall clock is faked (FAKETIME_DONT_FAKE_MONOTONIC=1), like a real clock jump.
  libfaketime otherwise leaves a shm segment and a semaphore per process in /dev/shm; the
  node's processes share one pair created here (FAKETIME_SHARED), journaled for cleanup.
- disk: the project's shim (nemesis/preload/mallory_disk.c, built on first use), mapping a
  per-node control file the nemesis rewrites.

Everything lives under `<run dir>/faults/` and in /dev/shm, journaled in the run registry
BEFORE it is created, so `mallory cleanup` removes it after a kill -9.

The SUT must be started with `env(node)` merged into its environment (`attach(adapter)`
does that for a `ProcessAdapter`); a process started otherwise cannot receive these faults,
and `loaded_in(pid)` tells which libraries a running process really has.
"""

from __future__ import annotations

import ctypes
import fcntl
import glob
import mmap
import os
import struct
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mallory.errors import MalloryError
from nemesis.runstate import RunRecord

PRELOAD_DIR = Path(__file__).resolve().parents[1] / "preload"
DISK_SHIM_NAME = "libmallory_disk.so"
FAKETIME_NAME = "libfaketime.so.1"

# The disk control file (see the layout in mallory_disk.c).
CTL_MAGIC = 0x4B53444D
CTL_VERSION = 1
CTL_SIZE = 4096
MODE_OFF, MODE_ERROR, MODE_SLOW = 0, 1, 2
OP_WRITE, OP_SYNC = 1, 2
_HEADER = struct.Struct("<IIIiIIQ")
_PREFIX_OFFSET = _HEADER.size
_PREFIX_SIZE = 256
_MODE_OFFSET = 8
_INJECTED_OFFSET = 24


def find_libfaketime() -> Path:
    """Debian's libfaketime.so.1 (multiarch path), MalloryError if it is not installed."""
    for pattern in ("/usr/lib/*/faketime/" + FAKETIME_NAME, "/usr/lib/faketime/" + FAKETIME_NAME):
        found = sorted(glob.glob(pattern))
        if found:
            return Path(found[0])
    raise MalloryError("clock faults need libfaketime (apt-get install libfaketime)")


def disk_shim(build_dir: Path | None = None) -> Path:
    """The disk-fault shim, built with make on first use (cached; rebuilt if the source
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
            raise MalloryError("disk faults need make and gcc to build nemesis/preload (apt-get install make gcc)") from None
    if result.returncode != 0:
        raise MalloryError(f"building the disk-fault shim in {PRELOAD_DIR} failed: {result.stderr.strip()}")
    return build / DISK_SHIM_NAME


def loaded_in(pid: int) -> set[str]:
    """Base names of the shared objects mapped into a process ("" set if it is gone)."""
    try:
        maps = Path(f"/proc/{pid}/maps").read_text()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return set()
    return {os.path.basename(line.split()[-1]) for line in maps.splitlines() if ".so" in line}


def _sem_create(name: str) -> None:
    """Create a POSIX named semaphore (value 1) the way libfaketime opens it."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.sem_open.restype = ctypes.c_void_p
    libc.sem_open.argtypes = [ctypes.c_char_p, ctypes.c_int, ctypes.c_uint, ctypes.c_uint]
    sem = libc.sem_open(name.encode(), os.O_CREAT, 0o600, 1)
    if sem is None or sem == ctypes.c_void_p(-1).value:
        raise MalloryError(f"sem_open({name}) failed: {os.strerror(ctypes.get_errno())}")
    libc.sem_close(ctypes.c_void_p(sem))


@dataclass(frozen=True)
class DiskState:
    mode: int
    err: int
    ops: int
    delay_us: int
    injected: int
    prefix: str


class NodeControls:
    """The clock and disk control files of every node of one run."""

    def __init__(self, record: RunRecord, nodes: list[str], *, clock: bool = True, disk: bool = True) -> None:
        self.record = record
        self.nodes = list(nodes)
        self.dir = record.run_dir / "faults"
        self.clock = clock
        self.disk = disk
        self._faketime = find_libfaketime() if clock else None
        self._shim = disk_shim() if disk else None
        self._prepared = False

    # -- files ------------------------------------------------------------------------

    def clock_file(self, node: str) -> Path:
        return self.dir / f"{node}.faketime"

    def disk_file(self, node: str) -> Path:
        return self.dir / f"{node}.disk"

    def _shm_names(self, node: str) -> tuple[str, str]:
        """libfaketime's shared (semaphore, shm) names for the node's processes."""
        base = f"/mallory-{self.record.name}-{node}-ft"
        return base, base + "-shm"

    def prepare(self) -> "NodeControls":
        """Create every node's control files (idempotent), journaled first."""
        if self._prepared:
            return self
        self.record.record(dir=str(self.dir))
        self.dir.mkdir(parents=True, exist_ok=True)
        for node in self.nodes:
            if self.clock:
                sem, shm = self._shm_names(node)
                self.record.record(shm="/sem." + sem.lstrip("/"))
                self.record.record(shm=shm)
                _sem_create(sem)
                fd = os.open(f"/dev/shm/{shm.lstrip('/')}", os.O_CREAT | os.O_RDWR, 0o600)
                try:
                    os.ftruncate(fd, 4096)
                finally:
                    os.close(fd)
                self.set_clock(node, 0.0)
            if self.disk:
                path = self.disk_file(node)
                if not path.exists():
                    buf = bytearray(CTL_SIZE)
                    _HEADER.pack_into(buf, 0, CTL_MAGIC, CTL_VERSION, MODE_OFF, 0, 0, 0, 0)
                    tmp = path.with_suffix(".tmp")
                    tmp.write_bytes(bytes(buf))
                    tmp.rename(path)
        self._prepared = True
        return self

    def env(self, node: str) -> dict[str, str]:
        """What the node's SUT environment needs to receive clock and disk faults. Prepend
        LD_PRELOAD to an existing one yourself if the SUT has its own (ASan-built SUTs also
        need ASAN_OPTIONS=verify_asan_link_order=0)."""
        self.prepare()
        env: dict[str, str] = {}
        preload = []
        if self._faketime is not None:
            sem, shm = self._shm_names(node)
            preload.append(str(self._faketime))
            env.update(
                FAKETIME_TIMESTAMP_FILE=str(self.clock_file(node)),
                FAKETIME_NO_CACHE="1",
                FAKETIME_DONT_FAKE_MONOTONIC="1",
                FAKETIME_SHARED=f"{sem} {shm}",
            )
        if self._shim is not None:
            preload.append(str(self._shim))
            env["MALLORY_DISK_CONTROL"] = str(self.disk_file(node))
        if preload:
            env["LD_PRELOAD"] = " ".join(preload)
        return env

    def libraries(self) -> dict[str, str]:
        """Which library each family needs loaded in the SUT: family -> base name."""
        out = {}
        if self._faketime is not None:
            out["clock"] = self._faketime.name
        if self._shim is not None:
            out["disk"] = self._shim.name
        return out

    # -- clock --------------------------------------------------------------------------

    def set_clock(self, node: str, offset_s: float) -> None:
        """Set the node's wall-clock offset (atomic rename: a reader sees old or new)."""
        path = self.clock_file(node)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(f"{offset_s:+.3f}\n")
        tmp.rename(path)

    def clock_offset(self, node: str) -> float:
        try:
            return float(self.clock_file(node).read_text().split()[0])
        except (FileNotFoundError, IndexError, ValueError):
            return 0.0

    # -- disk ----------------------------------------------------------------------------

    def _with_disk(self, node: str, change: Any) -> Any:
        with open(self.disk_file(node), "r+b") as f, mmap.mmap(f.fileno(), CTL_SIZE) as mem:
            return change(mem)

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

        self._with_disk(node, change)

    def disk_state(self, node: str) -> DiskState:
        def read(mem: mmap.mmap) -> DiskState:
            _, _, mode, err, ops, delay_us, injected = _HEADER.unpack_from(mem, 0)
            prefix = bytes(mem[_PREFIX_OFFSET : _PREFIX_OFFSET + _PREFIX_SIZE]).split(b"\0")[0].decode()
            return DiskState(mode, err, ops, delay_us, injected, prefix)

        return self._with_disk(node, read)

    def clear(self, node: str) -> None:
        if self.clock:
            self.set_clock(node, 0.0)
        if self.disk:
            self.set_disk(node, MODE_OFF)

    def clear_all(self) -> None:
        for node in self.nodes:
            self.clear(node)


def attach(adapter: Any, controls: NodeControls) -> None:
    """Make a ProcessAdapter start its SUT with the controls' env on top of its own (an
    existing LD_PRELOAD of the SUT is kept, after ours)."""
    own = adapter.env

    def env(node: str) -> dict[str, str]:
        base = dict(own(node))
        extra = controls.env(node)
        if base.get("LD_PRELOAD") and "LD_PRELOAD" in extra:
            extra["LD_PRELOAD"] = f"{extra['LD_PRELOAD']} {base['LD_PRELOAD']}"
        return {**base, **extra}

    adapter.env = env
