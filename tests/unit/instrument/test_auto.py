"""--auto finds error paths and enum switch cases without annotations."""

from __future__ import annotations

from mallory.instrument.catalogue import Catalogue, catalogue_path
from mallory.instrument.event_ids import event_id
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
