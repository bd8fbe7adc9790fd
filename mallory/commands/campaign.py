"""`mallory campaign up|status|down|logs|fetch DIR`: a fuzz campaign in the compose project
DIR written by `mallory compose` (not the fuzz loop itself: mallory/campaign/loop.py).

    up      make sure the base image is in the daemon (import build/docker/mallory-base.tar,
            building it first if needed), build the project's image, start it detached.
            A campaign already on the `campaign` volume resumes from its checkpoint.
    status  every container's state and health, and the campaign's fuzzer_stats (read from
            the mediator container, running or not)
    down    stop the campaign (the loop finishes its step, resets the cluster, saves the
            learner) and remove containers and networks; the volumes stay unless --volumes
    logs    the containers' output (docker compose logs)
    fetch   copy the campaign directory off the volume to a local directory
    run     (the mediator container's command) `mallory fuzz --backend docker` with the
            settings of the project's .env, or `--resume` when the volume holds a campaign

The daemon is $DOCKER_HOST's (or the default socket), as for the docker CLI.
"""

from __future__ import annotations

import argparse
import io
import logging
import os
import shutil
import subprocess
import tarfile
from pathlib import Path
from typing import Any

from mallory import paths
from mallory.errors import ExitCode, MalloryError

NAME = "campaign"
HELP = "run a fuzz campaign in a compose project: up, status, down, logs, fetch (see `mallory compose`)"

log = logging.getLogger(__name__)

BASE_REPOSITORY, BASE_TAG = "mallory-base", "bookworm"
BUILD_BASE = paths.COMPOSE / "build-base.sh"
MEDIATOR = "mediator"


def configure(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    up = sub.add_parser("up", help="build the images and start the campaign (resumes one on the volume)")
    up.add_argument("dir", type=Path, help="the project directory (from `mallory compose`)")
    up.add_argument("--base-tar", type=Path, default=None,
                    help="the base image tarball (default: $MALLORY_BASE_TAR or build/docker/mallory-base.tar)")
    status = sub.add_parser("status", help="containers and the campaign's fuzzer_stats")
    status.add_argument("dir", type=Path)
    down = sub.add_parser("down", help="stop the campaign, remove containers and networks (results stay)")
    down.add_argument("dir", type=Path)
    down.add_argument("--volumes", action="store_true", help="also remove the volumes: the results too")
    logs = sub.add_parser("logs", help="the containers' output")
    logs.add_argument("dir", type=Path)
    logs.add_argument("service", nargs="*", help="mediator, n1, ... (default: all)")
    logs.add_argument("-f", "--follow", action="store_true")
    fetch = sub.add_parser("fetch", help="copy the campaign directory off the volume")
    fetch.add_argument("dir", type=Path)
    fetch.add_argument("--to", type=Path, required=True, help="local directory to create")
    sub.add_parser("run", help="(inside the mediator container) run or resume the campaign")


def run(args: argparse.Namespace) -> int:
    if args.action == "run":
        return run_inside()
    project = Project(args.dir)
    if args.action == "up":
        ensure_base_image(project.client(), args.base_tar)
        project.compose("build")
        project.compose("up", "-d", "--no-build")
        print(f"campaign {project.name} started; `mallory campaign status {args.dir}`")
    elif args.action == "status":
        print(project.status())
    elif args.action == "down":
        project.compose("down", *(["--volumes"] if args.volumes else []), "--timeout", "120")
        kept = "" if args.volumes else f" (results kept on the volume {project.name}_campaign)"
        print(f"campaign {project.name} down{kept}")
    elif args.action == "logs":
        project.compose("logs", "--no-color", *(["-f"] if args.follow else []), *args.service)
    elif args.action == "fetch":
        project.fetch(args.to)
        print(f"campaign directory copied to {args.to}")
    return 0


# -- the project on the host ---------------------------------------------------------------


def compose_command() -> list[str]:
    """docker-compose (Debian's 1.29) or the compose v2 plugin, whichever is installed."""
    if shutil.which("docker-compose"):
        return ["docker-compose"]
    if shutil.which("docker"):
        probe = subprocess.run(["docker", "compose", "version"], capture_output=True)
        if probe.returncode == 0:
            return ["docker", "compose"]
    raise MalloryError("neither docker-compose nor the docker compose plugin is installed (apt-get install docker-compose)")


def read_env(path: Path) -> dict[str, str]:
    values = {}
    for line in path.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#") and "=" in line:
            key, _, value = line.partition("=")
            values[key.strip()] = value.strip()
    return values


class Project:
    def __init__(self, directory: Path) -> None:
        self.dir = directory
        compose_file = directory / "docker-compose.yml"
        if not compose_file.exists():
            raise MalloryError(f"{directory}: no docker-compose.yml (write one with `mallory compose`)")
        try:
            self.name = read_env(directory / ".env")["COMPOSE_PROJECT_NAME"]
        except (FileNotFoundError, KeyError):
            raise MalloryError(f"{directory / '.env'}: missing or without COMPOSE_PROJECT_NAME") from None
        self._client: Any = None

    def client(self) -> Any:
        if self._client is None:
            from mallory.cluster.docker import docker_client

            self._client = docker_client()
        return self._client

    def compose(self, *argv: str) -> None:
        cmd = [*compose_command(), "--project-directory", str(self.dir), "-f", str(self.dir / "docker-compose.yml"),
               "-p", self.name, *argv]
        result = subprocess.run(cmd, cwd=self.dir)
        if result.returncode != 0:
            raise MalloryError(f"`{' '.join(cmd)}` failed ({result.returncode})")

    def containers(self) -> list[Any]:
        from mallory.cluster.docker import PROJECT_LABEL

        return self.client().containers.list(all=True, filters={"label": f"{PROJECT_LABEL}={self.name}"})

    def mediator(self) -> Any:
        from mallory.cluster.docker import SERVICE_LABEL

        for container in self.containers():
            if container.labels.get(SERVICE_LABEL) == MEDIATOR:
                return container
        raise MalloryError(f"campaign {self.name} has no mediator container (not up?)")

    def status(self) -> str:
        lines = [f"campaign {self.name}"]
        for container in sorted(self.containers(), key=lambda c: c.name):
            health = container.attrs["State"].get("Health", {}).get("Status")
            lines.append(f"  {container.name:30} {container.status}{f' ({health})' if health else ''}")
        try:
            stats = read_file(self.mediator(), "/campaign/fuzzer_stats").decode()
        except MalloryError as exc:
            stats = f"(no fuzzer_stats yet: {exc})\n"
        return "\n".join(lines) + "\n\n" + stats

    def fetch(self, to: Path) -> None:
        if to.exists():
            raise MalloryError(f"--to {to}: exists")
        stream, _ = self.mediator().get_archive("/campaign/.")
        data = io.BytesIO(b"".join(stream))
        to.mkdir(parents=True)
        with tarfile.open(fileobj=data) as tar:
            tar.extractall(to, filter="data")


def read_file(container: Any, path: str) -> bytes:
    """A file from a container, running or stopped (Engine API archive)."""
    try:
        stream, _ = container.get_archive(path)
    except Exception as exc:  # docker.errors.NotFound / APIError
        raise MalloryError(f"{path} in {container.name}: {exc}") from None
    with tarfile.open(fileobj=io.BytesIO(b"".join(stream))) as tar:
        member = tar.getmembers()[0]
        handle = tar.extractfile(member)
        return handle.read() if handle else b""


def base_tarball(given: Path | None) -> Path:
    return given or Path(os.environ.get("MALLORY_BASE_TAR") or paths.BUILD / "docker" / "mallory-base.tar")


def ensure_base_image(client: Any, given: Path | None = None) -> str:
    """mallory-base:bookworm in the daemon: imported from the tarball, which is built
    (mmdebstrap, deploy/compose/build-base.sh) when it is missing."""
    import docker

    ref = f"{BASE_REPOSITORY}:{BASE_TAG}"
    try:
        client.images.get(ref)
        return ref
    except docker.errors.ImageNotFound:
        pass
    tar = base_tarball(given)
    if not tar.exists():
        if given is not None:
            raise MalloryError(f"--base-tar {tar}: no such file")
        result = subprocess.run(["bash", str(BUILD_BASE), str(tar)])
        if result.returncode != 0:
            raise MalloryError(f"building the base image tarball with {BUILD_BASE} failed ({result.returncode})")
    client.api.import_image_from_file(str(tar), repository=BASE_REPOSITORY, tag=BASE_TAG)
    client.images.get(ref)
    return ref


# -- inside the mediator container -----------------------------------------------------------


def fuzz_argv(env: dict[str, str], resume: bool) -> list[str]:
    """The `mallory fuzz` command line for the project's settings (its .env, as the
    container's environment)."""

    def need(key: str) -> str:
        value = env.get(key, "")
        if not value:
            raise MalloryError(f"${key} is not set (the project's .env sets it)")
        return value

    directory = need("MALLORY_CAMPAIGN_DIR")
    argv = ["fuzz", "--plain", "--duration", need("MALLORY_DURATION")]
    if env.get("MALLORY_SCHEDULES", "0") not in ("", "0"):
        argv += ["--schedules", env["MALLORY_SCHEDULES"]]
    if resume:
        return [*argv, "--resume", directory]
    argv += ["--backend", "docker", "--out", directory, "--sut", need("MALLORY_SUT"), "--nodes", need("MALLORY_NODES"),
             "--policy", need("MALLORY_POLICY"), "--seed", need("MALLORY_SEED"), "--workload", need("MALLORY_WORKLOAD")]
    for key, flag in (("MALLORY_FAULTS", "--faults"), ("MALLORY_STEPS", "--steps"),
                      ("MALLORY_WINDOW", "--window"), ("MALLORY_RESET", "--reset")):
        if env.get(key):
            argv += [flag, env[key]]
    return argv


def run_inside() -> int:
    """`mallory fuzz` with the project's settings (its errors reach `mallory campaign run`'s
    own handler, which prints them and exits as fuzz would). A campaign that found bugs
    exits OK here: the container's restart policy would start a finished campaign again."""
    from mallory.commands import fuzz

    directory = Path(os.environ.get("MALLORY_CAMPAIGN_DIR", "/campaign"))
    _offloads_off()
    argv = fuzz_argv(dict(os.environ), resume=(directory / "campaign.json").exists())
    log.info("mallory %s", " ".join(argv))
    parser = argparse.ArgumentParser(prog="mallory fuzz")
    fuzz.configure(parser)
    code = fuzz.run(parser.parse_args(argv[1:]))
    return ExitCode.OK if code == ExitCode.FAILED else code


def _offloads_off() -> None:
    """The mediator's ends of the node networks: no GSO/GRO, so it sees the packets the
    nodes see (as on the netns backend's veths)."""
    from mallory.cluster.netns import OFFLOADS

    for dev in sorted(os.listdir("/sys/class/net")):
        if dev != "lo":
            subprocess.run(["ethtool", "-K", dev, *OFFLOADS], capture_output=True)
