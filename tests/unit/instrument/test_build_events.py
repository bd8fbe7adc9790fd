"""Annotated C and C++ programs built with the wrappers report exactly the events they ran."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from mallory.instrument.catalogue import Catalogue, catalogue_path
from mallory.instrument.event_ids import event_id
from mallory.observer.ring import RingReader, create_ring
from mallory.timeline.event import Kind
from tests.unit.instrument.llvm_helpers import code_line_after, copy_sample, run


def read_run(binary: Path, args: list[str], shm: str, env: dict[str, str], node: str = "n1"):
    """Run `binary` with a fresh ring and return (stdout, events)."""
    create_ring(shm, 1 << 12)
    with RingReader(shm, node=node) as reader:
        result = run([str(binary), *args], binary.parent, {**env, "MALLORY_SHM": shm})
        events = reader.poll_events()
        assert reader.lost_total == 0
    return result.stdout, events


@pytest.mark.parametrize("opt", ["-O0", "-O1", "-O2"])
def test_c_program_via_make_reports_exact_events(tmp_path, build_env, shm_name, opt):
    proj = copy_sample("basic", tmp_path)
    run(["make", "CC=mallory-cc", f"CFLAGS={opt}"], proj, build_env)
    snap = code_line_after(proj / "main.c", "// INSTRUMENT_FUNC snapshot-taken")
    rollback = code_line_after(proj / "main.c", "// INSTRUMENT_BLOCK rollback")
    odd = code_line_after(proj / "counter.h", "// INSTRUMENT_BB odd-bump")
    add = code_line_after(proj / "counter.c", "// INSTRUMENT_FUNC")
    ids = {
        "snap": event_id("main.c", snap, Kind.FUNC),
        "rollback": event_id("main.c", rollback, Kind.BLOCK),
        "odd": event_id("counter.h", odd, Kind.BLOCK),
        "add": event_id("counter.c", add, Kind.FUNC),
    }
    n = 7
    stdout, events = read_run(proj / "basic", [str(n)], shm_name, build_env)
    assert stdout.splitlines()[-1] == "rollbacks 3 total 9"

    expected = []
    for i in range(n):
        expected.append(("snap", Kind.FUNC))
        if i % 3 == 0:
            expected.append(("rollback", Kind.BLOCK))
        if i % 2 == 1:
            expected += [("odd", Kind.BLOCK), ("add", Kind.FUNC)]
    assert [(e.id, e.kind) for e in events] == [(ids[name], kind) for name, kind in expected]
    assert all(e.node == "n1" for e in events)
    ts = [e.ts for e in events]
    assert ts == sorted(ts) and ts[0] > 0

    catalogue = Catalogue.load(catalogue_path(proj / "basic"))
    assert len(catalogue) == 4
    entry = catalogue.get(ids["snap"])
    assert (entry.file, entry.line, entry.function, entry.kind, entry.label) == (
        "main.c", snap, "take_snapshot", "FUNC", "snapshot-taken")
    entry = catalogue.get(ids["rollback"])
    assert (entry.file, entry.line, entry.function, entry.kind, entry.label) == (
        "main.c", rollback, "main", "BLOCK", "rollback")
    entry = catalogue.get(ids["odd"])
    assert (entry.file, entry.line, entry.function, entry.label) == ("counter.h", odd, "bump", "odd-bump")
    entry = catalogue.get(ids["add"])
    assert (entry.name, entry.location) == (f"counter_add@counter.c:{add}", f"counter.c:{add}")
    assert catalogue.name(ids["rollback"]) == "rollback"


def test_cxx_program_methods_and_template_instances(tmp_path, build_env, shm_name):
    proj = copy_sample("cxx", tmp_path)
    run(["make", "CXX=mallory-c++"], proj, build_env)
    src = proj / "raft.cpp"
    elected = event_id("raft.cpp", code_line_after(src, "// INSTRUMENT_FUNC leader-elected"), Kind.FUNC)
    summed = event_id("raft.cpp", code_line_after(src, "// INSTRUMENT_FUNC summed"), Kind.FUNC)
    add_one = event_id("raft.cpp", code_line_after(src, "// INSTRUMENT_BLOCK add-one"), Kind.BLOCK)
    stdout, events = read_run(proj / "raft", ["4"], shm_name, build_env)
    assert stdout.strip() == "term 3 ints 6 doubles 2.0"
    ids = [e.id for e in events]
    # 4 elections, then two template instances (evaluation order of printf args is unspecified).
    assert ids[:4] == [elected] * 4
    rest = ids[4:]
    assert rest.count(summed) == 2 and rest.count(add_one) == 5 and len(rest) == 7
    catalogue = Catalogue.load(catalogue_path(proj / "raft"))
    assert catalogue.get(elected).function == "Node::become_leader(int)"
    assert "total" in catalogue.get(summed).function
    assert catalogue.name(add_one) == "add-one"


def test_configure_style_project(tmp_path, build_env, shm_name):
    proj = copy_sample("configure_proj", tmp_path)
    configured = run(["./configure", "CC=mallory-cc"], proj, build_env)
    assert "checking whether the C compiler works... yes" in configured.stdout
    assert "checking how to run the C preprocessor... mallory-cc -E" in configured.stdout
    run(["make"], proj, build_env)
    request = event_id("src/server.c", code_line_after(proj / "src/server.c", "// INSTRUMENT_FUNC request"), Kind.FUNC)
    committed = event_id("src/store.c", code_line_after(proj / "src/store.c", "// INSTRUMENT_BLOCK committed"),
                         Kind.BLOCK)
    stdout, events = read_run(proj / "src" / "server", [], shm_name, build_env)
    assert stdout.strip() == "acc 3"
    # keys -2..2: every call is a request; keys >= 0 commit.
    expected = []
    for k in range(-2, 3):
        expected.append(request)
        if k >= 0:
            expected.append(committed)
    assert [e.id for e in events] == expected
    catalogue = Catalogue.load(catalogue_path(proj / "src" / "server"))  # store.o came through libstore.a
    assert {e.label for e in catalogue} == {"request", "committed"}


def test_two_clean_builds_write_identical_catalogues(tmp_path, build_env):
    first = copy_sample("basic", tmp_path / "one")
    second = copy_sample("basic", tmp_path / "two")
    run(["make", "CC=mallory-cc"], first, build_env)
    run(["make", "-j2", "CC=mallory-cc"], second, build_env)
    one = catalogue_path(first / "basic")
    two = catalogue_path(second / "basic")
    assert Path(one).read_bytes() == Path(two).read_bytes()
    assert len(Catalogue.load(one)) == 4
    run(["make", "clean"], second, build_env)
    run(["make", "-j2", "CC=mallory-cc"], second, build_env)
    assert Path(two).read_bytes() == Path(one).read_bytes()


def test_o2_inlining_keeps_every_event(tmp_path, build_env, shm_name):
    proj = copy_sample("inline", tmp_path)
    run(["mallory-cc", "-O2", "-o", "inline", "inline.c"], proj, build_env)
    symbols = run(["nm", "inline"], proj, build_env).stdout
    assert " tick" not in symbols, "tick() was expected to be inlined at -O2"
    tick = event_id("inline.c", code_line_after(proj / "inline.c", "// INSTRUMENT_FUNC tick"), Kind.FUNC)
    quarter = event_id("inline.c", code_line_after(proj / "inline.c", "// INSTRUMENT_BLOCK quarter"), Kind.BLOCK)
    n = 50
    stdout, events = read_run(proj / "inline", [str(n)], shm_name, build_env)
    expected, s = [], 0
    for _ in range(n):
        expected.append(tick)
        if s % 4 == 0:
            expected.append(quarter)
            s += 2
        s += 1
    assert stdout.strip() == str(s)
    assert [e.id for e in events] == expected


def test_without_ring_output_equals_plain_build(tmp_path, build_env, tc, shm_name):
    proj = copy_sample("basic", tmp_path)
    run(["make", "CC=mallory-cc"], proj, build_env)
    plain = tmp_path / "plain"
    run([str(tc.cc), "-O0", "-o", str(plain), "main.c", "counter.c"], proj, build_env)
    garbage = Path("/dev/shm") / shm_name
    garbage.write_bytes(b"not a ring" * 100)
    reference = run([str(plain), "9"], proj, build_env)
    for extra in ({}, {"MALLORY_SHM": "mallory-test-does-not-exist"}, {"MALLORY_SHM": shm_name}):
        got = run([str(proj / "basic"), "9"], proj, {**build_env, **extra})
        assert (got.returncode, got.stdout, got.stderr) == (reference.returncode, reference.stdout, reference.stderr)


def test_passthrough_invocations_are_unchanged(tmp_path, build_env, tc):
    (tmp_path / "x.c").write_text("// INSTRUMENT_FUNC\nint f(void) { return 1; }\n")
    for args in (["--version"], ["-E", "x.c"], ["-fsyntax-only", "x.c"], ["-dumpversion"]):
        wrapped = run(["mallory-cc", *args], tmp_path, build_env)
        plain = run([str(tc.cc), *args], tmp_path, build_env)
        assert (wrapped.stdout, wrapped.stderr) == (plain.stdout, plain.stderr), args
    run(["mallory-cc", "-c", "x.c", "-o", "x.o"], tmp_path, build_env)
    (tmp_path / "m.c").write_text("int f(void);\nint main(void) { return f() - 1; }\n")
    run(["mallory-cc", "-c", "m.c"], tmp_path, build_env)
    run(["mallory-cc", "x.o", "m.o", "-o", "linked"], tmp_path, build_env)  # link-only
    assert run([str(tmp_path / "linked")], tmp_path, build_env).returncode == 0
    assert len(Catalogue.load(catalogue_path(tmp_path / "linked"))) == 1


def test_asan_option_builds_with_address_sanitizer(tmp_path, build_env):
    (tmp_path / "overflow.c").write_text(
        "#include <stdlib.h>\n"
        "// INSTRUMENT_FUNC\n"
        "int main(int argc, char **argv) { int *p = malloc(4 * sizeof(int)); int v = p[argc + 4]; free(p); return v; }\n"
    )
    env = {**build_env, "MALLORY_ASAN": "1"}
    run(["mallory-cc", "-O0", "-o", "overflow", "overflow.c"], tmp_path, env)
    result = subprocess.run([str(tmp_path / "overflow")], capture_output=True, text=True, env=build_env)
    assert result.returncode != 0
    assert "ERROR: AddressSanitizer: heap-buffer-overflow" in result.stderr
    assert len(Catalogue.load(catalogue_path(tmp_path / "overflow"))) == 1


@pytest.mark.skipif(shutil.which("cmake") is None, reason="cmake not installed")
def test_cmake_out_of_tree_build(tmp_path, build_env, shm_name):
    proj = copy_sample("cmake_proj", tmp_path)
    run(["cmake", "-S", str(proj), "-B", str(proj / "build"), "-DCMAKE_C_COMPILER=mallory-cc"], proj, build_env)
    run(["cmake", "--build", str(proj / "build"), "-j2"], proj, build_env)
    binary = proj / "build" / "basic"
    catalogue = Catalogue.load(catalogue_path(binary))
    # Compiled from build/, ids are still relative to the source tree.
    assert sorted(e.file for e in catalogue) == ["counter.c", "counter.h", "main.c", "main.c"]
    rollback = event_id("main.c", code_line_after(proj / "main.c", "// INSTRUMENT_BLOCK rollback"), Kind.BLOCK)
    stdout, events = read_run(binary, ["4"], shm_name, build_env)
    assert stdout.splitlines()[-1] == "rollbacks 2 total 4"
    assert [e.id for e in events].count(rollback) == 2
    assert len(events) == 4 + 2 + 2 * 2  # snapshots, rollbacks, (odd-bump, counter_add) for i = 1, 3
