"""The plugin also builds against LLVM 22 (headers moved, debug records), runs in its `opt`,
and the wrappers build with it (MALLORY_LLVM_CONFIG=llvm-config-22).

CI installs LLVM 22 (.ci/apt/llvm.txt: llvm-22-dev and clang-22, Debian's bookworm-security
backport); a machine without it skips these tests, saying so.
"""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from mallory.instrument import toolchain
from mallory.instrument.annotations import scan_file, write_targets
from mallory.instrument.event_ids import event_id
from mallory.observer.ring import RingReader, create_ring
from mallory.timeline.event import Kind
from tests.unit.instrument.llvm_helpers import code_line_after, copy_sample, run

pytestmark = pytest.mark.skipif(shutil.which("llvm-config-22") is None,
                                reason="llvm-config-22 not installed (apt-get install llvm-22-dev clang-22, "
                                       "as .ci/apt/llvm.txt says)")


def _opt22(tc22: toolchain.Toolchain):
    opt = tc22.bindir / "opt"
    assert opt.exists(), f"LLVM 22 is installed without opt ({opt}): the llvm-22 package is missing"
    return opt


def test_builds_and_instruments_with_llvm22(tmp_path, tc):
    tc22 = toolchain.ensure_built("llvm-config-22")
    assert tc22.major == 22 and tc22.plugin.is_file() and tc22.runtime.is_file()
    opt = _opt22(tc22)
    proj = copy_sample("inline", tmp_path)
    source = proj / "inline.c"
    # Bitcode from clang 14 is read (upgraded) by LLVM 22; the LLVM 22 plugin then runs in opt.
    subprocess.run([str(tc.cc), "-g", "-O0", "-Xclang", "-disable-O0-optnone", "-c", "-emit-llvm",
                    "-o", "inline.bc", "inline.c"], cwd=proj, check=True)
    targets, _ = scan_file(str(source))
    write_targets(str(proj / "targets.tsv"), targets, str(proj))
    env = {**os.environ, "MALLORY_TARGETS": str(proj / "targets.tsv"), "MALLORY_BUILD_ROOT": str(proj)}
    out = subprocess.run([str(opt), f"-load-pass-plugin={tc22.plugin}", "-passes=mallory", "-S",
                          "-o", "-", "inline.bc"], cwd=proj, env=env, check=True, capture_output=True, text=True)
    tick = event_id("inline.c", code_line_after(source, "// INSTRUMENT_FUNC tick"), Kind.FUNC)
    quarter = event_id("inline.c", code_line_after(source, "// INSTRUMENT_BLOCK quarter"), Kind.BLOCK)
    signed = lambda v: v - 2**64 if v >= 2**63 else v  # IR prints i64 constants signed
    calls = [line for line in out.stdout.splitlines() if "call void @__mallory_event" in line]
    assert len(calls) == 2
    assert any(f"i64 {signed(tick)}, i32 1" in c for c in calls)
    assert any(f"i64 {signed(quarter)}, i32 2" in c for c in calls)
    assert 'section "mallory_catalog"' in out.stdout


def test_auto_enum_switches_with_llvm22_debug_records(tmp_path, tc):
    tc22 = toolchain.ensure_built("llvm-config-22")
    opt = _opt22(tc22)
    proj = copy_sample("auto", tmp_path)
    subprocess.run([str(tc.cc), "-g", "-O0", "-c", "-emit-llvm", "-o", "auto.bc", "auto.c"], cwd=proj, check=True)
    env = {**os.environ, "MALLORY_AUTO": "1", "MALLORY_BUILD_ROOT": str(proj)}
    out = subprocess.run([str(opt), f"-load-pass-plugin={tc22.plugin}", "-passes=mallory", "-S", "-o", "-",
                          "auto.bc"], cwd=proj, env=env, check=True, capture_output=True, text=True).stdout
    for label in ("auto:enum-case:role::FOLLOWER", "auto:enum-case:role::LEADER", "auto:error-path:perror"):
        assert label in out


def test_the_wrapper_builds_with_llvm22(tmp_path, build_env, shm_name):
    """mallory-cc with MALLORY_LLVM_CONFIG=llvm-config-22: LLVM 22's clang, the LLVM 22
    plugin and runtime; the binary reports its annotated events."""
    proj = copy_sample("inline", tmp_path)
    env = {**build_env, "MALLORY_LLVM_CONFIG": "llvm-config-22"}
    run(["mallory-cc", "-O2", "-o", "inline", "inline.c"], proj, env)
    comment = run(["readelf", "-p", ".comment", "inline"], proj, env).stdout
    assert "clang version 22" in comment, comment
    source = proj / "inline.c"
    tick = event_id("inline.c", code_line_after(source, "// INSTRUMENT_FUNC tick"), Kind.FUNC)
    create_ring(shm_name, 1 << 12)
    with RingReader(shm_name, node="n1") as reader:
        run([str(proj / "inline")], proj, {**env, "MALLORY_SHM": shm_name})
        events = reader.poll_events()
    assert [e.id for e in events].count(tick) == 10  # tick runs 10 times, even inlined at -O2
