"""bench/bench_soak.py's parsing of /proc and its arithmetic, on hand-made text and
samples, against numbers worked out by hand. Nothing here starts a campaign."""

from __future__ import annotations

import os

from tests.unit.bench.bench_module import load_bench

bench = load_bench("bench_soak")


def test_proc_status_and_stat_give_memory_by_kind_and_cpu():
    status = ("Name:\tpython3\nVmPeak:\t  300000 kB\nVmRSS:\t  112640 kB\nRssAnon:\t   81920 kB\n"
              "RssFile:\t   20480 kB\nRssShmem:\t   10240 kB\nThreads:\t4\n")
    assert bench.status_memory_mb(status) == {"rss": 110.0, "anon": 80.0, "file": 20.0, "shmem": 10.0}
    assert bench.status_memory_mb("Name:\tkworker\nState:\tI (idle)\n") is None
    own = bench.status_memory_mb(open(f"/proc/{os.getpid()}/status").read())
    assert own["rss"] > 0 and abs(own["anon"] + own["file"] + own["shmem"] - own["rss"]) < 0.01
    rollup = "55a6-7fff ---p 00000000 00:00 0  [rollup]\nRss:  1764 kB\nPss:  3072 kB\nPss_Anon:  112 kB\n"
    assert bench.pss_mb(rollup) == 3.0 and bench.pss_mb("Rss: 4 kB\n") is None
    assert bench.pss_mb(open(f"/proc/{os.getpid()}/smaps_rollup").read()) > 0
    stat = "4242 (odd ) name) S 1 4242 4242 0 -1 4194560 9000 0 0 0 250 50 0 0 20 0 4 0 100 0 0"
    assert bench.cpu_seconds(stat, 100) == 3.0
    own = open(f"/proc/{os.getpid()}/stat").read()
    assert bench.cpu_seconds(own, os.sysconf("SC_CLK_TCK")) > 0


def test_roles_name_processes_by_job_and_node():
    assert bench.role_of({"node": "gw", "name": "mediator"}) == "mediator"
    assert bench.role_of({"node": "n2", "name": "observer"}) == "observer n2"


def test_growth_is_the_least_squares_slope_per_hour():
    assert bench.growth_per_hour([(0, 100.0), (1800, 101.0), (3600, 102.0)]) == 2.0
    assert round(bench.growth_per_hour([(0, 50.0), (60, 50.0), (120, 50.0)]), 9) == 0.0
    assert bench.growth_per_hour([(60, 50.0)]) is None


def test_smaps_sum_resident_memory_per_mapped_file():
    smaps = """\
55d0c0a00000-55d0c0a21000 r--p 00000000 08:01 1234                       /usr/bin/python3.11
Size:                132 kB
Rss:                 128 kB
7f0000000000-7f0000100000 rw-p 00000000 00:00 0
Rss:                 512 kB
7f1000000000-7f1000200000 r-xp 00000000 08:01 99                         /venv/lib/numpy/libopenblas.so
Rss:                2048 kB
7f1000200000-7f1000300000 r--p 00200000 08:01 99                         /venv/lib/numpy/libopenblas.so
Rss:                1024 kB
7ffd00000000-7ffd00021000 rw-p 00000000 00:00 0                          [stack]
Rss:                  16 kB
"""
    assert bench.smaps_by_file(smaps) == {"/usr/bin/python3.11": 128, "[anon]": 512,
                                          "/venv/lib/numpy/libopenblas.so": 3072, "[stack]": 16}


def test_summary_per_role_after_the_warmup_with_restarts_and_cpu_share():
    S = bench.Sample
    samples = [
        S(0, "observer n1", 10, 30.0, 1.0), S(600, "observer n1", 10, 34.0, 31.0), S(1200, "observer n1", 10, 35.0, 61.0),
        S(1800, "observer n1", 11, 33.0, 2.0),  # restarted: its CPU time starts again
        S(600, "mediator", 5, 100.0, 10.0), S(1200, "mediator", 5, 100.0, 130.0),
    ]
    by_role = {s.role: s for s in bench.summarize(samples, warmup_s=300)}
    observer = by_role["observer n1"]
    assert (observer.start_mb, observer.end_mb, observer.peak_mb, observer.restarts) == (34.0, 33.0, 35.0, 1)
    assert round(observer.cpu_share, 3) == 0.05  # 30 s of CPU per 600 s, the restart's interval left out
    assert round(observer.growth_mb_per_h, 3) == -3.0
    assert by_role["mediator"].cpu_share == 0.2 and by_role["mediator"].growth_mb_per_h == 0.0
    text = bench.render(list(by_role.values()))
    assert "observer RSS at most 35.0 MB (target <= 40 MB)" in text


def test_event_rates_per_minute_between_readings_and_none_across_a_new_mediator():
    assert bench.event_rates([(0, 100), (60, 400), (120, 400), (180, 50)]) == {60: 300.0, 120: 0.0}
    assert bench.event_rates([(60, 5)]) == {}


def test_growth_at_constant_load_separates_time_from_the_event_rate():
    # MB = 10 + 2 MB/h * hours + 0.5 MB per 1000 events/min, the rate going up and down
    points = [(t, r, 10 + 2 * t / 3600 + 0.5 * r / 1000) for t, r in
              ((0, 1000), (3600, 3000), (7200, 1000), (10800, 3000))]
    growth, per_rate = bench.growth_at_constant_load(points)
    assert round(growth, 9) == 2.0 and round(per_rate, 9) == 0.5
    # a rate that grows in step with time: which of the two it is cannot be told
    assert bench.growth_at_constant_load([(t, 1000 + t / 3.6, 10 + t / 3600) for t in (0, 600, 1200, 1800)]) is None
    # a rate that never moves: the plain growth
    assert bench.growth_at_constant_load([(0, 500, 1.0), (1800, 500, 2.0), (3600, 500, 3.0)]) == (2.0, 0.0)
    assert bench.growth_at_constant_load([(0, 500, 1.0), (60, 600, 2.0)]) is None


def test_summary_reports_each_kind_of_memory_and_the_load_it_grew_under():
    S = bench.Sample
    samples = [S(t, "mediator", 5, 100.0 + t / 3600, 0.0, anon_mb=60.0 + 2 * t / 3600 + (r or 0) / 2000, file_mb=30.0,
                 shmem_mb=0.0, pss_mb=90.0, events_per_min=r)
               for t, r in ((0, None), (3600, 3000), (7200, 1000), (10800, 3000), (14400, 1000))]
    [mediator] = bench.summarize(samples, warmup_s=3600)
    assert mediator.end_by_kind == {"anon_mb": 68.5, "file_mb": 30.0, "shmem_mb": 0.0, "pss_mb": 90.0}
    assert mediator.growth_by_kind["file_mb"] == 0.0 and round(mediator.growth_by_kind["anon_mb"], 3) == 1.8  # the plain slope mixes in the load
    assert [round(v, 9) for v in mediator.anon_at_constant_load] == [2.0, 0.5]
    load = bench.summarize_load(samples, warmup_s=3600)
    assert (load.first, load.last, load.mean) == (3000, 1000, 2000)
    text = bench.render([mediator], load)
    assert "+2.00" in text and "+0.500" in text
    assert "3000/min after the warm-up, 1000/min at the end, 2000/min on average" in text
    assert bench.summarize_load([S(0, "fuzz", 1, 50.0, 0.0)], 0) is None


def test_growth_beyond_the_peak_tells_a_bursts_high_water_mark_from_a_leak():
    rates = (1000, 3000, 1000, 1000, 5000, 1000, 1000)
    # memory that keeps the highest burst's mark: 50 MB + 10 MB per 1000 events/min of the peak so far
    high_water = [(h * 3600, r, 50 + 10 * max(rates[:h + 1]) / 1000) for h, r in enumerate(rates)]
    growth, per_peak = bench.growth_beyond_peak(high_water)
    assert round(growth, 9) == 0.0 and round(per_peak, 9) == 10.0
    assert bench.growth_at_constant_load(high_water)[0] > 1.0  # against the rate now it passes for a leak
    leak = [(t, r, 50 + 2 * t / 3600 + 10 * max(rates[:i + 1]) / 1000)
            for i, (t, r, _) in enumerate(high_water)]
    assert round(bench.growth_beyond_peak(leak)[0], 9) == 2.0


def test_the_mediators_memory_account_becomes_rows_and_a_summary():
    memory = {"rss_mb": 150.0, "anon_mb": 110.0, "python_blocks": 900_000, "threads": 6,
              "malloc": {"heap_mb": 40.0, "in_use_mb": 25.0, "free_mb": 15.0, "mmap_mb": 9.0},
              "pymalloc": {"arenas_mb": 50.0, "blocks_mb": 41.5},
              "held": {"seen_packets": 200_000, "sends_remembered": 7000, "pending_events": 30, "early_batches": 0,
                       "join_waiting": 10_000, "lags": 10_000}}
    row = bench.memory_row(memory)
    assert list(row) == list(bench.MEMORY_COLUMNS)
    assert (row["malloc_free_mb"], row["seen_packets"], row["python_blocks"]) == (15.0, 200_000, 900_000)
    assert (row["pymalloc_arenas_mb"], row["pymalloc_blocks_mb"], row["other_anon_mb"]) == (50.0, 41.5, 11.0)
    assert bench.memory_row({**memory, "malloc": None})["malloc_in_use_mb"] is None  # no mallinfo2
    without_pymalloc = bench.memory_row({**memory, "pymalloc": None})  # PYTHONMALLOC=malloc
    assert (without_pymalloc["pymalloc_arenas_mb"], without_pymalloc["other_anon_mb"]) == (None, 61.0)
    assert bench.memory_row({**memory, "malloc": None})["other_anon_mb"] is None
    rows = [(0, bench.memory_row({**memory, "python_blocks": 1})),  # the warm-up: left out
            (3600, row), (7200, bench.memory_row({**memory, "python_blocks": 1_000_000, "malloc": None}))]
    anon = [(h * 3600, r, 100 + 5 * h) for h, r in enumerate((1000, 2000, 1000, 2000))]
    text = bench.render_memory(rows, 1800, anon)
    assert "python_blocks        1000000.00   +100000.00/h" in text
    assert "malloc_free_mb            15.00            -/h" in text  # one reading after the warm-up
    assert "RssAnon at a constant peak event rate: +5.00 MB/h" in text
