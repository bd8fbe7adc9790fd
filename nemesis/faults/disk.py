"""Disk faults per node, in the SUT's data directory: write errors (EIO, ENOSPC), fsync
errors (EIO) and slow I/O (every write and fsync delayed), through the project's preload
shim (nemesis/preload/mallory_faults.c) and the node's control file.

Covers SUTs that write their data with libc's write/pwrite/writev/fsync/fdatasync or through
stdio streams (the error surfaces at fflush/fclose) and were started with the controls' env
(Redis with AOF/RDB persistence, libraft servers, the example SUT); not statically linked
ones (Go: etcd), which are refused. A SUT that never writes to its data
directory (Redis as a cache) receives nothing: the heal evidence counts what the SUT
really hit (`injected_by_sut`). The effect is verified by a probe write in the node's data
directory under the same env.
"""

from __future__ import annotations

import errno
import os
import random
import time

from mallory.errors import MalloryError
from nemesis.faults.base import FaultContext, FaultReport, check_spec
from nemesis.faults.controls import MODE_ERROR, MODE_OFF, MODE_SLOW, OP_SYNC, OP_WRITE
from nemesis.faults.preloaded import missing_library, run_with_env

DISK_SPECS = ("eio", "enospc", "fsync", "slow")
PROBE_NAME = ".mallory-disk-probe"


class DiskFaults:
    family = "disk"
    specs = DISK_SPECS

    def __init__(self, slow_ms: int = 50) -> None:
        self.slow_ms = slow_ms

    def unsupported(self, ctx: FaultContext, spec: str) -> str | None:
        check_spec(self, spec)
        return missing_library(ctx, "disk")

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
        node = rng.choice(ctx.nodes)
        settings = self._settings(spec)
        prefix = os.path.realpath(ctx.backend.data_dir(node)) + "/"
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
            evidence={"probe": probe, "injected_after_probe": state.injected},
        )

    def heal(self, ctx: FaultContext, report: FaultReport) -> None:
        for node in report.nodes:
            injected = ctx.controls.disk_state(node).injected
            ctx.controls.set_disk(node, MODE_OFF)
            report.heal_evidence[node] = {"injected_by_sut": injected - report.evidence["injected_after_probe"]}
        report.healed = True
