"""ASan/LSan parsing on real reports from a tiny buggy C program built here with
-fsanitize=address; the log oracle; deaths by signal; signatures that deduplicate."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from mallory.oracles.asan import parse_asan
from mallory.oracles.logs import (
    DEFAULT_PATTERNS,
    crash_backtrace,
    death_finding,
    log_tail,
    scan_log,
)
from mallory.oracles.triage import deduplicate

BUGGY_C = r"""
#include <stdlib.h>
#include <string.h>

static int *make(void) { return malloc(4 * sizeof(int)); }

static void overflow(int *a) { a[4] = 1; }

static int use_after_free(int *a) { free(a); return a[1]; }

static void leak(void) { char *p = malloc(100); p[0] = 1; }

int main(int argc, char **argv) {
  int *a = make();
  if (strcmp(argv[1], "overflow") == 0) overflow(a);
  if (strcmp(argv[1], "uaf") == 0) return use_after_free(a);
  if (strcmp(argv[1], "leak") == 0) { leak(); leak(); }
  free(a);
  return 0;
}
"""


@pytest.fixture(scope="module")
def buggy(tmp_path_factory) -> Path:
    compiler = shutil.which("gcc") or shutil.which("clang")
    assert compiler, "gcc or clang is needed (see .ci/apt/oracles.txt)"
    d = tmp_path_factory.mktemp("asan")
    src = d / "buggy.c"
    src.write_text(BUGGY_C)
    exe = d / "buggy"
    subprocess.run([compiler, "-g", "-O0", "-fno-omit-frame-pointer", "-fsanitize=address", "-o", str(exe),
                    str(src)], check=True, capture_output=True, timeout=120)
    return exe


def run_buggy(exe: Path, mode: str) -> str:
    env = dict(os.environ, ASAN_OPTIONS="detect_leaks=1:abort_on_error=0", LSAN_OPTIONS="")
    proc = subprocess.run([str(exe), mode], capture_output=True, text=True, env=env, timeout=60)
    assert proc.returncode != 0, f"{mode}: ASan did not report"
    return proc.stderr


def test_heap_buffer_overflow(buggy):
    [f] = parse_asan(run_buggy(buggy, "overflow"), node="n1")
    assert f.oracle == "asan" and f.kind == "heap-buffer-overflow"
    assert f.details["access"] == "WRITE of size 4"
    assert f.key[0] == "overflow buggy.c:7"  # the program frame, not an address
    assert [k.split()[0] for k in f.key] == ["overflow", "main"]
    assert f.node == "n1" and "heap-buffer-overflow" in f.message


def test_use_after_free(buggy):
    [f] = parse_asan(run_buggy(buggy, "uaf"))
    assert f.kind == "heap-use-after-free"
    assert f.details["access"] == "READ of size 4"
    assert f.key[0].startswith("use_after_free buggy.c:")


def test_leaks_skip_allocator_frames_and_deduplicate(buggy):
    text = run_buggy(buggy, "leak")
    if "LeakSanitizer has encountered a fatal error" in text:
        # LSan stops the world with ptrace; some container sandboxes forbid it.
        pytest.skip("LeakSanitizer cannot run here (ptrace denied by the sandbox)")
    findings = parse_asan(text)
    assert {f.kind for f in findings} == {"direct-leak"}
    assert all(f.key[0].startswith("leak buggy.c:") for f in findings)
    assert all("malloc" not in k for f in findings for k in f.key)
    # leak() is called twice from one line of main: LSan prints two stacks that differ only in
    # a return address; they are one bug.
    assert len(findings) == 2
    assert findings[0].key == ("leak buggy.c:11", "main buggy.c:17")
    assert len(deduplicate(findings)) == 1


def test_same_bug_from_100_runs_is_one_signature(buggy):
    text = run_buggy(buggy, "overflow")
    other = run_buggy(buggy, "uaf")
    findings = []
    for i in range(100):
        findings += parse_asan(text, node=f"n{i % 3}")  # addresses/pids differ in real runs too
    findings += parse_asan(other)
    bugs = deduplicate(findings)
    assert len(bugs) == 2
    overflow = next(b for b in bugs.values() if b.first.kind == "heap-buffer-overflow")
    assert overflow.count == 100 and overflow.nodes == {"n0", "n1", "n2"}


def test_reports_embedded_in_a_node_log_with_other_lines():
    log = "\n".join([
        "I1201 10:00:00 server started",
        "==4242==ERROR: AddressSanitizer: heap-use-after-free on address 0x602000000010 at pc 0x1 bp 0x2 sp 0x3",
        "READ of size 8 at 0x602000000010 thread T3",
        "    #0 0x55abbd83d303 in raft_apply /src/raft.c:120:5",
        "    #1 0x55abbd83d404 in worker /src/worker.c:33",
        "    #2 0x7f34bb045249 in start_thread nptl/pthread_create.c:442",
        "",
        "SUMMARY: AddressSanitizer: heap-use-after-free /src/raft.c:120:5 in raft_apply",
        "I1201 10:00:01 still logging",
    ])
    [f] = parse_asan(log)
    assert f.key == ("raft_apply raft.c:120", "worker worker.c:33", "start_thread pthread_create.c:442")
    moved = log.replace("0x55abbd83d303", "0x11111111").replace("4242", "99")
    assert parse_asan(moved)[0].signature == f.signature


def test_default_log_patterns_and_normalised_signatures():
    lines = [
        "2026-11-21 10:00:01 INFO all good",
        "panic: runtime error: index out of range [5] with length 3",
        "2026-11-21 10:00:03 ERROR raft: two leaders in term 7",
        "2026-11-21 10:09:03 ERROR raft: two leaders in term 12",
        "[FATAL] cannot open /data/12",
        "app: x.c:10: main: Assertion `x > 0' failed.",
        "Segmentation fault (core dumped)",
        "Traceback (most recent call last):",
    ]
    findings = scan_log(lines, node="n2")
    kinds = [f.kind for f in findings]
    assert kinds == ["panic", "two-leaders", "two-leaders", "fatal", "assertion", "segfault", "uncaught-exception"]
    bugs = deduplicate(findings)
    assert len(bugs) == 6  # the two "two leaders" lines differ only in the term
    assert all(p.name for p in DEFAULT_PATTERNS)


def test_death_by_signal_from_a_real_process():
    code = "import os, signal; os.kill(os.getpid(), signal.SIGSEGV)"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=60)
    f = death_finding(proc.returncode, node="n3")
    assert f is not None and f.kind == "killed-by-SIGSEGV" and f.node == "n3"
    assert death_finding(-signal.SIGKILL) is None  # the harness's own kill
    assert death_finding(128 + signal.SIGABRT).kind == "killed-by-SIGABRT"  # shell exit status
    assert death_finding(0) is None and death_finding(1) is None


SHIM_CRASH = """\
replica 3: applying entry 41
replica 3: applying entry 42
==mallory== caught SIGSEGV: backtrace of pid 4242, innermost first
==mallory== #1 0x7f7c91f8b050 /lib/x86_64-linux-gnu/libc.so.6+0x3c050
==mallory== #2 0x55e81c8e6169 /opt/sut/raft-kv+0x1169
==mallory== #3 0x7f7c92001234 /usr/lib/x86_64-linux-gnu/libraft.so.2+0x1a234 (raft_apply+0x54)
==mallory== end of backtrace
"""


def test_a_death_the_shim_caught_carries_its_backtrace_and_last_lines_and_keeps_its_signature():
    f = death_finding(-signal.SIGSEGV, "n2", log=SHIM_CRASH)
    assert f.details["last_line"] == "replica 3: applying entry 42"  # the shim's lines are not the node's
    assert f.details["last_log_lines"] == ["replica 3: applying entry 41", "replica 3: applying entry 42"]
    assert [frame["module"] for frame in f.details["backtrace"]] == [
        "/lib/x86_64-linux-gnu/libc.so.6", "/opt/sut/raft-kv", "/usr/lib/x86_64-linux-gnu/libraft.so.2"]
    assert f.details["backtrace"][2] == {"address": "0x7f7c92001234", "module": "/usr/lib/x86_64-linux-gnu/libraft.so.2",
                                         "offset": "0x1a234", "symbol": "raft_apply+0x54"}
    plain = death_finding(-signal.SIGSEGV, "n2", log="replica 3: applying entry 42\n")
    assert plain.signature == f.signature and plain.details["backtrace"] == []
    assert scan_log(SHIM_CRASH.splitlines(), "n2") == []  # "SIGSEGV" in the shim's line is no log finding


def test_only_the_last_backtrace_counts_and_the_tail_is_bounded():
    log = SHIM_CRASH + "restarted\n==mallory== caught SIGABRT: backtrace of pid 4243, innermost first\n" \
        "==mallory== #1 0x10 ?+0x0\n==mallory== #2 0x20 /opt/sut/raft-kv+0x20\n==mallory== end of backtrace\n"
    assert [frame["offset"] for frame in crash_backtrace(log)] == ["0x0", "0x20"]
    assert log_tail("\n".join(f"line {i}" for i in range(100)), 3) == ["line 97", "line 98", "line 99"]
