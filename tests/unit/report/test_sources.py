"""The report finds the annotation catalogue of a campaign's SUT: a spec's program's, and a
built-in's too (the demo's redis-sentinel), through the SUT registry."""

from __future__ import annotations

from pathlib import Path

import mallory.suts.redis.build as redis_build
from mallory.instrument.catalogue import Catalogue, CodeEvent
from mallory.report.sources import sut_catalogue


def test_a_builtin_suts_builds_name_its_events(tmp_path: Path, monkeypatch) -> None:
    """Every finished build of redis-sentinel has its own ids: the campaign's events are
    named whichever build ran it."""
    monkeypatch.setattr(redis_build, "BUILDS", tmp_path)
    assert sut_catalogue("redis-sentinel") is None
    for build, event in (("a", CodeEvent(1, "build/redis/a/src/server.c", 7, "f", "FUNC", "role-change")),
                         ("b", CodeEvent(2, "build/redis/b/src/server.c", 7, "f", "FUNC", "role-change"))):
        (tmp_path / build / "bin").mkdir(parents=True)
        Catalogue([event]).write(tmp_path / build / "bin" / "redis-server.mallory.json")
        (tmp_path / build / ".done").touch()
    catalogue = sut_catalogue("redis-sentinel")
    assert catalogue is not None and {e.id: e.name for e in catalogue} == {1: "role-change", 2: "role-change"}


def test_a_specs_program_names_its_events_and_an_unknown_sut_names_none(tmp_path: Path) -> None:
    (tmp_path / "bin").mkdir()
    Catalogue([CodeEvent(3, "s.c", 1, "g", "BLOCK", "commit")]).write(tmp_path / "bin" / "server.mallory.json")
    spec = tmp_path / "s.toml"
    spec.write_text('name = "s"\n[start]\ncommand = ["bin/server"]\n[ports]\nclient = 7000\n')
    assert {e.id: e.name for e in sut_catalogue(str(spec))} == {3: "commit"}
    assert sut_catalogue(None) is None and sut_catalogue("etcd") is None and sut_catalogue(str(tmp_path / "x.toml")) is None
