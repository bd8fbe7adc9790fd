"""`mallory workload` end to end on loopback, and its user errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from mallory.cli import main
from mallory.history.ops import read_history
from tests.live.redis.redis_cluster import (
    check_process_semantics,
    free_port,
    redis_spec_text,
)

pytestmark = pytest.mark.timeout(120)


def test_workload_command_records_a_history_from_a_spec(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = tmp_path / "redis.toml"
    spec.write_text(redis_spec_text(free_port(["127.0.0.1", "127.0.0.2"])))
    out = tmp_path / "run"
    code = main([
        "workload", "--sut", str(spec), "--nodes", "2", "--workload", "rw-register",
        "--time-limit", "1.5", "--rate", "200", "--key-count", "3", "--out", str(out),
    ])  # fmt: skip
    assert code == 0
    printed = capsys.readouterr().out
    assert "rw-register on redis (loopback, 2 nodes)" in printed
    _, history = read_history(out / "history.edn")
    _, history_json = read_history(out / "history.jsonl")
    assert len(history) == len(history_json) > 100
    counts = check_process_semantics(history)
    assert counts["ok"] > 50
    assert all(m[0] in ("w", "r") for op in history for m in op.value)


def test_workload_command_rejects_a_broken_spec(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = tmp_path / "broken.toml"
    spec.write_text(redis_spec_text(6379).replace('"{data_dir}"', '"{datadir}"'))
    code = main(["workload", "--sut", str(spec), "--out", str(tmp_path / "run")])
    err = capsys.readouterr().err
    assert code == 254
    assert str(spec) in err and "start.command[6]" in err and "{datadir}" in err
    assert not (tmp_path / "run").exists()


def test_workload_command_keeps_an_existing_history(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "run"
    out.mkdir()
    (out / "history.edn").write_text("{:type :invoke}\n")
    code = main(["workload", "--sut", "no-such-spec.toml", "--out", str(out)])
    assert code == 254
    assert "history.edn exists" in capsys.readouterr().err
    assert (out / "history.edn").read_text() == "{:type :invoke}\n"


def test_workload_command_rejects_options_that_do_not_apply(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["workload", "--sut", "redis-replication", "--workload", "register", "--key-distribution", "uniform",
                 "--out", str(tmp_path)])  # fmt: skip
    assert code == 254
    assert "--key-distribution" in capsys.readouterr().err


class FakeAdapter:
    """Just enough of an adapter for choosing client nodes: it cannot name primaries."""

    def __init__(self) -> None:
        self.backend = type("FakeBackend", (), {"nodes": ("n1", "n2", "n3")})()


class FakePrimariesAdapter(FakeAdapter):
    """... and this one can (`HasPrimaries`)."""

    def __init__(self, primaries: list[str]) -> None:
        super().__init__()
        self._primaries = primaries

    def primaries(self) -> list[str]:
        return self._primaries


def test_clients_go_to_the_primary_when_known_else_round_robin() -> None:
    from mallory.harness.session import client_node_for

    assert [client_node_for(FakeAdapter())(w) for w in range(5)] == ["n1", "n2", "n3", "n1", "n2"]
    assert [client_node_for(FakePrimariesAdapter(["n2"]))(w) for w in range(3)] == ["n2"] * 3
    assert [client_node_for(FakePrimariesAdapter([]))(w) for w in range(2)] == ["n1", "n2"]  # none known: spread
