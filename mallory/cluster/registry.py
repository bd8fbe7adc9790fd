"""The run registry: what a cluster run created, written down BEFORE it is created.

Every run owns a state directory `<state root>/<run>/` (state root: $MALLORY_STATE_DIR or
/run/mallory). In it:

    run.json     {"name", "index", "data_root", "owner"}: written when the run is registered;
                 the index (0..MAX_RUNS-1) picks the run's address range so runs coexist;
                 the owner ({"pid", "start"}: the registering process, known by its pid and
                 start ticks so a reused pid is not mistaken for it) is null once the run is
                 detached (`mallory cluster up` leaves a run for use by hand).
    journal      one JSON object per line, appended (and flushed to the kernel) before the
                 thing it names exists:
                   {"netns": "mal-r1-gw"}                a network namespace
                   {"link": "mal3c"}                     a link in the ROOT namespace
                   {"shm": "/mallory-r1-n1"}             a POSIX shm segment (MALLORY_SHM)
                   {"dir": "/var/lib/mallory/r1/data"}   a directory removed on cleanup
                   {"proc": pid, "start": ticks, "node": "n1", "name": "sut"}
                                                         a process (recorded right after
                                                         fork; cleanup also kills every
                                                         process found inside the run's
                                                         namespaces, so the gap is covered)
                   {"uses": "/var/lib/mallory/ray-1a2b3c/ray"}
                                                         every process that names this path
                                                         on its command line or holds a file
                                                         under it open, and every process
                                                         descended from one: processes that
                                                         another program starts (a local
                                                         Ray's: campaign/local_ray.py)
    layout.json  the cluster layout (mallory.cluster.netns.ClusterLayout), for readers such as the
                 mediator.
    secrets      files only their owner can read (`RunRecord.write_secret`: the mediator's
                 API token, a local Ray's token), so no secret travels on a command line.

A run is *live* while its owner process runs, *detached* when it has no owner, and *stale*
when its owner is gone (killed, or crashed before its cleanup). `mallory cleanup` removes
stale runs only (`run_status`): a live run belongs to a campaign running beside the user,
and a detached one to someone working by hand (`mallory cluster down RUN` removes it).

`cleanup_run` undoes a journal in a safe order (processes, those found by the paths they
use included; namespaces, root links, shm, directories) and tolerates anything already gone,
so it works after `kill -9` of the controller at any point, and running it twice is
harmless.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import shutil
import signal
import subprocess
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator, Literal

from mallory.errors import MalloryError
from mallory.files import atomic_write

DEFAULT_STATE_ROOT = Path("/run/mallory")
DEFAULT_DATA_ROOT = Path("/var/lib/mallory")
MAX_RUNS = 50
RUN_NAME = re.compile(r"^[a-z0-9][a-z0-9-]{0,19}$")


def state_root() -> Path:
    return Path(os.environ.get("MALLORY_STATE_DIR") or DEFAULT_STATE_ROOT)


def data_root() -> Path:
    return Path(os.environ.get("MALLORY_DATA_ROOT") or DEFAULT_DATA_ROOT)


def check_run_name(name: str) -> str:
    if not RUN_NAME.match(name):
        raise MalloryError(
            f"run name {name!r}: use 1-20 characters from a-z, 0-9 and '-', starting with a letter or digit"
        )
    return name


@contextmanager
def _registry_lock(root: Path) -> Iterator[None]:
    root.mkdir(parents=True, exist_ok=True)
    with open(root / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def proc_start_ticks(pid: int) -> int | None:
    """The process's start time in clock ticks since boot (field 22 of /proc/pid/stat):
    with the pid it names one process even after pids are reused. None if it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    # The command name (field 2) may hold spaces and parentheses: split after the last ')'.
    fields = stat[stat.rindex(")") + 2 :].split()
    return int(fields[19])


def proc_state(pid: int) -> str | None:
    """The one-letter state of a process in /proc/<pid>/stat (R, S, T, t, Z, ...), None if
    it is gone or this /proc cannot see it."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()  # bytes: comm need not be UTF-8
    except OSError:
        return None
    return chr(stat[stat.rindex(b")") + 2])  # comm may hold ") ": the state follows the last


@dataclass(frozen=True)
class ProcessId:
    """One process for as long as it lives: its pid and its start ticks (None: unknown,
    then the pid alone names it). A pid the kernel reused for another process has other
    start ticks, so it is never taken for this one."""

    pid: int
    start: int | None

    @classmethod
    def current(cls) -> "ProcessId":
        return cls(os.getpid(), proc_start_ticks(os.getpid()))

    def alive(self) -> bool:
        """The process runs (a zombie does not: it only waits to be reaped)."""
        state = proc_state(self.pid)
        if state is None or state == "Z":
            return False
        return self.start is None or proc_start_ticks(self.pid) == self.start

    def to_json(self) -> dict[str, int | None]:
        return {"pid": self.pid, "start": self.start}


RunStatus = Literal["live", "detached", "stale"]


@dataclass
class RunRecord:
    """A registered run: its name, index, where its state lives, and its owner process
    (None: detached, or unknown for a run killed while registering)."""

    name: str
    index: int
    state_dir: Path
    data_root: Path
    owner: ProcessId | None = None

    @property
    def journal_path(self) -> Path:
        return self.state_dir / "journal"

    @property
    def layout_path(self) -> Path:
        return self.state_dir / "layout.json"

    @property
    def run_dir(self) -> Path:
        """Where the run's node data and logs live: <data root>/<run>/."""
        return self.data_root / self.name

    def write_secret(self, name: str, text: str) -> Path:
        """Write `text` to a file of the run's state directory that only this user can read
        (mode 0600 from its creation), for a process of the run to read instead of taking
        the secret on its command line. It goes with the state directory when the run is
        cleaned up."""
        path = self.state_dir / name
        atomic_write(path, text.encode(), private=True)
        return path

    def record(self, **entry: object) -> None:
        """Append one journal entry and hand it to the kernel before returning, so a
        `kill -9` right after still leaves it on disk for `mallory cleanup`."""
        line = (json.dumps(entry, sort_keys=True) + "\n").encode()
        fd = os.open(self.journal_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line)
        finally:
            os.close(fd)

    def entries(self) -> list[dict]:
        """The journal's entries; a line torn by a kill mid-write is skipped."""
        try:
            text = self.journal_path.read_text()
        except FileNotFoundError:
            return []
        out = []
        for line in text.splitlines():
            try:
                entry = json.loads(line)
            except ValueError:
                continue
            if isinstance(entry, dict):
                out.append(entry)
        return out


def register_run(
    name: str, root: Path | None = None, data: Path | None = None, index_free: Callable[[int], bool] = lambda i: True
) -> RunRecord:
    """Claim a run name and an index no run holds and `index_free` accepts (the backend
    uses it to skip indices whose resources exist outside any registry, e.g. a run of
    another state root). Indices are handed out round robin, so the addresses of a run
    just removed are not reused at once (stale ARP/conntrack entries, and observers of
    the old run that still retry). MalloryError if the name is taken."""
    check_run_name(name)
    root = root or state_root()
    data = data or data_root()
    with _registry_lock(root):
        state_dir = root / name
        if state_dir.exists():
            raise MalloryError(
                f"run {name!r} already exists ({state_dir}); `mallory cluster down {name}` or `mallory cleanup` first"
            )
        used = {run.index for run in list_runs(root)}
        cursor_path = root / ".next-index"
        try:
            start = int(cursor_path.read_text()) % MAX_RUNS
        except (FileNotFoundError, ValueError):
            start = 0
        order = [(start + k) % MAX_RUNS for k in range(MAX_RUNS)]
        free = [i for i in order if i not in used and index_free(i)]
        if not free:
            raise MalloryError(f"all {MAX_RUNS} run slots in {root} are taken; `mallory cleanup` stale runs")
        cursor_path.write_text(str((free[0] + 1) % MAX_RUNS))
        state_dir.mkdir()
        record = RunRecord(name, free[0], state_dir, data, ProcessId.current())
        _write_meta(record)
        return record


def _write_meta(record: RunRecord) -> None:
    meta = {"name": record.name, "index": record.index, "data_root": str(record.data_root),
            "owner": record.owner.to_json() if record.owner is not None else None}
    atomic_write(record.state_dir / "run.json", json.dumps(meta).encode())


def detach_run(record: RunRecord) -> None:
    """Leave the run to no process: it outlives the one that made it (`mallory cluster up`)
    and `mallory cleanup` without arguments keeps it."""
    record.owner = None
    with _registry_lock(record.state_dir.parent):
        _write_meta(record)


def run_status(record: RunRecord) -> RunStatus:
    """live: its owner process runs; detached: it has no owner by design; stale: its owner
    is gone, or it never finished registering."""
    if record.index < 0:  # no readable run.json (see list_runs)
        return "stale"
    if record.owner is None:
        return "detached"
    return "live" if record.owner.alive() else "stale"


def load_run(name: str, root: Path | None = None) -> RunRecord:
    root = root or state_root()
    state_dir = root / check_run_name(name)
    try:
        meta = json.loads((state_dir / "run.json").read_text())
    except FileNotFoundError:
        raise MalloryError(f"no run named {name!r} in {root}") from None
    except ValueError as exc:
        raise MalloryError(f"{state_dir / 'run.json'}: not valid JSON ({exc})") from None
    owner = meta.get("owner")
    return RunRecord(meta["name"], int(meta["index"]), state_dir, Path(meta["data_root"]),
                     ProcessId(int(owner["pid"]), owner.get("start")) if owner else None)


def list_runs(root: Path | None = None) -> list[RunRecord]:
    """Every run with a state directory, including half-created ones."""
    root = root or state_root()
    if not root.is_dir():
        return []
    runs = []
    for child in sorted(root.iterdir()):
        if not child.is_dir() or not RUN_NAME.match(child.name):
            continue
        try:
            runs.append(load_run(child.name, root))
        except (MalloryError, KeyError, TypeError, ValueError):
            # run.json missing or torn: the run was killed while registering. It still
            # holds its directory; cleanup removes it (index unknown, so nothing to free).
            runs.append(RunRecord(child.name, -1, child, data_root()))
    return runs


def _run(argv: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run(argv, capture_output=True, text=True)


def netns_pids(ns: str) -> list[int]:
    """Pids of every process inside a network namespace (empty if it does not exist)."""
    result = _run(["ip", "netns", "pids", ns])
    if result.returncode != 0:
        return []
    return [int(p) for p in result.stdout.split()]


def existing_netns() -> set[str]:
    result = _run(["ip", "-o", "netns", "list"])
    return {line.split()[0] for line in result.stdout.splitlines() if line.strip()}


def _kill_process(pid: int, start: int | None) -> None:
    """SIGKILL a process and its group, if pid still names the same process."""
    if start is not None and proc_start_ticks(pid) != start:
        return
    for kill in (lambda: os.killpg(pid, signal.SIGKILL), lambda: os.kill(pid, signal.SIGKILL)):
        try:
            kill()
        except (ProcessLookupError, PermissionError):
            pass


def _holds_a_file_under(fd_dir: Path, path: str) -> bool:
    """Whether a process (its /proc/<pid>/fd) has a file open at or under `path`."""
    try:
        for fd in fd_dir.iterdir():
            try:
                target = os.readlink(fd)
            except OSError:
                continue
            if target == path or target.startswith(path + "/"):
                return True
    except OSError:
        pass
    return False


def processes_using(path: str) -> list[ProcessId]:
    """The processes that name `path` on their command line or hold a file under it open
    (a log, a socket), and all their descendants (a child that does neither is still found
    through its parent); never this process nor, through it, its children (a driver keeps
    its own Ray log open). Read from /proc; a process that ends meanwhile is skipped."""
    needle = path.encode()
    parent_of: dict[int, int] = {}
    using: list[int] = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        pid = int(entry.name)
        try:
            cmdline = (entry / "cmdline").read_bytes()
            stat = (entry / "stat").read_bytes()
        except OSError:
            continue
        parent_of[pid] = int(stat[stat.rindex(b")") + 2 :].split()[1])  # field 4, after comm
        if needle in cmdline or _holds_a_file_under(entry / "fd", path):
            using.append(pid)
    children: dict[int, list[int]] = {}
    for pid, parent in parent_of.items():
        children.setdefault(parent, []).append(pid)
    found: set[int] = set()
    todo = list(using)
    while todo:
        pid = todo.pop()
        if pid not in found:
            found.add(pid)
            todo += children.get(pid, [])
    return [ProcessId(pid, proc_start_ticks(pid)) for pid in sorted(found)]


def _wait_gone(pids: list[int], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    for pid in pids:
        while time.monotonic() < deadline:
            state = proc_state(pid)
            if state is None or state == "Z":
                try:
                    os.waitpid(pid, os.WNOHANG)  # reap it if it is our child
                except ChildProcessError:
                    pass
                break
            time.sleep(0.01)


def cleanup_run(record: RunRecord) -> list[str]:
    """Remove everything the run's journal names; return what was removed (for the log)."""
    removed: list[str] = []
    entries = record.entries()
    namespaces = [e["netns"] for e in entries if "netns" in e]
    present = existing_netns()

    killed: list[int] = []
    for entry in entries:
        if "proc" in entry:
            pid = int(entry["proc"])
            if proc_state(pid) is not None:
                _kill_process(pid, entry.get("start"))
                killed.append(pid)
    for ns in namespaces:
        if ns in present:
            for pid in netns_pids(ns):
                _kill_process(pid, None)
                killed.append(pid)
    for entry in entries:
        if "uses" in entry:
            for process in processes_using(entry["uses"]):
                if process.alive():
                    _kill_process(process.pid, process.start)
                    killed.append(process.pid)
    _wait_gone(killed)
    removed += [f"process {pid}" for pid in killed]

    for ns in namespaces:
        if ns in present:
            result = _run(["ip", "netns", "del", ns])
            if result.returncode == 0:
                removed.append(f"netns {ns}")
    for entry in entries:
        if "link" in entry:
            result = _run(["ip", "link", "del", entry["link"]])
            if result.returncode == 0:
                removed.append(f"link {entry['link']}")
        elif "shm" in entry:
            path = Path("/dev/shm") / entry["shm"].lstrip("/")
            try:
                path.unlink()
                removed.append(f"shm {entry['shm']}")
            except FileNotFoundError:
                pass
        elif "dir" in entry:
            path = Path(entry["dir"])
            if path.exists():
                shutil.rmtree(path, ignore_errors=True)
                removed.append(f"dir {path}")

    with _registry_lock(record.state_dir.parent):
        shutil.rmtree(record.state_dir, ignore_errors=True)
    return removed


def claimed(kind: str, root: Path | None = None) -> set[str]:
    """What the registered runs' journals say they created of `kind` ("netns", "link", "shm")."""
    return {entry[kind] for run in list_runs(root) for entry in run.entries() if kind in entry}


def cleanup_all(root: Path | None = None, force: bool = False) -> tuple[dict[str, list[str]], list[tuple[RunRecord, RunStatus]]]:
    """Clean up every stale registered run, or with `force` every run (what `mallory
    cleanup` does without arguments): what was removed, per run; and the runs kept (live
    or detached) with their status. A run whose owner the sweep killed (a worker of a local
    Ray's, owning its cluster) is stale after it, and removed by the same call."""
    root = root or state_root()
    if not root.is_dir():
        return {}, []
    removed: dict[str, list[str]] = {}
    while True:  # again while a sweep removes something: a run whose owner it killed is stale now
        with _registry_lock(root):  # a run being registered is seen whole, never half-made
            statuses = [(run, run_status(run)) for run in list_runs(root) if run.name not in removed]
        kept = [] if force else [(run, status) for run, status in statuses if status != "stale"]
        kept_names = {run.name for run, _ in kept}
        sweep = [run for run, _ in statuses if run.name not in kept_names]
        if not sweep:
            return removed, kept
        removed.update({run.name: cleanup_run(run) for run in sweep})


#: Names the netns backend gives what it creates (mallory/cluster/netns.py): namespaces
#: mal-<run>-gw / mal-<run>-n<k>, and the root-namespace end of a run's control link.
ORPHAN_NETNS = re.compile(r"^mal-[a-z0-9][a-z0-9-]{0,19}-(gw|n[0-9]+)$")
ORPHAN_LINK = re.compile(r"^mal[0-9]+c$")


def cleanup_orphans(root: Path | None = None) -> list[str]:
    """Remove namespaces and control links named like the backend's that no registered
    run's journal claims: what is left when the registry itself was lost (a wiped state
    root). Processes inside those namespaces are killed first. Opt-in (`mallory cleanup
    --orphans`): runs of another state root look like orphans from this one."""
    claimed_netns = claimed("netns", root)
    claimed_links = claimed("link", root)
    removed: list[str] = []
    for ns in sorted(existing_netns()):
        if ORPHAN_NETNS.match(ns) and ns not in claimed_netns:
            pids = netns_pids(ns)
            for pid in pids:
                _kill_process(pid, None)
            _wait_gone(pids)
            if _run(["ip", "netns", "del", ns]).returncode == 0:
                removed.append(f"netns {ns}")
    for link in sorted(p.name for p in Path("/sys/class/net").iterdir()):
        if ORPHAN_LINK.match(link) and link not in claimed_links:
            if _run(["ip", "link", "del", link]).returncode == 0:
                removed.append(f"link {link}")
    return removed
