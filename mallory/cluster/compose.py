"""The model of a docker-compose project that runs a campaign in containers (written by
`mallory compose`, mallory/commands/compose.py; run by the `docker` backend, docker.py).

A container per node, each alone on its own network n<K> (10.B.K.0/24, B from the subnet);
the mediator on every node network (10.B.K.2, the nodes' default gateway) and on `control`
(10.B.0.2: the mediator API); NET_ADMIN, not privileged; healthchecks; restart policies;
named volumes `campaign` (the campaign directory) and `run` (node data, logs, fault
controls). deploy/compose/README.md says why it looks like this.
"""

from __future__ import annotations

import ipaddress
import re
import secrets
from pathlib import Path
from typing import Any

from mallory.errors import MalloryError

MAX_NODES = 200
PROJECT_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]{0,40}$")
IMAGE_SUT_DIR = "/opt/sut"
RUN_ROOT = "/var/lib/mallory"  # node data, logs, fault controls: the `run` volume
CAMPAIGN_DIR = "/campaign"  # the `campaign` volume


# -- checks ------------------------------------------------------------------------------


def check_project_name(name: str) -> str:
    if not PROJECT_NAME.match(name):
        raise MalloryError(f"compose project name {name!r}: use 1-41 characters from a-z, 0-9, '_' and '-', "
                           "starting with a letter or digit (or give --project)")
    return name


def check_subnet(text: str) -> str:
    parts = text.split(".")
    if len(parts) != 2 or not all(p.isdigit() and 0 <= int(p) <= 255 for p in parts):
        raise MalloryError(f"--subnet {text!r}: give the first two octets, e.g. 10.213")
    if not ipaddress.ip_network(f"{text}.0.0/16").is_private:
        raise MalloryError(f"--subnet {text!r}: {text}.0.0/16 is not a private range")
    return text


# -- the compose model -------------------------------------------------------------------


def compose_model(project: str, nodes: int, subnet: str, sut_spec: str, run_dir: Path | None,
                  api_port: int) -> dict[str, Any]:
    """The docker-compose.yml content (file format 2.4: both docker-compose 1.29 and the
    compose v2 plugin read it) as a plain dict. `sut_spec` is the spec's file name in the
    image's SUT directory; `api_port` the mediator API's port (its healthcheck dials it)."""
    if not 1 <= nodes <= MAX_NODES:
        raise MalloryError(f"--nodes {nodes}: a project has 1..{MAX_NODES} nodes")
    names = [f"n{k}" for k in range(1, nodes + 1)]
    image = f"mallory-{project}:latest"
    run_mount = f"{run_dir}:{run_dir}" if run_dir else f"run:{RUN_ROOT}"
    run_root = str(run_dir) if run_dir else RUN_ROOT
    networks: dict[str, Any] = {
        "control": {"ipam": {"config": [{"subnet": f"{subnet}.0.0/24"}]}},
    }
    for k, name in enumerate(names, start=1):
        # Not `internal`: docker drops bridged frames of an internal network whose addresses
        # are outside its subnet (br_netfilter), i.e. every packet the mediator forwards.
        # A node's default route is the mediator, which does not NAT: nodes still have no
        # way out.
        networks[name] = {"ipam": {"config": [{"subnet": f"{subnet}.{k}.0/24"}]}}
    mediator_networks = {"control": {"ipv4_address": f"{subnet}.0.2"}}
    mediator_networks.update({name: {"ipv4_address": f"{subnet}.{k}.2"} for k, name in enumerate(names, start=1)})
    services: dict[str, Any] = {
        "mediator": {
            "build": {"context": "./image"},
            "image": image,
            "command": ["mallory", "campaign", "run"],
            "env_file": [".env"],
            "environment": {
                "MALLORY_COMPOSE_PROJECT": project,
                "MALLORY_SUT": f"{IMAGE_SUT_DIR}/{sut_spec}",
                "MALLORY_NODES": str(nodes),
                "MALLORY_STATE_DIR": f"{run_root}/state",
                "MALLORY_DATA_ROOT": run_root,
                "MALLORY_CAMPAIGN_DIR": CAMPAIGN_DIR,
            },
            # NFQUEUE and iptables on FORWARD; forwarding between the node networks
            "cap_add": ["NET_ADMIN"],
            "sysctls": {"net.ipv4.ip_forward": "1"},
            # the loop signals and inspects node processes by their host pids
            "pid": "host",
            "volumes": [f"campaign:{CAMPAIGN_DIR}", run_mount,
                        "${MALLORY_DOCKER_SOCKET:-/var/run/docker.sock}:/var/run/docker.sock"],
            "networks": mediator_networks,
            "depends_on": {name: {"condition": "service_healthy"} for name in names},
            # the API answers once the mediator serves; a crashed loop is started again
            # and resumes from the campaign volume
            "healthcheck": {
                "test": ["CMD", "python3", "-c",
                         f"import socket; socket.create_connection(('{subnet}.0.2', {api_port}), 2)"],
                "interval": "10s", "timeout": "5s", "retries": 3, "start_period": "60s",
            },
            "restart": "on-failure",
            "stop_grace_period": "2m",  # SIGTERM: finish the step, reset, save the learner
        },
    }
    for k, name in enumerate(names, start=1):
        gateway = f"{subnet}.{k}.2"
        services[name] = {
            # every service says how to build the image, so a plain `docker compose up`
            # builds it instead of trying to pull it (the layers are shared)
            "build": {"context": "./image"},
            "image": image,
            "command": ["mallory-node-init"],
            "hostname": name,
            "environment": {"MALLORY_NODE": name, "MALLORY_GATEWAY": gateway},
            # the observer's NFQUEUE rules, the default route through the mediator
            "cap_add": ["NET_ADMIN"],
            "volumes": [run_mount],
            "networks": {name: {"ipv4_address": f"{subnet}.{k}.3"}},
            "healthcheck": {
                "test": ["CMD-SHELL", "ip route show default | grep -q \"via $$MALLORY_GATEWAY \""],
                "interval": "5s", "timeout": "3s", "retries": 5,
            },
            "restart": "unless-stopped",
        }
    volumes: dict[str, Any] = {"campaign": {}}
    if run_dir is None:
        volumes["run"] = {}
    return {"version": "2.4", "services": services, "networks": networks, "volumes": volumes}


def env_file(project: str, settings: dict[str, Any], docker_socket: str) -> str:
    lines = [
        "# Campaign settings, read by the mediator's `mallory campaign run` at every (re)start.",
        "# A campaign already on the `campaign` volume resumes: policy, seed and faults are",
        "# those it started with; MALLORY_DURATION is its total time across restarts.",
        f"COMPOSE_PROJECT_NAME={project}",
        f"MALLORY_DURATION={settings['duration']}",
        f"MALLORY_POLICY={settings['policy']}",
        f"MALLORY_SEED={settings['seed']}",
        f"MALLORY_FAULTS={settings['faults']}",
        f"MALLORY_WORKLOAD={settings['workload']}",
        f"MALLORY_SCHEDULES={settings['schedules']}",
        f"MALLORY_STEPS={settings['steps']}",
        f"MALLORY_WINDOW={settings['window']}",
        f"MALLORY_RESET={settings['reset']}",
        "# the mediator API token (the mediator's HTTP API on the control network)",
        f"MALLORY_TOKEN={secrets.token_hex(16)}",
        "# the Engine socket on the docker host, mounted into the mediator",
        f"MALLORY_DOCKER_SOCKET={docker_socket}",
    ]
    return "\n".join(lines) + "\n"


def to_yaml(model: dict[str, Any]) -> str:
    """The YAML of a compose model: PyYAML's safe_dump (only plain types, strings quoted
    where they would read back as another type), keys in the model's order (services,
    networks, volumes read top-down), and no line folded however long its command."""
    import yaml  # only when writing: the containers' image runs this CLI without PyYAML

    return yaml.safe_dump(model, sort_keys=False, default_flow_style=False, width=float("inf"))
