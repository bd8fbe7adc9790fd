"""--auto finds error paths and enum switch cases without annotations; edge coverage bitmap."""

from __future__ import annotations

import uuid

import numpy as np
import pytest

from mallory.instrument.catalogue import Catalogue, catalogue_path
from mallory.instrument.event_ids import event_id
from mallory.observer.coverage import (
    MAP_SIZE,
    create_coverage_map,
    new_edges,
    read_coverage,
    reset_coverage,
    unlink_coverage_map,
)
from mallory.observer.ring import RingReader, create_ring
from mallory.timeline.event import Kind
from tests.unit.instrument.llvm_helpers import copy_sample, run


def line_of(path, text: str) -> int:
    lines = path.read_text().splitlines()
    return next(i for i, line in enumerate(lines, start=1) if text in line)


def test_auto_finds_error_path_enum_cases_and_named_functions(tmp_path, build_env, shm_name):
    proj = copy_sample("auto", tmp_path)
    env = {**build_env, "MALLORY_AUTO": "1", "MALLORY_AUTO_FUNCS": "^handle_"}
    run(["mallory-cc", "-O1", "-o", "auto", "auto.c"], proj, env)
    catalogue = Catalogue.load(catalogue_path(proj / "auto"))
    by_label = {e.label: e for e in catalogue}
    src = proj / "auto.c"

    error = by_label["auto:error-path:perror"]
    assert (error.file, error.line, error.function) == ("auto.c", line_of(src, 'perror("open config")'), "load_config")
    assert error.id == event_id("auto.c", error.line, Kind.BLOCK)
    for name, text in (("FOLLOWER", "return 1;"), ("CANDIDATE", "return 2;"), ("LEADER", "return 3;")):
        case = by_label[f"auto:enum-case:role::{name}"]
        assert (case.line, case.function, case.kind) == (line_of(src, text), "step", "BLOCK")
    vote = by_label["auto:func"]
    assert (vote.function, vote.kind, vote.line) == ("handle_vote", "FUNC", line_of(src, "int handle_vote"))
    assert "auto:error-path:exit" not in by_label  # one point per block: perror comes first

    create_ring(shm_name, 64)
    with RingReader(shm_name) as reader:
        run([str(proj / "auto"), "2"], proj, {**build_env, "MALLORY_SHM": shm_name})
        names = sorted(catalogue.name(e.id) for e in reader.poll_events())
        assert names == ["auto:enum-case:role::LEADER", "auto:func"]
        result = run([str(proj / "auto"), "0", str(proj / "missing.conf")], proj,
                     {**build_env, "MALLORY_SHM": shm_name}, check=False)
        assert result.returncode == 3
        names = sorted(catalogue.name(e.id) for e in reader.poll_events())
        assert names == ["auto:enum-case:role::FOLLOWER", "auto:error-path:perror", "auto:func"]


def test_without_auto_nothing_is_instrumented_and_the_switch_turns_it_on(tmp_path, build_env):
    proj = copy_sample("auto", tmp_path)
    run(["mallory-cc", "-O1", "-o", "auto", "auto.c"], proj, build_env)
    assert not (proj / "auto.mallory.json").exists()
    run(["mallory-cc", "--auto", "-O1", "-o", "auto", "auto.c"], proj, build_env)
    labels = {e.label for e in Catalogue.load(catalogue_path(proj / "auto"))}
    assert "auto:error-path:perror" in labels and "auto:enum-case:role::LEADER" in labels


@pytest.fixture
def cov_name():
    name = f"mallory-test-cov-{uuid.uuid4().hex[:10]}"
    create_coverage_map(name)
    yield name
    unlink_coverage_map(name)


def test_edge_coverage_bitmap_tells_inputs_apart(tmp_path, build_env, cov_name):
    proj = copy_sample("auto", tmp_path)
    run(["mallory-cc", "-O0", "-o", "auto", "auto.c"], proj, {**build_env, "MALLORY_COV": "1"})
    env = {**build_env, "MALLORY_COV_SHM": cov_name}
    virgin = np.zeros(MAP_SIZE, np.uint8)
    maps = {}
    for role in ("0", "2", "2"):
        reset_coverage(cov_name)
        run([str(proj / "auto"), role], proj, env)
        maps.setdefault(role, []).append(read_coverage(cov_name))
    assert np.count_nonzero(maps["0"][0]) > 5
    assert (maps["2"][0] == maps["2"][1]).all()  # deterministic
    assert not (maps["0"][0] == maps["2"][0]).all()
    assert new_edges(maps["0"][0], virgin) > 0
    assert new_edges(maps["2"][0], virgin) > 0  # the LEADER case is a new edge
    assert new_edges(maps["2"][1], virgin) == 0
    # Without the segment the program still runs and prints the same.
    assert run([str(proj / "auto"), "1"], proj, build_env).stdout == "step 2 vote 2\n"
