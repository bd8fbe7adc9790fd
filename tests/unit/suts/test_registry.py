"""The SUT registry: built-ins by name, specs checked before any cluster comes up, and the
client kinds a spec may name."""

from __future__ import annotations

from pathlib import Path

import pytest

from mallory import paths
from mallory.cluster.loopback import LoopbackBackend
from mallory.errors import MalloryError
from mallory.harness.line_client import LineClient
from mallory.harness.spec import load_spec
from mallory.harness.spec_adapter import SpecAdapter
from mallory.suts.registry import (
    BUILTIN_SUTS,
    SPEC_CLIENTS,
    check_workload,
    make_adapter,
    resolve_sut,
    sut_programs,
    sut_workloads,
)

EXAMPLE = paths.SUTS / "example" / "example.toml"


def _spec_with_client(tmp_path: Path, kind: str) -> Path:
    text = EXAMPLE.read_text()
    assert 'kind = "line"' in text, "the example spec's client changed: update this test"
    path = tmp_path / "sut.toml"
    path.write_text(text.replace('kind = "line"', f'kind = "{kind}"'))
    return path


def test_builtins_resolve_to_their_names_and_specs_to_absolute_paths(tmp_path: Path, monkeypatch) -> None:
    assert set(BUILTIN_SUTS) == {"redis-replication", "redis-sentinel", "raft-kv", "etcd", "pysyncobj"}
    for name in BUILTIN_SUTS:
        assert resolve_sut(name) == name
    monkeypatch.chdir(EXAMPLE.parent)
    assert resolve_sut("example.toml") == str(EXAMPLE)


def test_a_missing_spec_is_refused_naming_the_built_ins(tmp_path: Path) -> None:
    with pytest.raises(MalloryError, match=r"no such spec file \(built-ins: redis-replication"):
        resolve_sut(str(tmp_path / "missing.toml"))


def test_a_spec_naming_an_unknown_client_kind_is_refused_before_anything_starts(tmp_path: Path) -> None:
    path = _spec_with_client(tmp_path, "etcd")
    with pytest.raises(MalloryError, match=r"client\.kind 'etcd' is not a known client \(known: line, redis\)"):
        resolve_sut(str(path))
    with LoopbackBackend(1, tmp_path / "run") as backend:
        with pytest.raises(MalloryError, match=r"client\.kind 'etcd' is not a known client"):
            make_adapter(str(path), backend)
        # the generic harness alone knows only the line protocol
        with pytest.raises(MalloryError, match=r"client\.kind 'redis' is not a known client \(known: line\)"):
            SpecAdapter(load_spec(_spec_with_client(tmp_path, "redis")), backend)


def test_a_spec_adapter_makes_its_clients_from_the_kinds_it_was_given(tmp_path: Path) -> None:
    assert SPEC_CLIENTS["line"] is LineClient
    with LoopbackBackend(1, tmp_path / "run") as backend:
        adapter = make_adapter(str(_spec_with_client(tmp_path, "redis")), backend)
        assert adapter.clients == SPEC_CLIENTS


def test_a_workload_the_sut_cannot_run_is_refused_naming_those_it_can(tmp_path: Path) -> None:
    assert sut_workloads(str(EXAMPLE)) == ("register",)
    assert sut_workloads("raft-kv") == ("register", "list-append", "rw-register")
    check_workload(str(EXAMPLE), "register")
    check_workload(str(EXAMPLE), "none")
    with pytest.raises(MalloryError, match=r"cannot run the list-append workload: its clients run register; "
                                           r"choose with --workload \(register or none\)"):
        check_workload(str(EXAMPLE), "list-append")
    clientless = tmp_path / "clientless.toml"
    clientless.write_text('name = "c"\n[start]\ncommand = ["true"]\n[ports]\nclient = 7000\n')
    check_workload(str(clientless), "none")
    with pytest.raises(MalloryError, match=r"it has no client .*\(none\)"):
        check_workload(str(clientless), "register")


def test_the_programs_of_instrumented_suts_are_found_without_building(tmp_path: Path, monkeypatch) -> None:
    """A spec's program; raft-kv's and pysyncobj's shipped specs' programs; every finished
    build of redis-sentinel (each has its own event ids); nothing for Debian's programs."""
    import mallory.suts.redis.build as redis_build

    assert sut_programs(str(EXAMPLE)) == [EXAMPLE.parent / "build" / "example-sut"]
    assert sut_programs("raft-kv") == [paths.SUTS / "raft" / "build" / "raft-kv"]
    assert sut_programs("pysyncobj") == [paths.SUTS / "pysyncobj" / "kv-node"]
    assert sut_programs("etcd") == sut_programs("redis-replication") == []
    assert sut_programs(str(tmp_path / "gone.toml")) == []
    monkeypatch.setattr(redis_build, "BUILDS", tmp_path / "redis")
    assert sut_programs("redis-sentinel") == []
    for build in ("7.0-aaa", "7.0-bbb", "7.0-ccc"):
        (tmp_path / "redis" / build / "bin").mkdir(parents=True)
    (tmp_path / "redis" / "7.0-aaa" / ".done").touch()
    (tmp_path / "redis" / "7.0-ccc" / ".done").touch()  # 7.0-bbb: unfinished
    assert sut_programs("redis-sentinel") == [tmp_path / "redis" / b / "bin" / "redis-server" for b in ("7.0-aaa", "7.0-ccc")]
