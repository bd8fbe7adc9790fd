"""Where a local Ray started for one `mallory fuzz --workers` run lives, what it may reach,
and how it is removed. ray_engine.py starts and stops it; this module never imports Ray.

Read from Ray 2.60's source (python/ray/...; its C++ parts are not in the wheel):

- Every listener of a node follows the node's address. The GCS, raylet, object manager
  and every worker's gRPC server bind it (all interfaces for any address but loopback);
  the runtime-env agent binds it (`_private/runtime_env/agent/main.py:244`); the
  dashboard agent's gRPC server (`dashboard/agent.py:164`), the reporter's metrics export
  (`dashboard/modules/reporter/reporter_agent.py:534`), the dashboard's metrics server
  (`dashboard/head.py:361`) and the autoscaler monitor's (`autoscaler/v2/monitor.py:127`)
  bind loopback if the node's address is loopback and every interface otherwise (those
  four run only with ray[default]; a minimal Ray starts the agent without servers).
- `ray.init(address="local")` takes the node's address from
  `services.get_node_ip_address()` (`_private/node.py:273`), which on Linux is the address
  of the interface routing to the outside (`_private/services.py:811-821`:
  `node_ip_address_from_perspective`), and an `_node_ip_address="127.0.0.1"` is turned
  into that same address (`_private/worker.py:1843`, `services.py:786-803`). Only with
  `ray_constants.ENABLE_RAY_CLUSTER` false (`RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`, read
  when Ray is imported: `_private/ray_constants.py:657-661`) is it loopback
  (`services.py:815-819`), as Ray does on macOS and Windows. ray_engine.py sets that flag
  while the node starts and checks the address the node got.
- The dashboard's web server is off (`include_dashboard=False`); its process still starts
  with the usage-stats module only (`_private/services.py:1381-1387`), which reports
  nothing with `RAY_USAGE_STATS_ENABLED=0` (`_common/usage/usage_lib.py:353-358`; a
  released ray.init sets it too, `_private/worker.py:1879-1884`, a nightly one asks). The
  Ray Client server is not started by ray.init (`_private/node.py:1657`).
- Token authentication is on by default for a cluster ray.init starts
  (`_private/worker.py:1874-1876`, `_private/authentication/authentication_token_setup.py:109-118`),
  and with no token to be found (`RAY_AUTH_TOKEN`, the file `RAY_AUTH_TOKEN_PATH` names,
  `~/.ray/auth_token`) it writes a new one to `~/.ray/auth_token`, in the user's home,
  whatever `RAY_AUTH_TOKEN_PATH` says (`authentication_token_setup.py:32-61,152-157`). A
  run gives its Ray a token of its own in a private file of the run's state directory
  instead, so nothing is written to the home directory and the loopback ports answer no
  other local user. `RAY_AUTH_MODE=disabled` set by the user still turns it off.
- Files: `_temp_dir` holds the session directory (logs, sockets, runtime envs, spilled
  objects, `ray_current_cluster`) (`_private/node.py:758-795`); `RAY_TMPDIR` is where any
  part of Ray that falls back on its default puts its files (`_common/utils.py:327-343`).
  Both are in the run's data directory (`<data root>/ray-<hex>/`, on disk: a long
  campaign's logs would fill the tmpfs of the state root). A unix socket's path has at
  most 107 bytes, which Ray checks at start (`_private/utils.py:1750-1762`): the session
  directory's name and `sockets/plasma_store` must fit after that directory's path.
- Processes: on Linux each process the driver starts (GCS, raylet, dashboard, log and
  autoscaler monitors) is killed by the kernel when the driver dies
  (`PR_SET_PDEATHSIG`: `_private/utils.py:858-872`, `_private/node.py:114-116`; no
  reaper then, `node.py:409`); the raylet's children (agents, workers) are meant to end
  when their raylet does (Ray's C++ side, not read here). `mallory cleanup` after a
  `kill -9` of the driver kills whatever of them is left: the run's journal names every
  process that names the run's Ray directory on its command line or holds a file in it
  open (each writes its log there; a worker rewrites its title to `ray::...`), and their
  descendants. The worker actors own their clusters' runs, which are stale once they are
  killed and go in the same sweep.
"""

from __future__ import annotations

import logging
import os
import secrets
import shutil
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mallory import paths
from mallory.cluster.registry import RunRecord, cleanup_run, register_run
from mallory.errors import MalloryError

log = logging.getLogger(__name__)

#: the address every listener of a local Ray binds
LOOPBACK = "127.0.0.1"
#: the longest path a unix socket may have on Linux (sun_path, less its terminating NUL)
SOCKET_PATH_MAX = 107
#: what Ray puts after its temp dir in a socket's path, at its longest: the session
#: directory (date, microseconds, the driver's pid up to Linux's pid_max) and the plasma
#: store's socket
SOCKET_TAIL = "/session_2026-01-01_00-00-00_000000_4194304/sockets/plasma_store"
#: the campaign directory's copy of the last local Ray's logs
LOGS = "ray-logs"


@dataclass
class LocalRay:
    """The place of one local Ray: a run of the registry (`ray-<hex>`, owned by the driver)
    whose data directory holds Ray's files, whose state directory holds its token, and
    whose journal names both and Ray's processes for `mallory cleanup`."""

    record: RunRecord

    @property
    def temp_dir(self) -> Path:
        """Ray's `_temp_dir`: its session directory goes in it."""
        return self.record.run_dir / "ray"

    @property
    def token_path(self) -> Path:
        return self.record.state_dir / "ray-token"

    @classmethod
    def open(cls) -> LocalRay:
        """Register the run and write down, before Ray creates them, its directory and the
        processes that will name it; write the token. MalloryError if a socket's path in
        it would be too long for Ray (a long $MALLORY_DATA_ROOT), or if the run cannot be
        registered (not root)."""
        try:
            record = register_run(f"ray-{secrets.token_hex(3)}")
        except OSError as exc:  # not root, and the default roots are root's
            raise MalloryError(f"a local Ray's run cannot be registered ({exc}): run as root, or set "
                               "MALLORY_STATE_DIR and MALLORY_DATA_ROOT to directories you can write") from None
        place = cls(record)
        try:
            longest = str(place.temp_dir) + SOCKET_TAIL
            if len(longest.encode()) > SOCKET_PATH_MAX:
                raise MalloryError(
                    f"a local Ray's sockets would be {len(longest.encode())} bytes long under {record.run_dir} "
                    f"(at most {SOCKET_PATH_MAX}): set MALLORY_DATA_ROOT to a shorter directory")
            record.record(uses=str(place.temp_dir))
            record.record(dir=str(record.run_dir))
            record.write_secret(place.token_path.name, secrets.token_hex(32))
        except BaseException:
            cleanup_run(record)
            raise
        return place

    def environment(self) -> dict[str, str]:
        """The variables the driver sets while its local Ray runs (Ray's processes inherit
        them): loopback addresses, no usage reports, the run's token and temp dir, and
        this Mallory's source tree first on the Python path, so the actors import the
        Mallory the driver runs, not whichever tree the venv's editable install names."""
        python_path = os.environ.get("PYTHONPATH")
        return {
            "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
            "RAY_USAGE_STATS_ENABLED": "0",
            "RAY_AUTH_TOKEN_PATH": str(self.token_path),
            "RAY_TMPDIR": str(self.record.run_dir),
            "PYTHONPATH": os.pathsep.join([str(paths.PACKAGES), python_path] if python_path else [str(paths.PACKAGES)]),
        }

    def init_options(self) -> dict[str, Any]:
        """ray.init's arguments for this Ray, besides the address and the namespace."""
        return {"_temp_dir": str(self.temp_dir), "_node_ip_address": LOOPBACK, "include_dashboard": False,
                "dashboard_host": LOOPBACK}

    def close(self, logs_to: Path | None) -> list[str]:
        """After ray.shutdown: copy the session's logs to `logs_to` (replacing an earlier
        run's), then remove the run: any process left that names its directory, the
        directory, the token. What was removed, for the log."""
        if logs_to is not None:
            keep_logs(self.temp_dir, logs_to)
        return cleanup_run(self.record)


def keep_logs(temp_dir: Path, logs_to: Path) -> None:
    """Copy the logs of the newest session under `temp_dir` to `logs_to`, replacing what
    was there. A copy that fails (a full disk) is a warning: the run's result stands."""
    sessions = sorted(p for p in temp_dir.glob("session_*") if p.is_dir() and not p.is_symlink())
    if not sessions or not (sessions[-1] / "logs").is_dir():
        return
    try:
        shutil.rmtree(logs_to, ignore_errors=True)
        shutil.copytree(sessions[-1] / "logs", logs_to, symlinks=True)
    except OSError as exc:
        log.warning("the local Ray's logs could not be kept in %s (%s)", logs_to, exc)


@contextmanager
def environment_set(values: Mapping[str, str]) -> Iterator[None]:
    """Set `values` in this process's environment while inside; after, the environment is
    as it was before, also the variables Ray itself sets (ray.init sets RAY_AUTH_MODE and
    RAY_USAGE_STATS_ENABLED for good)."""
    saved = dict(os.environ)
    os.environ.update(values)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)
