"""The apt lists of .ci/apt: each names the make targets that need it, `make test` (CI)
installs them all, and `make demo` none of what only tests, the deployment or other SUTs
use (scripts/setup.sh reads the `# targets:` lines)."""

from __future__ import annotations

import subprocess

from mallory import paths

LISTS = sorted((paths.HOME / ".ci" / "apt").glob("*.txt"))


def targets(path) -> set[str]:
    first = path.read_text().splitlines()[0]
    assert first.startswith("# targets: "), f"{path.name}: its first line names its targets"
    return set(first.removeprefix("# targets: ").split())


def packages(path) -> set[str]:
    return {word for line in path.read_text().splitlines() for word in line.partition("#")[0].split()}


def test_every_list_names_known_targets_and_ci_installs_them_all():
    assert LISTS
    for path in LISTS:
        assert targets(path) <= {"demo", "test"} and "test" in targets(path), path.name


def test_the_demo_installs_nothing_it_does_not_use():
    demo = set().union(*(packages(p) for p in LISTS if "demo" in targets(p)))
    assert {"clang", "llvm-dev", "dpkg-dev", "iptables", "libnetfilter-queue1"} <= demo
    unused = {"docker.io", "containerd", "docker-compose", "clojure", "default-jre-headless", "etcd-server", "cmake",
              "redis-server", "afl++"}
    assert not demo & unused


def test_no_list_keeps_packages_nothing_builds_with():
    """The observer reaches libnetfilter_queue through ctypes: no -dev package, no Python
    headers (PyPI netfilterqueue, which needed them, is not used)."""
    everything = set().union(*(packages(p) for p in LISTS))
    assert not everything & {"libnetfilter-queue-dev", "libnfnetlink-dev", "python3-dev"}


def test_the_setup_script_parses():
    for script in ("scripts/setup.sh", "scripts/demo.sh", "suts/redis/build.sh"):
        subprocess.run(["bash", "-n", str(paths.HOME / script)], check=True)


def test_make_test_installs_ray_for_the_workers_tests_and_the_demo_does_not():
    """`mallory fuzz --workers` needs the optional dependency mallory[ray]: CI (make test)
    installs it, as tests/live/ray needs it; the demo runs without."""
    pyproject = (paths.HOME / "pyproject.toml").read_text()
    assert 'ray = ["ray>=' in pyproject
    setup = (paths.HOME / "scripts" / "setup.sh").read_text()
    assert 'extras="[dev,ray]"' in setup and 'extras="" stamp=.venv/.mallory-installed' in setup
