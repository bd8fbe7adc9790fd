"""The plugin also builds against LLVM 22 when it is installed (headers moved, debug records)."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from mallory.instrument import toolchain
from mallory.instrument.annotations import scan_file, write_targets
from mallory.instrument.event_ids import event_id
from mallory.timeline.event import Kind
from tests.unit.instrument.llvm_helpers import code_line_after, copy_sample

pytestmark = pytest.mark.skipif(shutil.which("llvm-config-22") is None, reason="llvm-config-22 not installed")


def test_builds_and_instruments_with_llvm22(tmp_path, tc):
    tc22 = toolchain.ensure_built("llvm-config-22")
    assert tc22.major == 22 and tc22.plugin.is_file() and tc22.runtime.is_file()
    opt = tc22.bindir / "opt"
    if not opt.exists():
        pytest.skip("LLVM 22 has no opt to load the plugin into")
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
    opt = tc22.bindir / "opt"
    if not opt.exists():
        pytest.skip("LLVM 22 has no opt to load the plugin into")
    proj = copy_sample("auto", tmp_path)
    subprocess.run([str(tc.cc), "-g", "-O0", "-c", "-emit-llvm", "-o", "auto.bc", "auto.c"], cwd=proj, check=True)
    env = {**os.environ, "MALLORY_AUTO": "1", "MALLORY_BUILD_ROOT": str(proj)}
    out = subprocess.run([str(opt), f"-load-pass-plugin={tc22.plugin}", "-passes=mallory", "-S", "-o", "-",
                          "auto.bc"], cwd=proj, env=env, check=True, capture_output=True, text=True).stdout
    for label in ("auto:enum-case:role::FOLLOWER", "auto:enum-case:role::LEADER", "auto:error-path:perror"):
        assert label in out
