"""A docker daemon of a test's own: dockerd in a network namespace the test creates, its
data, exec root and socket under a temporary directory. Stopping it removes the daemon,
its containers' mounts, the namespace (and with it every iptables rule dockerd made) and
the directory."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import uuid
from dataclasses import dataclass
from pathlib import Path

import docker

from mallory.polling import wait_until


@dataclass
class Daemon:
    namespace: str
    root: Path  # temporary directory holding everything the daemon writes
    proc: subprocess.Popen

    @property
    def socket(self) -> Path:
        return self.root / "docker.sock"

    @property
    def url(self) -> str:
        return f"unix://{self.socket}"

    def env(self) -> dict[str, str]:
        return {**os.environ, "DOCKER_HOST": self.url}

    @property
    def netns_path(self) -> str:
        return f"/run/netns/{self.namespace}"


def start_daemon() -> Daemon:
    namespace = f"mallory-dockerd-{uuid.uuid4().hex[:6]}"
    # short: the socket path must fit in sun_path (108 bytes)
    root = Path(tempfile.mkdtemp(prefix="mdk", dir="/tmp"))
    subprocess.run(["ip", "netns", "add", namespace], check=True)
    daemon = None
    try:
        subprocess.run(["ip", "-n", namespace, "link", "set", "lo", "up"], check=True)
        with open(root / "dockerd.log", "wb") as log:
            # nsenter --net, not `ip netns exec`: that one also unshares the mount
            # namespace (to remount /sys), hiding the daemon's container mounts.
            proc = subprocess.Popen(
                ["nsenter", f"--net=/run/netns/{namespace}", "dockerd",
                 "--data-root", str(root / "data"), "--exec-root", str(root / "exec"),
                 "--pidfile", str(root / "dockerd.pid"), "-H", f"unix://{root / 'docker.sock'}",
                 "--bridge", "none", "--userland-proxy=false"],
                stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
            )
        daemon = Daemon(namespace, root, proc)

        def answering() -> bool:
            if proc.poll() is not None:
                raise AssertionError(f"dockerd exited ({proc.returncode}): {(root / 'dockerd.log').read_text()[-2000:]}")
            try:
                return docker.DockerClient(base_url=daemon.url).ping()
            except docker.errors.DockerException:
                return False

        wait_until(answering, 120, "dockerd answering on its socket")
        return daemon
    except BaseException:
        if daemon is not None:
            stop_daemon(daemon)
        else:
            subprocess.run(["ip", "netns", "del", namespace])
            shutil.rmtree(root, ignore_errors=True)
        raise


def stop_daemon(daemon: Daemon) -> None:
    proc = daemon.proc
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(90)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
    # whatever dockerd did not unmount (a daemon killed mid-way), deepest first
    mounts = subprocess.run(["findmnt", "-rn", "-o", "TARGET"], capture_output=True, text=True).stdout.split()
    for target in sorted((m for m in mounts if m.startswith(str(daemon.root))), key=len, reverse=True):
        subprocess.run(["umount", "-l", target], capture_output=True)
    subprocess.run(["ip", "netns", "del", daemon.namespace], capture_output=True)
    shutil.rmtree(daemon.root, ignore_errors=True)
