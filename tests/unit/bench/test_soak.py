"""bench/bench_soak.py's parsing of /proc and its arithmetic, on hand-made text and
samples, against numbers worked out by hand. Nothing here starts a campaign."""

from __future__ import annotations

import os

from tests.unit.bench.bench_module import load_bench

bench = load_bench("bench_soak")


def test_proc_status_and_stat_give_rss_and_cpu():
    assert bench.rss_mb("Name:\tpython3\nVmPeak:\t  300000 kB\nVmRSS:\t  112640 kB\nThreads:\t4\n") == 110.0
    assert bench.rss_mb("Name:\tkworker\nState:\tI (idle)\n") is None
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
