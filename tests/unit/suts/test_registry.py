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
from mallory.suts.registry import BUILTIN_SUTS, SPEC_CLIENTS, make_adapter, resolve_sut

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
