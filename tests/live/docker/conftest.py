"""One docker daemon for the area's live tests (a session of dockerd in a namespace of its
own, tests/live/docker/daemon.py) with the base image imported."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from mallory import paths
from mallory.cluster.docker import docker_client
from mallory.commands.campaign import base_tarball, ensure_base_image
from mallory.harness.sut_make import make_with_mallory_cc
from tests.live.docker.daemon import start_daemon, stop_daemon

REPO = paths.HOME
EXAMPLE = REPO / "suts" / "example"


@pytest.fixture(scope="session")
def daemon():
    daemon = start_daemon()
    try:
        yield daemon
    finally:
        stop_daemon(daemon)
    assert not daemon.root.exists()
    assert daemon.namespace not in subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout


@pytest.fixture(scope="session")
def client(daemon):
    """The daemon's client, with mallory-base:bookworm imported (the tarball is built by
    deploy/compose/build-base.sh when build/ has none) and the example SUT built."""
    client = docker_client(daemon.url)
    t0 = time.monotonic()
    built = not base_tarball(None).exists()
    ensure_base_image(client)
    print(f"\nbase image {'built and ' if built else ''}imported in {time.monotonic() - t0:.1f} s", file=sys.stderr)
    make_with_mallory_cc(EXAMPLE, None, "the example SUT")  # a no-op when up to date, never stale
    return client
