"""The mediator's memory figures (mallory/mediator/memory.py) follow what this process
allocates and frees, and the mediator's /metrics carry them with its tables' sizes."""

import gc
import json
import os
import subprocess
import sys
import threading

import pytest

from mallory.mediator.memory import (
    malloc_account,
    process_memory,
    pymalloc_account,
    pymalloc_figures,
    resident_mb,
    return_free_memory,
)
from mallory.mediator.service import Mediator


def test_resident_memory_is_read_from_proc_status():
    status = "Name:\tpython3\nVmRSS:\t  112640 kB\nRssAnon:\t   81920 kB\nRssFile:\t   30720 kB\n"
    assert resident_mb(status) == {"rss_mb": 110.0, "anon_mb": 80.0}
    assert resident_mb("Name:\tkworker\n") == {"rss_mb": None, "anon_mb": None}
    own = process_memory()
    assert own["rss_mb"] > own["anon_mb"] > 0


def test_python_blocks_follow_the_objects_alive():
    before = process_memory()["python_blocks"]
    kept = [object() for _ in range(100_000)]
    assert process_memory()["python_blocks"] - before >= 100_000
    del kept
    assert process_memory()["python_blocks"] - before < 1_000


@pytest.mark.skipif(malloc_account() is None, reason="no glibc mallinfo2 here")
def test_malloc_tells_chunks_in_use_from_large_mmapped_ones():
    before = malloc_account()
    chunks = [bytes(2048) for _ in range(8192)]  # 16 MB beyond pymalloc's 512 bytes: malloc's heaps
    during = malloc_account()
    assert during["in_use_mb"] - before["in_use_mb"] >= 15
    # glibc's heap is its chunks in use plus its free ones; each figure is rounded to 0.01 MB
    assert during["heap_mb"] == pytest.approx(during["in_use_mb"] + during["free_mb"], abs=0.02)
    del chunks
    after = malloc_account()
    assert after["in_use_mb"] - before["in_use_mb"] < 2
    big = bytearray(256 * 1024 * 1024)  # far above any mmap threshold: a mapping of its own
    assert malloc_account()["mmap_mb"] - after["mmap_mb"] >= 255
    del big


@pytest.mark.skipif(return_free_memory() is None or malloc_account() is None, reason="no glibc malloc_trim here")
def test_free_chunks_left_between_survivors_go_back_to_the_system():
    # A burst: 40 MB of 2 KB chunks, one in 20 outliving it, so no heap top can shrink.
    chunks = [bytes(2048) for _ in range(20_000)]
    survivors = chunks[::20]
    del chunks
    before = process_memory()["anon_mb"]
    assert malloc_account()["free_mb"] >= 30  # freed but resident: the burst's high-water mark
    assert return_free_memory() is True
    assert before - process_memory()["anon_mb"] >= 20
    assert len(survivors) == 1_000


def test_pymalloc_figures_are_read_from_its_statistics_text():
    text = ("# arenas allocated current         =                   17\n"
            "17 arenas * 1048576 bytes/arena    =           17,825,792\n\n"
            "# bytes in allocated blocks        =           16,716,704\n")
    assert pymalloc_figures(text) == {"arenas_mb": 17.0, "blocks_mb": 15.94}
    assert pymalloc_figures("# arenas allocated current = 17\n") is None


@pytest.mark.skipif(pymalloc_account() is None, reason="no pymalloc statistics here")
def test_pymalloc_arenas_outlast_their_blocks_while_a_survivor_holds_each():
    before = pymalloc_account()
    objects = [bytes(200) for _ in range(200_000)]  # ~46 MB of small blocks: pymalloc arenas
    during = pymalloc_account()
    assert during["blocks_mb"] - before["blocks_mb"] >= 40
    assert during["arenas_mb"] >= during["blocks_mb"]
    survivors = objects[::500]  # one object in 500 lives on: a few in every arena
    del objects
    after = pymalloc_account()
    assert after["blocks_mb"] - before["blocks_mb"] < 2  # the blocks are gone...
    assert after["arenas_mb"] - before["arenas_mb"] >= 30  # ...but not the arenas that hold a survivor
    del survivors
    assert pymalloc_account()["arenas_mb"] - before["arenas_mb"] < 5


@pytest.mark.skipif(pymalloc_account() is None, reason="no pymalloc statistics here")
def test_returning_free_memory_frees_the_arenas_that_free_lists_held():
    gc.collect()
    before = pymalloc_account()["arenas_mb"]
    pairs = {(i, -i) for i in range(300_000)}  # ~40 MB of 2-tuples (and ints) in pymalloc's arenas
    assert pymalloc_account()["arenas_mb"] - before >= 20
    del pairs  # freed in hash order: the tuple free list keeps the last 2,000, scattered
    held = pymalloc_account()["arenas_mb"] - before
    return_free_memory()
    after = pymalloc_account()["arenas_mb"] - before
    assert after < 3 and held - after >= 10


#: a burst's small objects with one in 500 living on, as in the pymalloc test above, in a
#: process without pymalloc: prints its RssAnon (MB) before, during and after the memory return
_BURST_WITHOUT_PYMALLOC = """
import json
from mallory.mediator.memory import process_memory, pymalloc_account, return_free_memory
anon = lambda: process_memory()["anon_mb"]
before = anon()
objects = [bytes(200) for _ in range(200_000)]
during = anon()
survivors = objects[::500]
del objects
return_free_memory()
print(json.dumps({"pymalloc": pymalloc_account(), "before": before, "during": during, "after": anon()}))
"""


def test_without_pymalloc_the_memory_return_frees_the_pages_around_a_bursts_survivors():
    """The mediator runs with PYTHONMALLOC=malloc (campaign/observed.py): the survivors that
    hold pymalloc's arenas above hold only their own pages of malloc's heap."""
    env = {**os.environ, "PYTHONMALLOC": "malloc", "MALLOC_ARENA_MAX": "2"}
    out = subprocess.run([sys.executable, "-c", _BURST_WITHOUT_PYMALLOC], env=env, check=True,
                         capture_output=True, text=True).stdout
    figures = json.loads(out)
    assert figures["pymalloc"] is None  # not in use: no arenas to report
    assert figures["during"] - figures["before"] >= 40
    assert figures["after"] - figures["before"] < 5


def test_threads_alive_are_counted():
    before = process_memory()["threads"]
    stop = threading.Event()
    thread = threading.Thread(target=stop.wait)
    thread.start()
    try:
        assert process_memory()["threads"] == before + 1
    finally:
        stop.set()
        thread.join()


def test_the_metrics_carry_the_memory_and_the_tables_sizes():
    mediator = Mediator({"n1": "10.9.1.2", "n2": "10.9.2.2"}, token="t", api_address=("127.0.0.1", 0),
                        batch_address=("127.0.0.1", 0)).start()
    try:
        mediator.firewall.seen.add(12345)
        memory = mediator.metrics()["memory"]
    finally:
        mediator.stop()
    assert memory["rss_mb"] > 0 and memory["python_blocks"] > 0 and memory["threads"] >= 4  # API, batches, stream
    assert memory["held"] == {"seen_packets": 1, "join_waiting": 0, "lags": 0, "sends_remembered": 0,
                              "pending_events": 0, "early_batches": 0}
