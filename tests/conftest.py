"""What each test needs of the machine, said once: markers by path, applied at collection.

`tests/unit/<package>/` holds tests of code that needs no root; `tests/live/<scenario>/`
starts real processes and clusters. `NEEDS` maps a path under tests/ (a directory, a file,
or a single test's node id) to the markers its tests get; every matching entry adds its
own. A test whose need this machine cannot meet is skipped, saying what is missing (CI
runs as root with every package of .ci/apt installed, so there nothing is skipped).

    live    starts real processes or clusters (everything under tests/live)
    root    network namespaces, iptables, the gateway firewall
    docker  a docker daemon of the test's own (in a network namespace)
    redis   a Redis server (Debian's, or the instrumented build of suts/redis)
    clang   builds C with clang/LLVM (the pass, mallory-cc, the C SUTs)
    afl     runs Debian's AFL++ tools (afl-whatsup, afl-plot, which needs gnuplot)
    ray     starts a local Ray cluster (the optional dependency mallory[ray])
"""

from __future__ import annotations

import importlib.util
import os
import shutil
from pathlib import Path

import pytest

TESTS = Path(__file__).parent

NEEDS: dict[str, tuple[str, ...]] = {
    "live/": ("live",),
    "live/afl/": ("afl",),
    "live/campaign/": ("root", "clang"),
    "live/cluster/": ("root",),
    "live/demo/": ("root", "redis", "clang"),
    "live/docker/": ("root", "docker", "clang"),
    "live/etcd/": ("root",),
    "live/example_sut/": ("clang",),
    "live/example_sut/test_cluster_netns.py": ("root",),
    "live/example_sut/test_durability.py": ("root",),
    "live/example_sut/test_seeded_bugs.py": ("root",),
    "live/jepsen_bridge/": (),
    "live/mediator/": ("root",),
    "live/nemesis/": ("root", "redis"),
    "live/pysyncobj/": ("clang",),
    "live/pysyncobj/test_cluster_netns.py": ("root",),
    "live/raft_kv/": ("clang",),
    "live/ray/": ("root", "clang", "ray"),
    "live/raft_kv/test_cluster_netns.py": ("root",),
    "live/raft_kv/test_disk_netns.py": ("root",),
    "live/raft_kv/test_membership_netns.py": ("root",),
    "live/redis/": ("redis",),
    "live/redis/test_build.py::test_every_annotation_is_in_the_catalogue_and_the_build_is_cached": ("root", "clang"),
    "live/redis/test_replication_netns.py": ("root",),
    "live/redis/test_sentinel_cluster.py": ("root", "clang"),
    "live/report/": ("root", "clang"),
    "live/scenario/": ("root", "clang"),
    "live/shrink/": ("root", "clang"),
    "unit/cluster/test_compose.py": ("clang",),
    "unit/instrument/test_auto.py": ("clang",),
    "unit/instrument/test_build_events.py": ("clang",),
    "unit/instrument/test_llvm22.py": ("clang",),
    "unit/instrument/test_ring_stress.py": ("clang",),
    "unit/instrument/test_trace_command.py": ("clang",),
    "unit/mediator/test_transport.py::test_an_observer_gone_without_fin_or_rst_is_found_by_the_first_probe_and_its_connection_ends": ("root",),
    "unit/observer/test_ring_reader.py::test_python_writer_through_the_shared_runtime": ("clang",),
    "unit/pyinstrument/test_ring_roundtrip.py": ("clang",),
}


def _missing(marker: str) -> str | None:
    """Why this machine cannot run a test with `marker`, or None when it can."""
    if marker == "root" and (os.geteuid() != 0 or shutil.which("ip") is None):
        return "needs root and iproute2 (network namespaces, iptables)"
    if marker == "docker" and (os.geteuid() != 0 or shutil.which("dockerd") is None):
        return "needs root and dockerd (apt-get install docker.io)"
    if marker == "redis" and shutil.which("redis-server") is None:
        return "needs redis-server (apt-get install redis-server)"
    if marker == "clang" and (shutil.which("clang") is None or shutil.which("llvm-config") is None):
        return "needs clang and llvm-dev"
    if marker == "ray" and importlib.util.find_spec("ray") is None:
        return "needs Ray (pip install 'mallory[ray]'; make test installs it)"
    if marker == "afl" and not all(shutil.which(tool) for tool in ("afl-whatsup", "afl-plot", "gnuplot")):
        return "needs afl-whatsup, afl-plot and gnuplot (apt-get install afl++ gnuplot-nox)"
    return None


def needs_of(nodeid: str) -> list[str]:
    """The markers of a test, by its node id relative to the repository."""
    rel = nodeid.removeprefix("tests/")
    return sorted({m for prefix, marks in NEEDS.items() if rel.startswith(prefix) for m in marks})


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        for marker in needs_of(item.nodeid):
            item.add_marker(marker)
            reason = _missing(marker)
            if reason is not None:
                item.add_marker(pytest.mark.skip(reason=reason))
