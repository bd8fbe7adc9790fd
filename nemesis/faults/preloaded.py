"""Helpers for the faults enacted inside the SUT by preloaded libraries (clock, disk):
whether a node's SUT really has the library, and running a probe in the node under the
same environment the SUT got."""

from __future__ import annotations

import subprocess
import time

from nemesis.faults.base import FaultContext
from nemesis.faults.controls import loaded_in
from nemesis.faults.process import sut_pid


def missing_library(ctx: FaultContext, family: str) -> str | None:
    """Why the running SUTs cannot receive `family` faults, or None. A SUT started without
    the controls' env, or statically linked (Go), has no such library mapped."""
    if ctx.controls is None:
        return "no per-node fault controls (the SUT must be started with the preload env)"
    library = ctx.controls.libraries().get(family)
    if library is None:
        return f"the fault controls were built without {family} support"
    for node in ctx.nodes:
        pid = sut_pid(ctx, node)
        if pid is None or not ctx.adapter.is_running(node):
            continue
        if not _mapped_soon(pid, library):
            return f"{node}'s SUT (pid {pid}) has no {library} loaded: started without the preload env, or statically linked"
    return None


def run_with_env(ctx: FaultContext, node: str, argv: list[str], timeout: float = 10.0) -> subprocess.CompletedProcess:
    """Run argv inside the node with the node's fault env (as the SUT has it)."""
    env = [f"{k}={v}" for k, v in ctx.controls.env(node).items()]
    return ctx.backend.exec(node, ["env", *env, *argv], timeout=timeout, check=False)


def _mapped_soon(pid: int, library: str, grace_s: float = 2.0) -> bool:
    """Whether `library` is (or within `grace_s` becomes) mapped into `pid`. A node just
    restarted may still be the launcher (`ip netns exec` before its execve, or the dynamic
    loader at work): its maps show the launcher's libraries, not the SUT's, for a moment."""
    deadline = time.monotonic() + grace_s
    while library not in loaded_in(pid):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)
    return True
