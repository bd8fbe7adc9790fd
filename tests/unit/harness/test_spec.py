"""SUT spec validation: good specs load, broken ones name the file and the field."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from mallory import paths
from mallory.harness.spec import NodeContext, SpecError, expand, load_spec, parse_spec

GOOD = """
name = "redis"

[start]
command = ["redis-server", "--bind", "{address}", "--port", "{port}", "--dir", "{data_dir}", "--x", "{port_peer}"]
env = { NODE_NAME = "{node}" }

[ports]
client = 6379
peer = 16379

[logs]
files = ["{data_dir}/extra.log"]

[stop]
signal = "INT"
timeout = 3

[ready]
probe = "log"
pattern = "Ready to accept"
timeout = 5

[client]
kind = "redis"

[leader]
pattern = 'became leader at term (?P<term>\\d+)'
"""


def test_good_spec_loads_with_its_values() -> None:
    spec = parse_spec(GOOD, "good.toml")
    assert spec.name == "redis"
    assert spec.ports == {"client": 6379, "peer": 16379}
    assert spec.stop_signal == signal.SIGINT
    assert spec.stop_timeout == 3.0
    assert spec.ready.probe == "log" and spec.ready.pattern == "Ready to accept"
    assert spec.client is not None and spec.client.kind == "redis"
    assert spec.leader_line == r"became leader at term (?P<term>\d+)"
    ctx = NodeContext("n2", 2, "10.0.0.2", spec.ports, "10.0.0.1:16379", "n1,n2", "/d/n2", "/l/n2")
    assert [expand(a, ctx) for a in spec.command] == [
        "redis-server", "--bind", "10.0.0.2", "--port", "6379", "--dir", "/d/n2", "--x", "16379",
    ]  # fmt: skip
    assert expand(spec.env["NODE_NAME"], ctx) == "n2"


def test_load_spec_reads_a_file(tmp_path: Path) -> None:
    path = tmp_path / "sut.toml"
    path.write_text(GOOD)
    assert load_spec(path).source == str(path)


def test_missing_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="nope.toml"):
        load_spec(tmp_path / "nope.toml")


def _replace(old: str, new: str) -> str:
    assert old in GOOD
    return GOOD.replace(old, new, 1)


LOG_BUG = """
[[log_bugs]]
name = "entry-conflict"
pattern = 'committed (?P<index>\\d+) conflicts'
"""

BROKEN = [
    (_replace('name = "redis"', 'name = ""'), r"name: required"),
    (_replace('name = "redis"', ""), r"name: required"),
    (_replace("client = 6379", "client = 70000"), r"ports\.client: must be an integer port"),
    (_replace("client = 6379\n", ""), r"ports\.client: required"),
    (_replace('"--dir", "{data_dir}"', '"--dir", "{datadir}"'), r"start\.command\[6\]: unknown placeholder \{datadir\}"),
    (_replace('"--x", "{port_peer}"', '"--x", "{port_raft}"'), r"start\.command\[8\]: unknown placeholder"),
    (_replace('"--port", "{port}"', '"--port", "{port"'), r"start\.command\[4\]: bad placeholder syntax"),
    (_replace('command = ["redis-server"', 'command = ["redis-server", 3'), r"start\.command: must be a non-empty list"),
    (_replace('NODE_NAME = "{node}"', 'NODE_NAME = "{nod}"'), r"start\.env\.NODE_NAME: unknown placeholder"),
    (_replace('files = ["{data_dir}/extra.log"]', 'files = "x.log"'), r"logs\.files: must be a list"),
    (_replace('signal = "INT"', 'signal = "SIGNOPE"'), r"stop\.signal: not a signal"),
    (_replace("timeout = 3", "timeout = -1"), r"stop\.timeout: must be a positive number"),
    (_replace('probe = "log"', 'probe = "http"'), r"ready\.probe: must be one of tcp, command, log"),
    (_replace('pattern = "Ready to accept"', ""), r"ready\.pattern: required"),
    (_replace('pattern = "Ready to accept"', 'pattern = "Ready ("'), r"ready\.pattern: not a valid regex"),
    (_replace('probe = "log"', 'probe = "command"'), r"ready\.command: required"),
    (_replace('probe = "log"', 'probe = "tcp"\nport = "admin"'), r"ready\.port: names no port"),
    (_replace('kind = "redis"', "kind = 3"), r"client\.kind: required: the name of a client"),
    (_replace("[client]", "[clients]"), r"clients: unknown field"),
    (_replace("timeout = 5", "timout = 5"), r"ready\.timout: unknown field"),
    (GOOD + "\n[ports\n", r"not valid TOML"),
    (_replace("(?P<term>", "("), r"leader\.pattern: needs a group \(\?P<term>"),
    (_replace("(?P<term>\\d+)", "(?P<term>"), r"leader\.pattern: not a valid regex"),
    (GOOD + "\n[rounds]\nlength = 0\n", r"rounds\.length: must be a number of seconds in \(0, 3600\], not 0"),
    (GOOD + "\n[rounds]\nlength = \"300ms\"\n", r"rounds\.length: must be a number of seconds"),
    (GOOD + "\n[rounds]\nlength = nan\n", r"rounds\.length: must be a number of seconds"),
    (GOOD + "\n[rounds]\nperiod = 0.3\n", r"rounds\.period: unknown field \(known: length\)"),
    (GOOD + LOG_BUG.replace("committed (?P<index>", "committed (?P<index"), r"log_bugs\[0\]\.pattern: not a valid regex"),
    (GOOD + LOG_BUG.replace('name = "entry-conflict"\n', ""), r"log_bugs\[0\]\.name: required"),
    (GOOD + LOG_BUG.replace("entry-conflict", "entry conflict"), r"log_bugs\[0\]\.name: required: the bug's name"),
    (GOOD + LOG_BUG.replace("pattern = ", "regex = "), r"log_bugs\[0\]\.regex: unknown field \(known: name, pattern\)"),
    (GOOD + LOG_BUG.replace("\\d+) conflicts", "\\d+)? conflicts|"), r"log_bugs\[0\]\.pattern: matches the empty string"),
    ("log_bugs = 'shutdown'\n" + GOOD, r"log_bugs: must be a list of tables"),
]


@pytest.mark.parametrize("text, message", BROKEN)
def test_broken_spec_is_rejected_naming_file_and_field(text: str, message: str) -> None:
    with pytest.raises(SpecError, match=message) as excinfo:
        parse_spec(text, "suts/broken.toml")
    assert str(excinfo.value).startswith("suts/broken.toml: ")


def test_spec_error_is_a_mallory_error() -> None:
    """A MalloryError: the CLI prints its message and exits BAD_INPUT, no traceback."""
    from mallory.errors import MalloryError

    with pytest.raises(MalloryError, match="x.toml"):
        parse_spec("name = 1", "x.toml")


def test_the_shipped_example_specs_load() -> None:
    specs = sorted(p for p in paths.SUTS.glob("*/*.toml") if p.name != "waypoints.toml")
    assert specs
    for path in specs:
        spec = load_spec(path)
        assert spec.client is not None and spec.ready.timeout > 0


def test_log_bugs_load_in_order_and_reach_the_adapter() -> None:
    from mallory.harness.spec_adapter import SpecAdapter

    class Backend:
        nodes = ["n1"]

    second = LOG_BUG.replace("entry-conflict", "second").replace("committed", "(?i)COMMITTED")
    spec = parse_spec(GOOD + LOG_BUG + second, "x.toml")
    assert [(p.name, p.pattern) for p in spec.log_bugs] == [
        ("entry-conflict", r"committed (?P<index>\d+) conflicts"), ("second", r"(?i)COMMITTED (?P<index>\d+) conflicts"),
    ]  # fmt: skip
    assert SpecAdapter(spec, Backend(), clients={"redis": object}).log_bugs == spec.log_bugs
    assert parse_spec(GOOD, "x.toml").log_bugs == ()


def test_a_spec_without_a_leader_line_has_none() -> None:
    assert parse_spec(GOOD.split("[leader]")[0], "x.toml").leader_line == ""


def test_a_round_length_reaches_the_adapter_and_a_spec_without_one_takes_the_default() -> None:
    from mallory.harness.adapter import DEFAULT_ROUND_S
    from mallory.harness.spec_adapter import SpecAdapter

    class Backend:
        nodes = ["n1", "n2"]

    spec = parse_spec(GOOD + "\n[rounds]\nlength = 0.3\n", "x.toml")
    assert spec.round_s == 0.3 and parse_spec(GOOD, "x.toml").round_s is None
    assert SpecAdapter(spec, Backend(), clients={"redis": object}).round_s == 0.3
    assert SpecAdapter(parse_spec(GOOD, "x.toml"), Backend(), clients={"redis": object}).round_s == DEFAULT_ROUND_S
    assert load_spec(paths.SUTS / "example" / "example-bugs.toml").round_s == 0.3  # its election timeout
