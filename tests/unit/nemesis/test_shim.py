"""The clock/disk preload shim on its own (no root): a real process under LD_PRELOAD with a
control file the test switches, as the nemesis does on a node."""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mallory.cluster.loopback import LoopbackBackend
from mallory.cluster.registry import RunRecord
from mallory.harness.adapter import ProcessAdapter
from nemesis.faults.controls import (
    MODE_ERROR,
    MODE_OFF,
    MODE_SLOW,
    OP_SYNC,
    OP_WRITE,
    NodeControls,
    loaded_in,
)

# A child that reports its clocks and tries writes, one JSON line per request on stdin.
CHILD = r"""
import json, os, sys, time
for line in sys.stdin:
    req = json.loads(line)
    out = {}
    if req["op"] == "clock":
        out = {"real": time.time(), "mono": time.monotonic()}
    elif req["op"] == "write":
        t0 = time.monotonic()
        try:
            fd = os.open(req["path"], os.O_WRONLY | os.O_CREAT, 0o644)
            try:
                os.write(fd, b"x")
                if req.get("sync"):
                    os.fsync(fd)
            finally:
                os.close(fd)
            out = {"ok": True}
        except OSError as exc:
            out = {"ok": False, "errno": exc.errno}
        out["seconds"] = time.monotonic() - t0
    elif req["op"] == "pipe":
        r, w = os.pipe()
        out = {"ok": os.write(w, b"abc") == 3}
    print(json.dumps(out), flush=True)
"""


class Child:
    def __init__(self, env: dict[str, str]) -> None:
        self.proc = subprocess.Popen([sys.executable, "-c", CHILD], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     text=True, env={**os.environ, **env})

    def ask(self, **req: object) -> dict:
        import json

        self.proc.stdin.write(json.dumps(req) + "\n")
        self.proc.stdin.flush()
        return json.loads(self.proc.stdout.readline())

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(5)


@pytest.fixture
def node(tmp_path: Path):
    record = RunRecord("shim", 0, tmp_path / "state", tmp_path / "data")
    record.state_dir.mkdir()
    controls = NodeControls(record, ["n1"]).prepare()
    data = tmp_path / "n1-data"
    data.mkdir()
    child = Child(controls.env("n1"))
    yield controls, child, data, tmp_path
    child.close()


def test_the_shim_is_loaded_and_journaled(node):
    controls, child, _, _ = node
    assert child.ask(op="pipe")["ok"]
    assert controls.shim.name in loaded_in(child.proc.pid)
    assert {"dir": str(controls.dir)} in controls.record.entries()


def test_clock_offset_moves_the_wall_clock_only_and_at_once(node):
    controls, child, _, _ = node
    base = child.ask(op="clock")
    assert abs(base["real"] - time.time()) < 0.5
    controls.set_clock("n1", -3600.25)
    shifted = child.ask(op="clock")
    assert abs(shifted["real"] - time.time() + 3600.25) < 0.5
    assert 0 <= shifted["mono"] - base["mono"] < 5  # monotonic untouched
    assert controls.clock_faked("n1") >= 1
    controls.set_clock("n1", 0.0)
    assert abs(child.ask(op="clock")["real"] - time.time()) < 0.5


@pytest.mark.parametrize("err", [errno.EIO, errno.ENOSPC])
def test_write_errors_hit_regular_files_under_the_prefix_only(node, err):
    controls, child, data, tmp = node
    controls.set_disk("n1", MODE_ERROR, err=err, ops=OP_WRITE | OP_SYNC, prefix=os.path.realpath(data) + "/")
    assert child.ask(op="write", path=str(data / "f")) == {"ok": False, "errno": err, "seconds": pytest.approx(0, abs=1)}
    assert child.ask(op="write", path=str(tmp / "outside"))["ok"]  # not under the prefix
    assert child.ask(op="pipe")["ok"]  # pipes and sockets are never touched
    assert controls.disk_state("n1").injected == 1
    controls.set_disk("n1", MODE_OFF)
    assert child.ask(op="write", path=str(data / "f"))["ok"]


def test_fsync_only_and_slow_io(node):
    controls, child, data, _ = node
    controls.set_disk("n1", MODE_ERROR, err=errno.EIO, ops=OP_SYNC, prefix="")
    assert child.ask(op="write", path=str(data / "g"))["ok"]  # the write alone passes
    assert child.ask(op="write", path=str(data / "g"), sync=True)["errno"] == errno.EIO
    controls.set_disk("n1", MODE_SLOW, ops=OP_WRITE | OP_SYNC, delay_us=60_000)
    before = controls.disk_state("n1").injected
    slow = child.ask(op="write", path=str(data / "g"), sync=True)
    assert slow["ok"] and slow["seconds"] >= 0.12  # write + fsync, 60 ms each
    assert controls.disk_state("n1").injected == before + 2
    controls.set_disk("n1", MODE_OFF)
    # off: the shim delays (and counts) nothing more; how fast the disk is, is not its doing
    assert child.ask(op="write", path=str(data / "g"), sync=True)["ok"]
    assert controls.disk_state("n1").injected == before + 2


def test_without_the_control_file_the_shim_passes_everything_through(tmp_path):
    from nemesis.faults.controls import fault_shim

    child = Child({"LD_PRELOAD": str(fault_shim()), "MALLORY_FAULT_CONTROL": str(tmp_path / "missing")})
    try:
        assert abs(child.ask(op="clock")["real"] - time.time()) < 0.5
        assert child.ask(op="write", path=str(tmp_path / "h"), sync=True)["ok"]
    finally:
        child.close()


def test_cleanup_removes_the_control_files_from_the_journal(node):
    from mallory.cluster.registry import cleanup_run

    controls, child, _, _ = node
    assert controls.control_file("n1").exists()
    removed = cleanup_run(controls.record)
    assert f"dir {controls.dir}" in removed
    assert not controls.dir.exists()


ASAN_PROGRAM = r"""
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
int main(int argc, char **argv) {
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    int fd = open(argv[1], O_WRONLY | O_CREAT, 0644);
    int r = (int)write(fd, "x", 1);
    printf("%ld %d %d\n", (long)t.tv_sec, r, r < 0 ? errno : 0);
    return 0;
}
"""


def test_an_asan_built_sut_takes_the_shim(node):
    controls, _, data, tmp = node
    src = tmp / "asan.c"
    src.write_text(ASAN_PROGRAM)
    binary = tmp / "asan"
    if subprocess.run(["gcc", "-fsanitize=address", "-o", str(binary), str(src)], capture_output=True).returncode:
        pytest.skip("no AddressSanitizer runtime")
    controls.set_clock("n1", 1000.0)
    controls.set_disk("n1", MODE_ERROR, err=errno.EIO, prefix=os.path.realpath(data) + "/")
    env = {**os.environ, **controls.env("n1")}
    result = subprocess.run([str(binary), str(data / "f")], env=env, capture_output=True, text=True, timeout=30)
    assert result.returncode == 0, result.stderr
    sec, rc, err = map(int, result.stdout.split())
    assert abs(sec - time.time() - 1000) < 3 and rc == -1 and err == errno.EIO


STDIO_PROGRAM = r"""
#include <errno.h>
#include <stdio.h>
int main(int argc, char **argv) {
    FILE *f = fopen(argv[1], "a");
    fprintf(f, "entry\n");
    int flushed = fflush(f);
    int flush_errno = flushed ? errno : 0;
    fprintf(f, "more\n");
    int closed = fclose(f);
    printf("%d %d %d %d\n", flushed, flush_errno, closed, closed ? errno : 0);
    return 0;
}
"""


def test_stdio_streams_fail_at_flush_and_close_and_lose_their_buffer(node):
    controls, _, data, tmp = node
    src = tmp / "stdio.c"
    src.write_text(STDIO_PROGRAM)
    binary = tmp / "stdio"
    subprocess.run(["gcc", "-O1", "-o", str(binary), str(src)], check=True)
    env = {**os.environ, **controls.env("n1")}
    target = data / "raft.log"
    controls.set_disk("n1", MODE_ERROR, err=errno.ENOSPC, prefix=os.path.realpath(data) + "/")
    out = subprocess.run([str(binary), str(target)], env=env, capture_output=True, text=True, check=True).stdout
    assert out.split() == ["-1", str(errno.ENOSPC), "-1", str(errno.ENOSPC)]
    assert target.read_text() == ""  # nothing reached the file
    controls.set_disk("n1", MODE_OFF)
    out = subprocess.run([str(binary), str(target)], env=env, capture_output=True, text=True, check=True).stdout
    assert out.split() == ["0", "0", "0", "0"] and target.read_text() == "entry\nmore\n"


def test_the_controls_overlay_merges_the_env_once(node):
    controls, _, _, tmp = node

    class OwnEnvAdapter(ProcessAdapter):
        """A ProcessAdapter with an environment of its own (never started here)."""

        def env(self, node: str) -> dict[str, str]:
            return {"LD_PRELOAD": "/opt/own.so", "ASAN_OPTIONS": "detect_leaks=0", "X": "1"}

    adapter = OwnEnvAdapter(LoopbackBackend(1, tmp / "cluster"))
    adapter.add_env_overlay(controls)
    adapter.add_env_overlay(controls)
    env = adapter.start_env("n1")
    assert env["LD_PRELOAD"] == f"{controls.shim} /opt/own.so"
    assert env["ASAN_OPTIONS"] == "detect_leaks=0:verify_asan_link_order=0"
    assert env["X"] == "1" and env["MALLORY_FAULT_CONTROL"] == str(controls.control_file("n1"))


UNSYNCED_PROGRAM = r"""
#include <fcntl.h>
#include <stdio.h>
#include <unistd.h>
int main(int argc, char **argv) {
    char path[600];
    snprintf(path, sizeof path, "%s/wal", argv[1]);
    int fd = open(path, O_WRONLY | O_CREAT | O_APPEND, 0644);
    write(fd, "synced\n", 7);
    fsync(fd);
    write(fd, "unsynced\n", 9);
    snprintf(path, sizeof path, "%s/log", argv[1]);
    FILE *f = fopen(path, "a");
    fprintf(f, "stdio line\n");
    fclose(f);
    char tmp[600];
    snprintf(tmp, sizeof tmp, "%s/state.tmp", argv[1]);
    snprintf(path, sizeof path, "%s/state", argv[1]);
    f = fopen(tmp, "w");
    fprintf(f, "term 3\n");
    fclose(f);
    rename(tmp, path);  /* no fsync before the rename: a classic */
    snprintf(path, sizeof path, "%s/outside", argv[2]);
    fd = open(path, O_WRONLY | O_CREAT, 0644);
    write(fd, "not tracked\n", 12);
    puts("done");
    fflush(stdout);
    pause();
    return 0;
}
"""


def test_unsynced_writes_are_cut_back_after_the_crash(node):
    from nemesis.faults.disk import lose_unsynced_writes

    controls, _, data, tmp = node
    src = tmp / "unsynced.c"
    src.write_text(UNSYNCED_PROGRAM)
    binary = tmp / "unsynced"
    subprocess.run(["gcc", "-O1", "-o", str(binary), str(src)], check=True)
    controls.set_tracking("n1", os.path.realpath(data) + "/")
    proc = subprocess.Popen([str(binary), str(data), str(tmp)], env={**os.environ, **controls.env("n1")},
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "done"
        entries, untracked = controls.unsynced("n1")
        assert len(entries) == 3 and untracked == 0  # wal (after its fsync), log, state
    finally:
        proc.kill()
        proc.wait(5)
    cut = lose_unsynced_writes(controls, "n1", data)
    assert cut == {
        "wal": {"size_before": 16, "kept": 7, "size_after": 7},
        "log": {"size_before": 11, "kept": 0, "size_after": 0},
        "state": {"size_before": 7, "kept": 0, "size_after": 0},
    }
    assert (data / "wal").read_text() == "synced\n"
    assert (tmp / "outside").read_text() == "not tracked\n"
    assert controls.unsynced("n1") == ([], 0)


# One 3-byte AIO write the way libraft submits its segment writes (syscall(), a
# IOCB_CMD_PWRITEV, then io_getevents; or its eventfd first, as libraft's loop polls it).
AIO_PROGRAM = r"""
#define _GNU_SOURCE
#include <fcntl.h>
#include <linux/aio_abi.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
/* argv: path, "dsync" or "buffered", "eventfd" or "wait": one 3-byte AIO write, as libraft
 * submits its segment writes (syscall(), IOCB_CMD_PWRITEV); prints its result, the
 * milliseconds until it completed and what the eventfd counted. */
int main(int argc, char **argv) {
    (void)argc;
    int dsync = strcmp(argv[2], "dsync") == 0, resfd = strcmp(argv[3], "eventfd") == 0;
    int fd = open(argv[1], O_WRONLY | O_CREAT | (dsync ? O_DSYNC : 0), 0644);
    aio_context_t ctx = 0;
    if (syscall(SYS_io_setup, 1, &ctx) != 0) { perror("io_setup"); return 2; }
    struct iovec iov = {"abc", 3};
    struct iocb cb;
    memset(&cb, 0, sizeof cb);
    cb.aio_lio_opcode = IOCB_CMD_PWRITEV;
    cb.aio_fildes = (uint32_t)fd;
    cb.aio_buf = (uint64_t)(uintptr_t)&iov;
    cb.aio_nbytes = 1;
    cb.aio_data = 42;
    int efd = resfd ? eventfd(0, 0) : -1;
    if (resfd) { cb.aio_flags = IOCB_FLAG_RESFD; cb.aio_resfd = (uint32_t)efd; }
    struct iocb *cbs[1] = {&cb};
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    long n = syscall(SYS_io_submit, ctx, 1, cbs);
    if (n != 1) { perror("io_submit"); return 3; }
    uint64_t counted = 0;
    if (resfd && read(efd, &counted, sizeof counted) != sizeof counted) return 4;
    struct io_event ev;
    if (syscall(SYS_io_getevents, ctx, 1, 1, &ev, NULL) != 1) { perror("io_getevents"); return 5; }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    syscall(SYS_io_destroy, ctx);
    long ms = (t1.tv_sec - t0.tv_sec) * 1000 + (t1.tv_nsec - t0.tv_nsec) / 1000000;
    printf("%lld %llu %ld %llu\n", (long long)ev.res, (unsigned long long)ev.data, ms, (unsigned long long)counted);
    return 0;
}
"""


@pytest.fixture
def aio_program(tmp_path: Path) -> Path:
    src = tmp_path / "aio.c"
    src.write_text(AIO_PROGRAM)
    binary = tmp_path / "aio"
    subprocess.run(["gcc", "-O1", "-o", str(binary), str(src)], check=True)
    return binary


def _aio_write(binary: Path, controls: NodeControls, path: Path, *how: str) -> tuple[int, int, int, int]:
    """Run the AIO program under the node's env: the write's result, its aio_data, the
    milliseconds it took, what the eventfd counted."""
    env = {**os.environ, **controls.env("n1")}
    out = subprocess.run([str(binary), str(path), *how], env=env, capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    res, data, ms, counted = map(int, out.stdout.split())
    return res, data, ms, counted


@pytest.mark.parametrize("wake", ["wait", "eventfd"])
def test_aio_writes_complete_with_the_faults_errno_without_reaching_the_file(node, aio_program, wake):
    controls, _, data, tmp = node
    prefix = os.path.realpath(data) + "/"
    assert _aio_write(aio_program, controls, data / "seg", "dsync", wake) == (3, 42, pytest.approx(0, abs=500), int(wake == "eventfd"))
    assert (data / "seg").read_bytes() == b"abc"
    controls.set_disk("n1", MODE_ERROR, err=errno.EIO, ops=OP_WRITE, prefix=prefix)
    res, aio_data, _, counted = _aio_write(aio_program, controls, data / "failed", "dsync", wake)
    assert (res, aio_data, counted) == (-errno.EIO, 42, int(wake == "eventfd"))  # its own completion, eventfd woken
    assert (data / "failed").read_bytes() == b""  # never submitted
    assert _aio_write(aio_program, controls, tmp / "outside", "dsync", wake)[0] == 3  # not under the prefix
    state = controls.disk_state("n1")
    assert state.injected == state.injected_aio == 1


def test_a_synced_aio_write_is_also_a_sync_and_slow_aio_is_delayed(node, aio_program):
    controls, _, data, _ = node
    prefix = os.path.realpath(data) + "/"
    controls.set_disk("n1", MODE_ERROR, err=errno.EIO, ops=OP_SYNC, prefix=prefix)
    assert _aio_write(aio_program, controls, data / "buffered", "buffered", "wait")[0] == 3  # a plain write passes
    assert _aio_write(aio_program, controls, data / "synced", "dsync", "wait")[0] == -errno.EIO  # O_DSYNC: a sync too
    controls.set_disk("n1", MODE_ERROR, err=errno.ENOSPC, ops=OP_WRITE | OP_SYNC, prefix=prefix)
    assert _aio_write(aio_program, controls, data / "full", "buffered", "wait")[0] == -errno.ENOSPC
    controls.set_disk("n1", MODE_SLOW, ops=OP_WRITE | OP_SYNC, delay_us=80_000, prefix=prefix)
    res, _, ms, _ = _aio_write(aio_program, controls, data / "slow", "dsync", "eventfd")
    assert res == 3 and ms >= 80
    assert controls.disk_state("n1").injected_aio == 3


def test_buffered_aio_writes_are_tracked_as_unsynced_and_synced_ones_are_not(node, aio_program):
    controls, _, data, _ = node
    controls.set_tracking("n1", os.path.realpath(data) + "/")
    _aio_write(aio_program, controls, data / "buffered", "buffered", "wait")
    _aio_write(aio_program, controls, data / "synced", "dsync", "wait")
    entries, untracked = controls.unsynced("n1")
    assert [ino for _, ino, _ in entries] == [os.stat(data / "buffered").st_ino] and untracked == 0


CRASH_PROGRAM = r"""
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
__attribute__((noinline)) static int read_entry(const int *entry) { return *entry; }
__attribute__((noinline)) int apply_entry(const int *entry) { return read_entry(entry) + 1; }
int main(int argc, char **argv) {
    printf("applying entry 42\n");
    fflush(stdout);
    if (argc > 1 && strcmp(argv[1], "abort") == 0)
        abort();
    return apply_entry(argc > 5 ? &argc : NULL);
}
"""


def _crash(node, how: list[str], *flags: str):
    controls, _, _, tmp = node
    src = tmp / "crash.c"
    src.write_text(CRASH_PROGRAM)
    binary = tmp / f"crash{len(flags)}"
    if subprocess.run(["gcc", "-g", "-O1", *flags, "-o", str(binary), str(src)], capture_output=True).returncode:
        pytest.skip(f"cannot build with {flags}")
    env = {**os.environ, **controls.env("n1")}
    return subprocess.run([str(binary), *how], env=env, capture_output=True, text=True, timeout=30)


@pytest.mark.parametrize("how, signum", [([], signal.SIGSEGV), (["abort"], signal.SIGABRT)])
def test_a_crash_writes_a_backtrace_then_dies_of_the_same_signal(node, how, signum):
    from mallory.campaign.symbols import symbolize
    from mallory.oracles.logs import crash_backtrace, death_finding

    result = _crash(node, how)
    assert result.returncode == -signum
    log = result.stdout + result.stderr
    assert f"==mallory== caught {signal.Signals(signum).name}: backtrace of pid " in log
    frames = crash_backtrace(log)
    assert frames and any(frame["module"].endswith(("crash0", "crash1")) for frame in frames)
    where = [frame.get("where") or "" for frame in symbolize(frames)]
    assert any(w.startswith("main at ") and "crash.c:" in w for w in where), where
    if signum == signal.SIGSEGV:  # the faulting frame and its caller, by name and line
        assert any(w.startswith("read_entry at ") for w in where) and any(w.startswith("apply_entry at ") for w in where)
    death = death_finding(result.returncode, "n1", log=log)
    assert death.details["last_line"] == "applying entry 42" and death.details["backtrace"] == frames


def test_an_asan_build_keeps_its_own_crash_report(node):
    result = _crash(node, [], "-fsanitize=address")
    assert "AddressSanitizer: SEGV" in result.stderr and "==mallory==" not in result.stderr + result.stdout
