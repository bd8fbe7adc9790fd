"""The compose generator (mallory compose) and the in-container command line (campaign run):
the shape of the project it writes, and every broken input refused with a MalloryError."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from mallory import paths
from mallory.cluster.compose import compose_model, to_yaml
from mallory.commands.campaign import Project, fuzz_argv, read_env
from mallory.commands.compose import generate
from mallory.errors import MalloryError
from mallory.harness.sut_make import make_with_mallory_cc

REPO = paths.HOME
SETTINGS = {"duration": "24h", "policy": "qlearning", "seed": 7, "faults": "partition,kill", "workload": "register",
            "schedules": 0, "steps": 12, "window": 2.5, "reset": 5.0}


@pytest.fixture
def spec(tmp_path) -> Path:
    """A spec whose program exists (the generator refuses an unbuilt SUT)."""
    sut = tmp_path / "sut"
    (sut / "bin").mkdir(parents=True)
    (sut / "bin" / "server").write_text("#!/bin/sh\n")
    (sut / "s.toml").write_text(
        'name = "s"\n[start]\ncommand = ["bin/server", "{address}", "{port}"]\n[ports]\nclient = 7000\n'
        '[client]\nkind = "line"\n'
    )
    return sut / "s.toml"


def write(spec: Path, out: Path, nodes: int = 3, **kw) -> dict:
    generate(sut=spec, nodes=nodes, out=out, settings=SETTINGS, **kw)
    return yaml.safe_load((out / "docker-compose.yml").read_text())


def test_one_network_per_node_and_the_mediator_as_gateway_of_all(spec, tmp_path):
    model = write(spec, tmp_path / "proj", nodes=4, subnet="10.77")
    services, networks = model["services"], model["networks"]
    assert set(services) == {"mediator", "n1", "n2", "n3", "n4"}
    assert set(networks) == {"control", "n1", "n2", "n3", "n4"}
    mediator = services["mediator"]
    assert mediator["networks"]["control"]["ipv4_address"] == "10.77.0.2"
    for k in range(1, 5):
        node = services[f"n{k}"]
        assert "internal" not in networks[f"n{k}"]  # docker would drop what the mediator forwards
        assert networks[f"n{k}"]["ipam"]["config"] == [{"subnet": f"10.77.{k}.0/24"}]
        assert list(node["networks"]) == [f"n{k}"]  # alone on its LAN
        assert node["networks"][f"n{k}"]["ipv4_address"] == f"10.77.{k}.3"
        assert mediator["networks"][f"n{k}"]["ipv4_address"] == f"10.77.{k}.2"
        assert node["environment"]["MALLORY_GATEWAY"] == f"10.77.{k}.2"
        assert mediator["depends_on"][f"n{k}"] == {"condition": "service_healthy"}
    assert "internal" not in networks["control"]


def test_capabilities_health_volumes_restart(spec, tmp_path):
    model = write(spec, tmp_path / "proj")
    for name, service in model["services"].items():
        assert service["cap_add"] == ["NET_ADMIN"] and "privileged" not in service, name
        assert service["healthcheck"]["test"][0] in ("CMD", "CMD-SHELL"), name
        assert service["restart"] in ("on-failure", "unless-stopped"), name
    mediator = model["services"]["mediator"]
    assert mediator["sysctls"] == {"net.ipv4.ip_forward": "1"}
    assert mediator["pid"] == "host"
    assert "campaign:/campaign" in mediator["volumes"]
    assert any(v.endswith(":/var/run/docker.sock") for v in mediator["volumes"])
    assert mediator["command"] == ["mallory", "campaign", "run"]
    assert mediator["environment"]["MALLORY_SUT"] == "/opt/sut/s.toml"
    assert set(model["volumes"]) == {"campaign", "run"}
    assert model["services"]["n2"]["volumes"] == ["run:/var/lib/mallory"]


def test_run_dir_is_bound_at_the_same_path(spec, tmp_path):
    model = write(spec, tmp_path / "proj", run_dir=tmp_path / "run")
    bind = f"{tmp_path / 'run'}:{tmp_path / 'run'}"
    assert all(bind in s["volumes"] for s in model["services"].values())
    assert set(model["volumes"]) == {"campaign"}
    assert model["services"]["mediator"]["environment"]["MALLORY_DATA_ROOT"] == str(tmp_path / "run")


def test_env_file_and_image_context(spec, tmp_path):
    out = tmp_path / "proj"
    write(spec, out)
    env = read_env(out / ".env")
    assert env["COMPOSE_PROJECT_NAME"] == "proj"
    assert (env["MALLORY_DURATION"], env["MALLORY_POLICY"], env["MALLORY_SEED"], env["MALLORY_FAULTS"]) == (
        "24h", "qlearning", "7", "partition,kill")
    assert len(env["MALLORY_TOKEN"]) == 32
    assert (out / ".env").stat().st_mode & 0o777 == 0o600  # it holds the token
    image = out / "image"
    assert (image / "sut" / "bin" / "server").exists() and (image / "sut" / "s.toml").exists()
    assert (image / "mallory" / "cli.py").exists() and (image / "nemesis" / "nemesis.py").exists()
    assert not list(image.rglob("__pycache__"))
    assert "FROM mallory-base:bookworm" in (image / "Dockerfile").read_text()
    assert Project(out).name == "proj"


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"nodes": 0}, "1..200 nodes"),
        ({"subnet": "10.1.2"}, "first two octets"),
        ({"subnet": "8.8"}, "not a private range"),
        ({"project": "Bad Name"}, "compose project name"),
        ({"run_dir": Path("relative/run")}, "absolute path"),
    ],
)
def test_broken_inputs(spec, tmp_path, kwargs, message):
    with pytest.raises(MalloryError, match=message):
        write(spec, tmp_path / "proj", **kwargs)


def test_a_workload_the_spec_client_cannot_run_is_refused(spec, tmp_path):
    with pytest.raises(MalloryError, match="cannot run the list-append workload: its clients run register"):
        generate(sut=spec, nodes=3, out=tmp_path / "proj", settings={**SETTINGS, "workload": "list-append"})
    assert not (tmp_path / "proj").exists()


def test_broken_spec_unbuilt_sut_and_used_out_dir(spec, tmp_path):
    (tmp_path / "bad.toml").write_text('name = "x"\n[start]\ncommand = "not a list"\n')
    with pytest.raises(MalloryError, match="bad.toml"):
        write(tmp_path / "bad.toml", tmp_path / "p1")
    (spec.parent / "bin" / "server").unlink()
    with pytest.raises(MalloryError, match="build it first"):
        write(spec, tmp_path / "p2")
    used = tmp_path / "p3"
    used.mkdir()
    (used / "x").write_text("")
    with pytest.raises(MalloryError, match="not an empty directory"):
        write(spec, used)


def test_cli_reports_errors_without_traceback(tmp_path):
    result = subprocess.run([sys.executable, "-m", "mallory.cli", "compose", "--sut", str(tmp_path / "none.toml"),
                             "--out", str(tmp_path / "p")], capture_output=True, text=True)
    assert result.returncode != 0
    assert "none.toml" in result.stderr and "Traceback" not in result.stderr
    result = subprocess.run([sys.executable, "-m", "mallory.cli", "campaign", "status", str(tmp_path)],
                            capture_output=True, text=True)
    assert result.returncode != 0 and "no docker-compose.yml" in result.stderr and "Traceback" not in result.stderr


def test_the_example_sut_project_is_valid_for_docker_compose(tmp_path):
    """docker-compose itself accepts the project (and the .env interpolation)."""
    make_with_mallory_cc(REPO / "suts/example", None, "the example SUT")  # a no-op when up to date
    out = tmp_path / "ex"
    generate(sut=REPO / "suts/example/example.toml", nodes=3, out=out, settings=SETTINGS)
    result = subprocess.run(["docker-compose", "--project-directory", str(out), "-f", str(out / "docker-compose.yml"),
                             "config"], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    resolved = yaml.safe_load(result.stdout)
    assert "/var/run/docker.sock" in str(resolved["services"]["mediator"]["volumes"])


def test_fuzz_argv_new_and_resume():
    env = {"MALLORY_CAMPAIGN_DIR": "/campaign", "MALLORY_DURATION": "24h", "MALLORY_SUT": "/opt/sut/s.toml",
           "MALLORY_NODES": "3", "MALLORY_POLICY": "random", "MALLORY_SEED": "4", "MALLORY_WORKLOAD": "register",
           "MALLORY_FAULTS": "kill", "MALLORY_SCHEDULES": "0", "MALLORY_STEPS": "6"}
    new = fuzz_argv(env, resume=False)
    assert new[:4] == ["fuzz", "--plain", "--duration", "24h"] and "--schedules" not in new
    pairs = dict(zip(new[4::2], new[5::2]))
    assert pairs == {"--backend": "docker", "--out": "/campaign", "--sut": "/opt/sut/s.toml", "--nodes": "3",
                     "--policy": "random", "--seed": "4", "--workload": "register", "--faults": "kill", "--steps": "6"}
    resumed = fuzz_argv({**env, "MALLORY_SCHEDULES": "2"}, resume=True)
    assert resumed == ["fuzz", "--plain", "--duration", "24h", "--schedules", "2", "--resume", "/campaign"]
    with pytest.raises(MalloryError, match="MALLORY_SUT"):
        fuzz_argv({**env, "MALLORY_SUT": ""}, resume=False)


def test_compose_model_sizes():
    assert len(compose_model("p", 1, "10.9", "s.toml", None, 7100)["services"]) == 2
    with pytest.raises(MalloryError):
        compose_model("p", 201, "10.9", "s.toml", None, 7100)


scalars = st.one_of(st.text(max_size=20), st.integers(), st.booleans(), st.floats(allow_nan=False, allow_infinity=False))
documents = st.recursive(
    scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(st.text(min_size=1, max_size=10), inner, max_size=4)),
    max_leaves=20,
)


@given(st.dictionaries(st.text(min_size=1, max_size=10), documents, min_size=1, max_size=5))
def test_to_yaml_round_trips(doc):
    assert yaml.safe_load(to_yaml(doc)) == doc


def test_the_cli_starts_without_pyyaml():
    """The containers' image has no PyYAML and runs `mallory campaign run`: discovering the
    commands must not import it (only writing a compose file does)."""
    code = "import sys; sys.modules['yaml'] = None; from mallory.cli import build_parser; build_parser()"
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
