"""A real program under `python -m mallory.pyinstrument`: its annotated and traced functions
land in a real ring (through libmallory_rt.so) and come back through the observer's reader
with the ids of the shared scheme and names from the catalogue; without MALLORY_SHM the
program runs plain."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections import Counter
from pathlib import Path

import pytest

from mallory.instrument import toolchain
from mallory.instrument.catalogue import Catalogue
from mallory.instrument.event_ids import event_id
from mallory.observer.ring import RingReader, create_ring
from mallory.timeline.event import Kind

THREADS, CALLS = 4, 2000

WORKER = textwrap.dedent('''\
    import tracedlib

    # INSTRUMENT_FUNC work
    def work(i):
        if i % 2:
            # INSTRUMENT_BLOCK odd
            return tracedlib.helper(i)
        return i
''')

MAIN = textwrap.dedent(f'''\
    import builtins, sys, threading
    import tracedlib, worker

    def loop():
        for i in range({CALLS}):
            worker.work(i)

    # INSTRUMENT_BLOCK start-threads
    threads = [threading.Thread(target=loop) for _ in range({THREADS})]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    hooks = sorted(n for n in vars(builtins) if n.startswith("_mallory_hook_"))
    print("args", sys.argv[1:], "wrapped", hasattr(tracedlib.helper, "__wrapped__"), "hooks", len(hooks))
''')


@pytest.fixture(scope="module")
def runtime_env() -> dict[str, str]:
    """The environment with the shared runtime built (CI has clang: .ci/apt/llvm.txt)."""
    try:
        so = toolchain.ensure_built().runtime_shared
    except Exception as exc:
        pytest.fail(f"cannot build the Mallory runtime: {exc}")
    env = {k: v for k, v in os.environ.items() if not k.startswith("MALLORY_")}
    env["MALLORY_RUNTIME_SO"] = str(so)
    return env


@pytest.fixture
def program(tmp_path: Path) -> Path:
    app = tmp_path / "app"
    app.mkdir()
    (app / "worker.py").write_text(WORKER)
    (app / "main.py").write_text(MAIN)
    lib = tmp_path / "lib"
    lib.mkdir()
    (lib / "tracedlib.py").write_text("def helper(i):\n    return i + 1\n")
    return tmp_path


def line_after(text: str, marker: str) -> int:
    """1-based line of the code right below the (unique) comment `marker`."""
    lines = [line.strip() for line in text.splitlines()]
    assert lines.count(marker) == 1, marker
    return lines.index(marker) + 2


def launch(root: Path, env: dict[str, str], *extra: str) -> subprocess.CompletedProcess:
    env = {**env, "PYTHONPATH": str(root / "lib")}
    argv = [sys.executable, "-m", "mallory.pyinstrument", "--annotated", str(root / "app"),
            "--trace", "tracedlib.helper=traced-helper", *extra, "--", str(root / "app" / "main.py"), "x", "y"]
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)


def test_events_round_trip_through_the_ring_from_many_threads(program, runtime_env, shm_name):
    create_ring(shm_name, 1 << 15)
    catalogue_path = program / "catalogue.json"
    with RingReader(shm_name, node="n1") as reader:
        result = launch(program, {**runtime_env, "MALLORY_SHM": shm_name}, "--catalogue", str(catalogue_path))
        assert result.returncode == 0, result.stderr
        assert "args ['x', 'y'] wrapped True hooks 3" in result.stdout
        events = reader.poll_events()
        assert reader.lost_total == 0 and reader.write_counter == len(events)
    work = event_id("worker.py", line_after(WORKER, "# INSTRUMENT_FUNC work"), Kind.FUNC)
    odd = event_id("worker.py", line_after(WORKER, "# INSTRUMENT_BLOCK odd"), Kind.BLOCK)
    start = event_id("main.py", line_after(MAIN, "# INSTRUMENT_BLOCK start-threads"), Kind.BLOCK)
    helper = event_id("tracedlib.py", 1, Kind.FUNC)
    assert events[0].id == start and events[0].kind == Kind.BLOCK and events[0].node == "n1"
    assert Counter((e.kind, e.id) for e in events) == {
        (Kind.BLOCK, start): 1,
        (Kind.FUNC, work): THREADS * CALLS,
        (Kind.BLOCK, odd): THREADS * CALLS // 2,
        (Kind.FUNC, helper): THREADS * CALLS // 2,
    }
    catalogue = Catalogue.load(catalogue_path)
    assert {catalogue.name(i) for i in (work, odd, start, helper)} == {"work", "odd", "start-threads", "traced-helper"}
    entry = catalogue.get(helper)
    assert (entry.file, entry.line, entry.function, entry.kind) == ("tracedlib.py", 1, "helper", "FUNC")


def test_a_module_run_with_dash_m_is_instrumented_too(program, runtime_env, shm_name):
    create_ring(shm_name, 1 << 15)
    env = {**runtime_env, "MALLORY_SHM": shm_name, "PYTHONPATH": str(program / "lib")}
    argv = [sys.executable, "-m", "mallory.pyinstrument", "--annotated", str(program / "app"), "-m", "main", "z"]
    with RingReader(shm_name, node="n1") as reader:
        result = subprocess.run(argv, env=env, cwd=program / "app", capture_output=True, text=True, timeout=120)
        assert result.returncode == 0, result.stderr
        assert "args ['z'] wrapped False hooks 3" in result.stdout
        events = reader.poll_events()
    start = event_id("main.py", line_after(MAIN, "# INSTRUMENT_BLOCK start-threads"), Kind.BLOCK)
    assert events[0].id == start and len(events) == 1 + THREADS * CALLS * 3 // 2


def test_without_mallory_shm_the_program_runs_plain(program, runtime_env):
    result = launch(program, runtime_env)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "args ['x', 'y'] wrapped False hooks 0"
    assert result.stderr == ""


def test_a_missing_ring_is_reported_and_the_program_runs_plain(program, runtime_env, shm_name):
    result = launch(program, {**runtime_env, "MALLORY_SHM": shm_name})
    assert result.returncode == 0, result.stderr
    assert "wrapped False hooks 0" in result.stdout
    assert f"no shared-memory ring named {shm_name!r}" in result.stderr and "running without code events" in result.stderr


def test_catalogue_only_run_needs_no_ring_and_bad_names_fail(program, runtime_env):
    out = program / "only.json"
    env = {**runtime_env, "PYTHONPATH": str(program / "lib")}
    base = [sys.executable, "-m", "mallory.pyinstrument", "--annotated", str(program / "app")]
    done = subprocess.run([*base, "--trace", "tracedlib.helper", "--catalogue", str(out)], env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert {e.name for e in Catalogue.load(out)} == {"work", "odd", "start-threads", "tracedlib.helper"}
    bad = subprocess.run([*base, "--trace", "tracedlib.nope", "--catalogue", str(out)], env=env,
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 254 and "cannot trace tracedlib.nope" in bad.stderr
