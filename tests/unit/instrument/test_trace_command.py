"""`mallory trace` prints the ring's events with catalogue names."""

from __future__ import annotations

import subprocess
import sys
import time

from mallory.observer.ring import create_ring
from mallory.timeline.codec import decode
from tests.unit.instrument.llvm_helpers import (
    VENV_BIN,
    code_line_after,
    copy_sample,
    run,
)


def test_trace_prints_named_events_live(tmp_path, build_env, shm_name):
    proj = copy_sample("basic", tmp_path)
    run(["make", "CC=mallory-cc"], proj, build_env)
    create_ring(shm_name, 256)
    trace = subprocess.Popen([str(VENV_BIN / "mallory"), "trace", "--shm", shm_name, "--binary", str(proj / "basic"),
                              "--node", "n3", "--from-start", "--count", "4", "--duration", "60"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(0.3)
    run([str(proj / "basic"), "2"], proj, {**build_env, "MALLORY_SHM": shm_name})
    out, err = trace.communicate(timeout=60)
    assert trace.returncode == 0, err
    lines = out.splitlines()
    snap = code_line_after(proj / "main.c", "// INSTRUMENT_FUNC snapshot-taken")
    fields = [line.split() for line in lines]
    # i=0: snapshot, rollback; i=1: snapshot, odd-bump (counter_add follows but --count 4 stops)
    assert [f[3] for f in fields] == ["snapshot-taken", "rollback", "snapshot-taken", "odd-bump"]
    assert [f[1:3] for f in fields] == [["n3", "FUNC"], ["n3", "BLOCK"], ["n3", "FUNC"], ["n3", "BLOCK"]]
    assert fields[0][4:] == [f"main.c:{snap}", "take_snapshot"]
    assert "trace: 4 events shown, 0 lost" in err


def test_trace_json_and_errors(tmp_path, build_env, shm_name):
    proj = copy_sample("inline", tmp_path)
    run(["mallory-cc", "-o", "inline", "inline.c"], proj, build_env)
    create_ring(shm_name, 256)
    run([str(proj / "inline"), "3"], proj, {**build_env, "MALLORY_SHM": shm_name})
    result = run([sys.executable, "-m", "mallory.cli", "trace", "--shm", shm_name, "--from-start", "--json",
                  "--duration", "0.2"], proj, build_env)
    events = [decode(line) for line in result.stdout.splitlines()]
    assert [e.kind.name for e in events] == ["FUNC", "BLOCK", "FUNC", "FUNC", "BLOCK"]  # s: 0, 3, 4
    missing = run([sys.executable, "-m", "mallory.cli", "trace", "--shm", "mallory-test-nope", "--duration", "0.1"],
                  proj, build_env, check=False)
    assert missing.returncode != 0 and "no shared-memory ring named 'mallory-test-nope'" in missing.stderr
    assert "Traceback" not in missing.stderr
