"""`mallory compose`: write a docker-compose project that runs a fuzz campaign in containers.

    mallory compose --sut suts/example/example.toml --nodes 3 --out deploy/c1 \\
        [--duration 24h --policy qlearning --seed 1 --faults partition,kill --workload register]

The project (see deploy/compose/README.md for why it looks like this):

    DIR/docker-compose.yml  a node container per node, each alone on its own network n<K>
                            (10.B.K.0/24, B from --subnet); the mediator on every node
                            network (10.B.K.2, the nodes' default gateway) and on `control`
                            (10.B.0.2: the mediator API); NET_ADMIN, not privileged;
                            healthchecks; restart policies; named volumes `campaign` (the
                            campaign directory) and `run` (node data, logs, fault controls)
    DIR/.env                campaign settings (duration, policy, seed, faults, ...): edit, then
                            `mallory campaign up DIR` (or `docker compose up -d`)
    DIR/image/              the build context of the project's image (FROM the local
                            mallory-base:bookworm image): Mallory's source, the SUT directory

The campaign loop runs in the mediator container (`mallory campaign run`), drives the nodes
through the Docker Engine API (socket mounted, `pid: host` to signal and inspect node
processes by their host pids), and resumes from the volume after a restart.
"""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path
from typing import Any

from mallory import paths
from mallory.cluster.compose import (
    check_project_name,
    check_subnet,
    compose_model,
    env_file,
    to_yaml,
)
from mallory.errors import MalloryError
from mallory.files import atomic_write
from mallory.harness.spec import load_spec
from mallory.mediator import API_PORT
from mallory.suts.registry import check_workload
from nemesis.faults.controls import SHIM_NAME, fault_shim

NAME = "compose"
HELP = "write a docker-compose project running a fuzz campaign in containers (mediator + N nodes)"

TEMPLATES = paths.COMPOSE
BASE_IMAGE = "mallory-base:bookworm"
SOURCE_PACKAGES = ("mallory", "nemesis")
NOT_COPIED = ("__pycache__", "*.pyc", ".pytest_cache", "*.egg-info")
IGNORED = shutil.ignore_patterns(*NOT_COPIED)
# nemesis/preload/build: the fault shim goes in from the host's build, nothing else built there
IGNORED_IN_SOURCES = shutil.ignore_patterns(*NOT_COPIED, "build")


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--sut", required=True, help="the SUT's TOML spec; its directory (with the built SUT) goes into the image")
    parser.add_argument("--nodes", type=int, default=3, help="cluster size (default 3)")
    parser.add_argument("--out", type=Path, required=True, help="project directory to write (new or empty)")
    parser.add_argument("--project", help="compose project name (default: the --out directory's name)")
    parser.add_argument("--subnet", default="10.213", help="first two octets of the project's networks (default 10.213)")
    parser.add_argument("--run-dir", type=Path, help="bind this host directory (at the same path) for node data and "
                        "logs instead of the named volume `run`")
    parser.add_argument("--docker-socket", default="/var/run/docker.sock", help="the Engine socket on the docker host")
    campaign = parser.add_argument_group("campaign settings (written to .env)")
    campaign.add_argument("--duration", default="24h")
    campaign.add_argument("--policy", default="qlearning")
    campaign.add_argument("--seed", type=int, default=0)
    campaign.add_argument("--faults", default="", help="families or labels, comma-separated (default: all the SUT takes)")
    campaign.add_argument("--workload", default="register")
    campaign.add_argument("--schedules", type=int, default=0, help="stop after this many schedules (0: duration only)")
    campaign.add_argument("--steps", type=int, default=12)
    campaign.add_argument("--window", type=float, default=2.5)
    campaign.add_argument("--reset", type=float, default=5.0)


def run(args: argparse.Namespace) -> int:
    project = generate(
        sut=Path(args.sut), nodes=args.nodes, out=args.out, project=args.project, subnet=args.subnet,
        run_dir=args.run_dir, docker_socket=args.docker_socket,
        settings={"duration": args.duration, "policy": args.policy, "seed": args.seed, "faults": args.faults,
                  "workload": args.workload, "schedules": args.schedules, "steps": args.steps,
                  "window": args.window, "reset": args.reset},
    )
    print(f"compose project {project} in {args.out}: `mallory campaign up {args.out}` builds and starts it")
    return 0


# -- writing the project -------------------------------------------------------------------


def generate(
    *,
    sut: Path,
    nodes: int,
    out: Path,
    project: str | None = None,
    subnet: str = "10.213",
    run_dir: Path | None = None,
    docker_socket: str = "/var/run/docker.sock",
    settings: dict[str, Any],
) -> str:
    """Write the project into `out` (which must be new or empty); its compose project name."""
    project = check_project_name(project or out.resolve().name)
    subnet = check_subnet(subnet)
    spec = load_spec(sut)  # a broken spec fails here, naming the file and the field
    check_workload(str(sut), str(settings["workload"]))
    if run_dir is not None and not run_dir.is_absolute():
        raise MalloryError(f"--run-dir {run_dir}: give an absolute path (it is mounted at the same path)")
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise MalloryError(f"--out {out}: exists and is not an empty directory")
    if not TEMPLATES.is_dir():
        raise MalloryError(f"{TEMPLATES}: missing; `mallory compose` runs from a Mallory source checkout")
    sut_dir = sut.resolve().parent
    model = compose_model(project, nodes, subnet, sut.name, run_dir, API_PORT)
    _check_program(spec, sut_dir, sut)

    image = out / "image"
    image.mkdir(parents=True)
    for package in SOURCE_PACKAGES:
        shutil.copytree(paths.HOME / package, image / package, ignore=IGNORED_IN_SOURCES)
    shutil.copytree(sut_dir, image / "sut", ignore=IGNORED)
    # The clock/disk fault shim, built here (the image has no compiler); copied with its
    # time stamp, so make in the image finds it up to date.
    shim = image / "nemesis" / "preload" / "build"
    shim.mkdir()
    shutil.copy2(fault_shim(), shim / SHIM_NAME)
    for name in ("Dockerfile", "node-init.sh", "mallory.sh"):
        shutil.copy2(TEMPLATES / name, image / name)
    (out / "docker-compose.yml").write_text(
        f"# Generated by `mallory compose` for {spec.name} x{nodes}. See deploy/compose/README.md.\n"
        + to_yaml(model).lstrip("\n")
    )
    # It holds the API token: readable by its owner only.
    atomic_write(out / ".env", env_file(project, settings, docker_socket).encode(), private=True)
    return project


def _check_program(spec: Any, sut_dir: Path, sut: Path) -> None:
    """A SUT program given by a path must be built before it is copied into the image."""
    program = spec.command[0] if getattr(spec, "command", None) else None
    if program and "/" in program:
        path = Path(program) if Path(program).is_absolute() else sut_dir / program
        if not path.exists():
            raise MalloryError(f"{sut}: the SUT program {program} does not exist ({path}); build it first")
