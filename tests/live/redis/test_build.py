"""The annotated Redis build: the patch only adds annotation comments, every annotation
lands in the binary's catalogue, and the build is cached."""

from __future__ import annotations

import re
from pathlib import Path

from mallory.instrument.catalogue import Catalogue, catalogue_path
from mallory.suts.redis.build import BUILD_SCRIPT, ensure_redis_built

PATCH = BUILD_SCRIPT.parent / "annotations.patch"
ANNOTATION = re.compile(r"^\s*// INSTRUMENT_(FUNC|BLOCK) ([a-z0-9-]+)$")


def patch_labels() -> set[str]:
    labels = set()
    for line in PATCH.read_text().splitlines():
        if line.startswith("+") and not line.startswith("+++"):
            m = ANNOTATION.match(line[1:])
            assert m, f"annotations.patch adds a line that is not an annotation: {line!r}"
            labels.add(m.group(2))
        assert not (line.startswith("-") and not line.startswith("---")), f"the patch removes {line!r}"
    return labels


def test_the_patch_only_adds_annotation_comments() -> None:
    labels = patch_labels()
    assert len(labels) >= 40
    # the events the failover story is told with
    for label in ("role-become-master", "role-become-replica", "replica-psync-continue", "replica-psync-fullresync",
                  "repl-backlog-trim", "sentinel-sdown", "sentinel-odown", "sentinel-elected-leader",
                  "sentinel-failover-start", "sentinel-promoted-replica", "sentinel-config-epoch-update"):
        assert label in labels, label


def test_every_annotation_is_in_the_catalogue_and_the_build_is_cached(redis_build: Path) -> None:
    catalogue = Catalogue.load(catalogue_path(redis_build / "bin" / "redis-server"))
    names = {catalogue.name(event.id) for event in catalogue}
    assert names == patch_labels()
    assert (redis_build / "bin" / "redis-sentinel").resolve() == (redis_build / "bin" / "redis-server").resolve()
    built = {p: p.stat().st_mtime_ns for p in (redis_build / ".done", redis_build / "bin" / "redis-server")}
    assert ensure_redis_built() == redis_build
    assert {p: p.stat().st_mtime_ns for p in built} == built  # cached: nothing rebuilt or copied again
