"""AFL++'s names for a campaign's counters, so that afl-whatsup and afl-plot read a campaign
directory as they read an afl-fuzz output directory (AFL++ 4.04c, Debian bookworm's afl++:
its fuzzer_stats keys and plot_data columns, as /usr/bin/afl-whatsup and afl-plot read
them; tests/live/afl runs both on a campaign).

AFL fuzzes a program with inputs, Mallory a cluster with fault schedules. Key by key:

- an exec is a schedule: `execs_done` counts the schedules run, the one under way included
  (afl-whatsup divides by it); `execs_per_sec` is schedules per second.
- the corpus is the distinct states: `corpus_count` (in fuzzer_stats at least 1, as AFL's
  corpus always holds its seed: afl-whatsup divides by it), `cur_item` the state the
  cluster was last seen in, `last_find` when the newest state was first seen.
- a crash is a bug (a bundle in bugs/): `saved_crashes`, `last_crash`.
- an edge is an event pair: `edges_found` is pairs_covered; `bitmap_cvg` and plot_data's
  `map_size` give it as a share of AFL's default map of 65536 entries, as if each pair had
  an entry of its own (a campaign has no map; AFL users read map density).
- `max_depth` is the deepest waypoint level reached (afl-plot draws it as "levels").
- what Mallory has no counterpart for is 0: `cycles_done` (no queue cycles: the learner
  chooses), `pending_total` and `pending_favs` (no queue of untried inputs),
  `saved_hangs`, `last_hang`, `exec_timeout` (a schedule has no timeout).

Times are AFL's: `start_time`, `last_update`, `last_find`, `last_crash` in Unix seconds (0:
never), `run_time` in whole seconds; plot_data's `relative_time` in seconds (with
fractions: gnuplot reads them). Every plot_data value here is a number: afl-plot hands the
columns to gnuplot by position.
"""

from __future__ import annotations

import os
import time
from typing import Any

from mallory import __version__
from mallory.campaign.progress import Progress

#: AFL's default coverage map size, the denominator of `bitmap_cvg` and `map_size`
MAP_ENTRIES = 1 << 16

#: AFL++'s plot_data columns, in its order (afl-plot plots columns 1-6, 8-11 and 13)
AFL_PLOT_COLUMNS = (
    "relative_time",
    "cycles_done",
    "cur_item",
    "corpus_count",
    "pending_total",
    "pending_favs",
    "map_size",
    "saved_crashes",
    "saved_hangs",
    "max_depth",
    "execs_per_sec",
    "total_execs",
    "edges_found",
)


def map_percent(pairs_covered: int) -> float:
    """Event pairs as a percentage of AFL's default map, two decimals."""
    return round(100.0 * pairs_covered / MAP_ENTRIES, 2)


def _execs(p: Progress) -> int:
    return p.schedules_done + p.schedule_running


def _execs_per_sec(p: Progress) -> float:
    return round(_execs(p) / max(p.elapsed_s(), 1e-9), 2)


def _unix(p: Progress, campaign_s: float | None) -> int:
    return 0 if campaign_s is None else int(p.unix_time(campaign_s))


def afl_stats(p: Progress, banner: str, command_line: str) -> dict[str, Any]:
    """fuzzer_stats' AFL++ keys, in AFL++'s order, for a campaign run by this process."""
    return {
        "start_time": int(p.started),
        "last_update": int(time.time()),
        "run_time": int(p.elapsed_s()),
        "fuzzer_pid": os.getpid(),
        "cycles_done": 0,
        "execs_done": _execs(p),
        "execs_per_sec": f"{_execs_per_sec(p):.2f}",
        "corpus_count": max(p.states, 1),
        "corpus_found": p.states,
        "max_depth": p.deepest_waypoint,
        "cur_item": p.current_state or 0,
        "pending_favs": 0,
        "pending_total": 0,
        "bitmap_cvg": f"{map_percent(p.pairs_covered):.2f}%",
        "saved_crashes": p.bugs,
        "saved_hangs": 0,
        "last_find": _unix(p, p.last_new_state_s),
        "last_crash": _unix(p, p.last_bug_s),
        "last_hang": 0,
        "exec_timeout": 0,
        "edges_found": p.pairs_covered,
        "total_edges": MAP_ENTRIES,
        "afl_banner": banner,
        "afl_version": f"mallory-{__version__}",
        "command_line": command_line,
    }


def afl_plot_values(p: Progress) -> dict[str, Any]:
    """plot_data's AFL++ columns for the campaign now, by name."""
    return {
        "relative_time": round(p.elapsed_s(), 3),
        "cycles_done": 0,
        "cur_item": p.current_state or 0,
        "corpus_count": p.states,
        "pending_total": 0,
        "pending_favs": 0,
        "map_size": map_percent(p.pairs_covered),
        "saved_crashes": p.bugs,
        "saved_hangs": 0,
        "max_depth": p.deepest_waypoint,
        "execs_per_sec": _execs_per_sec(p),
        "total_execs": _execs(p),
        "edges_found": p.pairs_covered,
    }
