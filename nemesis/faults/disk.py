"""Disk faults per node, in the SUT's data directory: write errors (EIO, ENOSPC), fsync
errors (EIO) and slow I/O (every write and fsync delayed), through the project's preload
shim (nemesis/preload/mallory_faults.c) and the node's control file.

`disk:lose-unsynced` is a crash that loses the page cache: the shim records, per file in
the data directory, the lowest offset written since its last fsync; the nemesis kills the
node's SUT and cuts every such file back to that offset (healed by starting the node). The
files cut and the bytes lost are the evidence; it is verified by their sizes after the cut.

Covers SUTs that write their data with libc's write/pwrite/writev/fsync/fdatasync, through
stdio streams (the error surfaces at fflush/fclose) or with kernel AIO requests made
through libc's syscall() (libraft's log segments: the failed request completes with the
fault's errno), and were started with the controls' env (Redis with AOF/RDB persistence,
libraft servers, the example SUT); not statically linked ones (Go: etcd), which are
refused. A SUT that never writes to its data directory (Redis as a cache) receives
nothing: the heal evidence counts what the SUT really hit (`injected_by_sut`, and
`injected_by_sut_aio` of those, AIO requests). The effect is verified by a probe write in
the node's data directory under the same env.
"""

from __future__ import annotations

import errno
import os
import random
import time
from pathlib import Path

from mallory.cluster.registry import proc_state
from mallory.errors import MalloryError
from mallory.harness.adapter import Killable
from nemesis.faults.base import FaultContext, FaultReport, check_spec
from nemesis.faults.controls import (
    MODE_ERROR,
    MODE_OFF,
    MODE_SLOW,
    OP_SYNC,
    OP_WRITE,
    NodeControls,
)
from nemesis.faults.preloaded import missing_library, run_with_env
from nemesis.faults.process import sut_pid

DISK_SPECS = ("eio", "enospc", "fsync", "slow", "lose-unsynced")
PROBE_NAME = ".mallory-disk-probe"


class DiskFaults:
    family = "disk"
    specs = DISK_SPECS

    def __init__(self, slow_ms: int = 50) -> None:
        self.slow_ms = slow_ms

    def unsupported(self, ctx: FaultContext, spec: str) -> str | None:
        check_spec(self, spec)
        if spec == "lose-unsynced" and not isinstance(ctx.adapter, Killable):
            return f"{ctx.adapter.name} cannot kill a node"
        return missing_library(ctx, "disk")

    def arm(self, ctx: FaultContext, specs: list[str]) -> None:
        """Start recording unsynced writes when the campaign may lose them (Armed)."""
        if "lose-unsynced" in specs:
            for node in ctx.nodes:
                ctx.controls.set_tracking(node, data_prefix(ctx, node))

    def _settings(self, spec: str) -> dict:
        if spec == "eio":
            return {"mode": MODE_ERROR, "err": errno.EIO, "ops": OP_WRITE | OP_SYNC}
        if spec == "enospc":
            return {"mode": MODE_ERROR, "err": errno.ENOSPC, "ops": OP_WRITE | OP_SYNC}
        if spec == "fsync":
            return {"mode": MODE_ERROR, "err": errno.EIO, "ops": OP_SYNC}
        return {"mode": MODE_SLOW, "err": 0, "ops": OP_WRITE | OP_SYNC, "delay_us": self.slow_ms * 1000}

    def probe(self, ctx: FaultContext, node: str) -> dict:
        """A 1-byte write + fsync in the node's data directory under the SUT's env: its exit
        status, error text and duration."""
        path = ctx.backend.data_dir(node) / PROBE_NAME
        t0 = time.monotonic()
        result = run_with_env(ctx, node, ["dd", "if=/dev/zero", f"of={path}", "bs=1", "count=1", "conv=fsync", "status=none"])
        elapsed = time.monotonic() - t0
        path.unlink(missing_ok=True)
        return {"exit": result.returncode, "stderr": result.stderr.strip()[-200:], "seconds": round(elapsed, 4)}

    def enact(self, ctx: FaultContext, spec: str, rng: random.Random) -> FaultReport:
        check_spec(self, spec)
        reason = missing_library(ctx, "disk")
        if reason is not None:
            raise MalloryError(f"disk:{spec} refused: {reason}")
        if spec == "lose-unsynced":
            return self._lose_unsynced(ctx, rng)
        node = rng.choice(ctx.nodes)
        settings = self._settings(spec)
        prefix = data_prefix(ctx, node)
        ctx.controls.set_disk(node, prefix=prefix, **settings)
        probe = self.probe(ctx, node)
        state = ctx.controls.disk_state(node)
        if spec == "slow":
            verified = probe["exit"] == 0 and probe["seconds"] >= 2 * self.slow_ms / 1000  # a write and an fsync
        else:
            verified = probe["exit"] != 0 and os.strerror(settings["err"]) in probe["stderr"]
        return FaultReport(
            action=f"disk:{spec}",
            family=self.family,
            spec=spec,
            nodes=[node],
            params={"errno": errno.errorcode.get(settings["err"]) if settings["err"] else None,
                    "ops": ["write"] * bool(settings["ops"] & OP_WRITE) + ["fsync"] * bool(settings["ops"] & OP_SYNC),
                    "delay_ms": self.slow_ms if spec == "slow" else 0, "prefix": prefix},
            verified=verified,
            evidence={"probe": probe, "injected_after_probe": state.injected, "injected_aio_after_probe": state.injected_aio},
        )

    def _lose_unsynced(self, ctx: FaultContext, rng: random.Random) -> FaultReport:
        report = FaultReport(action="disk:lose-unsynced", family=self.family, spec="lose-unsynced")
        running = [n for n in ctx.nodes if ctx.adapter.is_running(n)]
        if not running:
            report.evidence = {"reason": "no running node"}
            return report
        node = rng.choice(running)
        pid = sut_pid(ctx, node)
        ctx.adapter.kill(node)
        cut = lose_unsynced_writes(ctx.controls, node, ctx.backend.data_dir(node))
        report.nodes = [node]
        report.params = {"pid": pid}
        report.evidence = {"files": cut, "proc_state": proc_state(pid) if pid else None}
        cut_ok = all(f.get("size_after") == f["kept"] for path, f in cut.items() if path != "(untracked)")
        report.verified = (pid is None or proc_state(pid) in (None, "Z")) and cut_ok
        return report

    def heal(self, ctx: FaultContext, report: FaultReport) -> None:
        if report.spec == "lose-unsynced":
            for node in report.nodes:  # the crash is over: the node comes back (not awaited)
                if not ctx.adapter.is_running(node):
                    ctx.adapter.start(node)
            report.healed = True
            return
        for node in report.nodes:
            state = ctx.controls.disk_state(node)
            ctx.controls.set_disk(node, MODE_OFF)
            report.heal_evidence[node] = {
                "injected_by_sut": state.injected - report.evidence["injected_after_probe"],
                "injected_by_sut_aio": state.injected_aio - report.evidence.get("injected_aio_after_probe", 0),
            }
        report.healed = True


def data_prefix(ctx: FaultContext, node: str) -> str:
    return os.path.realpath(ctx.backend.data_dir(node)) + "/"


def lose_unsynced_writes(controls: NodeControls, node: str, root: Path) -> dict[str, dict]:
    """Cut every file under `root` with unsynced writes back to its lowest unsynced offset,
    then empty the node's table. Call it once the node's writers are dead. Per file: its
    size before, the bytes kept, its size after (or the error that kept it whole)."""
    entries, untracked = controls.unsynced(node)
    wanted = {(dev, ino): lowest for dev, ino, lowest in entries}
    out: dict[str, dict] = {}
    for directory, _, files in os.walk(root):
        for name in files:
            path = os.path.join(directory, name)
            try:
                st = os.stat(path)
            except FileNotFoundError:
                continue
            lowest = wanted.pop((st.st_dev, st.st_ino), None)
            if lowest is None or lowest >= st.st_size:
                continue
            entry: dict = {"size_before": st.st_size, "kept": lowest}
            try:
                os.truncate(path, lowest)
                entry["size_after"] = os.stat(path).st_size
            except OSError as exc:
                entry["error"] = str(exc)
            out[os.path.relpath(path, root)] = entry
    controls.forget_unsynced(node)
    if untracked:
        out["(untracked)"] = {"files": untracked, "kept": None, "error": "the table was full"}
    return out
