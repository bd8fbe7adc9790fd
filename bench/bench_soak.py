"""Does a long campaign hold its memory and CPU? A soak: one example-SUT campaign (`mallory
fuzz`, netns backend) for --duration (default 2 h), with the memory and CPU time of every
process of the campaign sampled every --interval seconds (default 60): the fuzz process,
the mediator, each observer, each SUT node. Processes are named by role and node from the
run's journal ("mediator", "observer n2", "sut n1"); a restarted one continues its role's
series (its CPU time counted from its own start).

Memory per process: VmRSS, and what it is made of (/proc/PID/status: RssAnon, the heap and
malloc arenas; RssFile, mapped files and libraries; RssShmem, shared memory such as a
node's event ring, which the SUT and its observer both count), and Pss
(/proc/PID/smaps_rollup: shared pages split between the processes that map them). Each
round also reads the mediator's ingested event count (its /metrics, with the run's token),
which gives the cluster's event rate: memory that grows with the SUT's load is told from a
leak by its growth at constant load (a fit of RssAnon on time and event rate together).

Prints, per role: RSS at the first sample after --warmup (default 5 min) and at the end,
the growth per hour (least-squares slope of RSS over the samples after the warm-up), the
peak, and the mean CPU share; then each kind of memory at the end with its growth per hour
and RssAnon's growth at constant load, next to the event rate and its growth; then, for the
mediator and one observer, the files mapped into them with the most resident memory (from
/proc/PID/smaps: shared libraries such as numpy's show what a process loads); last, the
mediator's window counters as last read (entries retained and dropped by its bounded
buffer, windows truncated by it). Targets of the issue: growth flat, observer RSS at most
40 MB. Every sample also goes to OUT/soak.csv.

RSS cannot tell a leak from the high-water mark of a burst (memory freed after a burst mostly
stays resident). So each round also keeps the mediator's own account of its memory (its
/metrics "memory": live Python blocks, pymalloc's arenas, glibc malloc's chunks in use and
free, threads, and the sizes of its traffic-bounded tables; mallory/mediator/memory.py) in OUT/mediator_memory.csv,
and the summary gives each one's growth per hour after the warm-up, and RssAnon's growth at
a constant *peak* event rate (a fit on time and the highest rate so far): a leak grows at a
constant load, in Python blocks or malloc's chunks in use; a high-water mark grows only with
a new peak, between peaks in free chunks at most.

The example SUT keeps its log across schedules and a restarted node re-applies all of it,
so its event rate grows through a campaign; --stationary runs the campaign with
`--fresh-data` (every schedule starts from empty data) for a load that stays level.

Run as root, from the repository (builds the example SUT with mallory-cc first):

    .venv/bin/python bench/bench_soak.py [--duration 2h] [--interval 60] [--stationary] [--out out/soak]

The campaign itself is OUT/campaign (its output in OUT/campaign.log): `mallory report` reads it.
"""

from __future__ import annotations

import argparse
import csv
import os
import re
import signal
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from mallory.campaign.directory import CampaignDir  # noqa: E402
from mallory.campaign.observed import TOKEN_FILE  # noqa: E402
from mallory.cluster.netns import ClusterLayout  # noqa: E402
from mallory.cluster.registry import ProcessId, load_run  # noqa: E402
from mallory.commands.fuzz import parse_duration  # noqa: E402
from mallory.errors import MalloryError  # noqa: E402
from mallory.harness.sut_make import make_with_mallory_cc  # noqa: E402
from mallory.mediator import API_PORT  # noqa: E402
from mallory.mediator.client import MediatorClient  # noqa: E402

EXAMPLE_DIR = REPO / "suts" / "example"
OBSERVER_RSS_TARGET_MB = 40.0

# -- pure parts (tests/unit/bench/test_soak.py) ------------------------------------------------


#: the kinds of memory sampled, by their field in /proc/PID/status (RSS is their sum)
STATUS_FIELDS = {"rss": "VmRSS", "anon": "RssAnon", "file": "RssFile", "shmem": "RssShmem"}


def status_memory_mb(status_text: str) -> dict[str, float] | None:
    """VmRSS, RssAnon, RssFile and RssShmem of a /proc/PID/status in MB, under the keys of
    STATUS_FIELDS (None: a kernel thread or a zombie has no VmRSS)."""
    out = {}
    for key, name in STATUS_FIELDS.items():
        found = re.search(rf"^{name}:\s+(\d+) kB", status_text, re.MULTILINE)
        if found is None:
            return None
        out[key] = int(found.group(1)) / 1024
    return out


def pss_mb(smaps_rollup_text: str) -> float | None:
    """Pss of a /proc/PID/smaps_rollup in MB (None: it has none)."""
    found = re.search(r"^Pss:\s+(\d+) kB", smaps_rollup_text, re.MULTILINE)
    return int(found.group(1)) / 1024 if found else None


def event_rates(counts: Sequence[tuple[float, int]]) -> dict[float, float]:
    """Events per minute at each (seconds, events ingested so far) reading but the first,
    over the time since the one before; none across a counter that went back (a new
    mediator)."""
    return {t1: (e1 - e0) / (t1 - t0) * 60 for (t0, e0), (t1, e1) in zip(counts, counts[1:])
            if t1 > t0 and e1 >= e0}


def cpu_seconds(stat_text: str, ticks_per_s: int) -> float:
    """utime + stime of a /proc/PID/stat, in seconds (fields 14 and 15; the command name,
    field 2, may hold spaces and parentheses)."""
    fields = stat_text[stat_text.rindex(")") + 2:].split()
    return (int(fields[11]) + int(fields[12])) / ticks_per_s


def role_of(entry: Mapping) -> str:
    """A journaled process's role: "mediator", "observer n2", "sut n1"."""
    return entry["name"] if entry["node"] == "gw" else f"{entry['name']} {entry['node']}"


def growth_per_hour(points: Sequence[tuple[float, float]]) -> float | None:
    """The least-squares slope of (seconds, MB) points, in MB per hour (None: fewer than two
    distinct times)."""
    if len({t for t, _ in points}) < 2:
        return None
    n = len(points)
    mean_t = sum(t for t, _ in points) / n
    mean_v = sum(v for _, v in points) / n
    covariance = sum((t - mean_t) * (v - mean_v) for t, v in points)
    variance = sum((t - mean_t) ** 2 for t, _ in points)
    return covariance / variance * 3600


def growth_at_constant_load(points: Sequence[tuple[float, float, float]]) -> tuple[float, float] | None:
    """(MB per hour at a constant event rate, MB per 1000 events/min at a constant time):
    the least-squares fit of MB = a + b * seconds + c * (events/min) over (seconds,
    events/min, MB) points. None when time and rate cannot be told apart: fewer than three
    points, or a rate that moved in step with time (|correlation| above 0.97). At a rate
    that never moved, the growth is the plain one and the rate's share 0."""
    if len(points) < 3:
        return None
    n = len(points)
    mean_t, mean_r, mean_v = (sum(p[i] for p in points) / n for i in range(3))
    tt = sum((t - mean_t) ** 2 for t, _, _ in points)
    rr = sum((r - mean_r) ** 2 for _, r, _ in points)
    tr = sum((t - mean_t) * (r - mean_r) for t, r, _ in points)
    tv = sum((t - mean_t) * (v - mean_v) for t, _, v in points)
    rv = sum((r - mean_r) * (v - mean_v) for _, r, v in points)
    if tt == 0:
        return None
    if rr == 0:
        return tv / tt * 3600, 0.0
    if tr * tr > 0.97 ** 2 * tt * rr:
        return None
    det = tt * rr - tr * tr
    return (tv * rr - rv * tr) / det * 3600, (rv * tt - tv * tr) / det * 1000


def growth_beyond_peak(points: Sequence[tuple[float, float, float]]) -> tuple[float, float] | None:
    """`growth_at_constant_load` of (seconds, events/min, MB) points against the highest rate
    so far instead of the rate now: memory that keeps a burst's high-water mark follows the
    peak, not the current load, so what grows at a constant peak is what no burst explains."""
    peak = float("-inf")
    running = []
    for t, rate, mb in sorted(points):
        peak = max(peak, rate)
        running.append((t, peak, mb))
    return growth_at_constant_load(running)


#: the columns of OUT/mediator_memory.csv after time_s, from the mediator's /metrics "memory"
MEMORY_COLUMNS = ("rss_mb", "anon_mb", "python_blocks", "pymalloc_arenas_mb", "pymalloc_blocks_mb",
                  "malloc_in_use_mb", "malloc_free_mb", "malloc_heap_mb", "malloc_mmap_mb", "other_anon_mb",
                  "free_ms", "threads", "seen_packets", "sends_remembered", "pending_events", "early_batches", "join_waiting")


def memory_row(memory: Mapping) -> dict[str, float | None]:
    """The mediator's /metrics "memory" section as MEMORY_COLUMNS (None: not reported, such as
    malloc's account without glibc's mallinfo2). `other_anon_mb` is RssAnon less what the
    allocators hold (pymalloc's arenas, malloc's heaps and mmapped chunks): thread stacks and
    C libraries' own mappings, less heap pages malloc_trim made non-resident. No pymalloc
    account counts as no arenas: the mediator runs without pymalloc (PYTHONMALLOC=malloc,
    campaign/observed.py), its small objects in malloc's heaps."""
    malloc = memory.get("malloc") or {}
    pymalloc = memory.get("pymalloc") or {}
    held = memory.get("held") or {}
    row = {k: memory.get(k) for k in ("rss_mb", "anon_mb", "python_blocks", "free_ms", "threads")}
    row.update({f"malloc_{k}": malloc.get(k) for k in ("in_use_mb", "free_mb", "heap_mb", "mmap_mb")})
    row.update({f"pymalloc_{k}": pymalloc.get(k) for k in ("arenas_mb", "blocks_mb")})
    parts = (row["anon_mb"], row["pymalloc_arenas_mb"] or 0.0, row["malloc_heap_mb"], row["malloc_mmap_mb"])
    row["other_anon_mb"] = None if None in parts else round(parts[0] - sum(parts[1:]), 2)
    row.update({k: held.get(k) for k in ("seen_packets", "sends_remembered", "pending_events", "early_batches",
                                         "join_waiting")})
    return {k: row[k] for k in MEMORY_COLUMNS}


def render_memory(rows: Sequence[tuple[float, Mapping]], warmup_s: float,
                  anon_points: Sequence[tuple[float, float, float]]) -> str:
    """The mediator's own memory account: per MEMORY_COLUMNS its value at the end and its
    growth per hour after the warm-up ((seconds, memory_row) rows); then RssAnon's
    `growth_beyond_peak` over (seconds, events/min, MB) points."""
    late = [(t, row) for t, row in rows if t >= warmup_s] or list(rows)
    lines = ["mediator memory (its /metrics): at the end, growth per hour after the warm-up"]
    for column in MEMORY_COLUMNS:
        points = [(t, row[column]) for t, row in late if row.get(column) is not None]
        if points:
            lines.append(f"  {column:<18} {points[-1][1]:>12.2f} {_signed(growth_per_hour(points)):>12}/h")
    fit = growth_beyond_peak(anon_points)
    if fit is not None:
        lines.append(f"RssAnon at a constant peak event rate: {_signed(fit[0])} MB/h, "
                     f"{_signed(fit[1], 3)} MB per 1000 events/min of a new peak")
    lines.append("A leak grows at a constant load (python_blocks, malloc_in_use_mb, a table below its bound);\n"
                 "a burst's high-water mark grows with a new peak only (malloc_free_mb, RSS flat between peaks);\n"
                 "pymalloc arenas that grow while its blocks do not are fragmentation.")
    return "\n".join(lines)


def smaps_by_file(smaps_text: str) -> dict[str, int]:
    """Resident kB per mapped file of a /proc/PID/smaps ("[anon]" for anonymous memory,
    "[heap]", "[stack]" as the kernel names them)."""
    out: dict[str, int] = defaultdict(int)
    current = "[anon]"
    for line in smaps_text.splitlines():
        head = line.split(None, 5)
        if len(head) >= 5 and "-" in head[0] and ":" in head[3]:  # a mapping's header line
            current = head[5].strip() if len(head) == 6 and head[5].strip() else "[anon]"
        elif line.startswith("Rss:"):
            out[current] += int(line.split()[1])
    return dict(out)


#: the kinds of memory a summary reports at the end with their growth, as Sample fields
KINDS = ("anon_mb", "file_mb", "shmem_mb", "pss_mb")


@dataclass(frozen=True)
class Sample:
    time_s: float
    role: str
    pid: int
    rss_mb: float
    cpu_s: float
    anon_mb: float = 0.0
    file_mb: float = 0.0
    shmem_mb: float = 0.0
    pss_mb: float = 0.0
    events_per_min: float | None = None  # the cluster's event rate at this sampling round


@dataclass(frozen=True)
class RoleSummary:
    role: str
    start_mb: float
    end_mb: float
    peak_mb: float
    growth_mb_per_h: float | None
    cpu_share: float | None  # of one core, over the samples after the warm-up
    restarts: int
    end_by_kind: dict[str, float]  # KINDS -> MB at the last sample
    growth_by_kind: dict[str, float | None]  # KINDS -> MB per hour after the warm-up
    #: RssAnon's growth_at_constant_load after the warm-up (None: not enough rate samples,
    #: or a rate that moved in step with time)
    anon_at_constant_load: tuple[float, float] | None = None


def summarize(samples: Sequence[Sample], warmup_s: float) -> list[RoleSummary]:
    """Per role, over the samples after the warm-up (all of them when none is later)."""
    by_role: dict[str, list[Sample]] = defaultdict(list)
    for sample in samples:
        by_role[sample.role].append(sample)
    out = []
    for role, mine in sorted(by_role.items()):
        mine.sort(key=lambda s: s.time_s)
        late = [s for s in mine if s.time_s >= warmup_s] or mine
        cpu = [(b.cpu_s - a.cpu_s) / (b.time_s - a.time_s) for a, b in zip(late, late[1:])
               if a.pid == b.pid and b.time_s > a.time_s]
        loaded = [(s.time_s, s.events_per_min, s.anon_mb) for s in late if s.events_per_min is not None]
        out.append(RoleSummary(role, late[0].rss_mb, late[-1].rss_mb, max(s.rss_mb for s in mine),
                               growth_per_hour([(s.time_s, s.rss_mb) for s in late]),
                               sum(cpu) / len(cpu) if cpu else None, len({s.pid for s in mine}) - 1,
                               {k: getattr(late[-1], k) for k in KINDS},
                               {k: growth_per_hour([(s.time_s, getattr(s, k)) for s in late]) for k in KINDS},
                               growth_at_constant_load(loaded)))
    return out


@dataclass(frozen=True)
class LoadSummary:
    """The cluster's event rate (events per minute) after the warm-up."""

    first: float
    last: float
    mean: float
    growth_per_h: float | None  # events/min per hour


def summarize_load(samples: Sequence[Sample], warmup_s: float) -> LoadSummary | None:
    """The event rate of the sampling rounds after the warm-up (None: no rate was read)."""
    rates = sorted({(s.time_s, s.events_per_min) for s in samples if s.events_per_min is not None})
    late = [r for r in rates if r[0] >= warmup_s] or rates
    if not late:
        return None
    return LoadSummary(late[0][1], late[-1][1], sum(r for _, r in late) / len(late), growth_per_hour(late))


def _signed(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{value:+.{digits}f}"


def render(summaries: Sequence[RoleSummary], load: LoadSummary | None = None) -> str:
    lines = [f"{'process':<14} {'RSS start MB':>12} {'RSS end MB':>10} {'peak MB':>8} {'growth MB/h':>11} "
             f"{'CPU %':>6} {'restarts':>8}"]
    for s in summaries:
        cpu = "-" if s.cpu_share is None else f"{100 * s.cpu_share:.1f}"
        lines.append(f"{s.role:<14} {s.start_mb:>12.1f} {s.end_mb:>10.1f} {s.peak_mb:>8.1f} "
                     f"{_signed(s.growth_mb_per_h):>11} {cpu:>6} {s.restarts:>8}")
    lines += ["", "MB at the end (growth MB/h): RssAnon (heap, malloc arenas), RssFile (libraries),",
              "RssShmem (the ring, in the SUT's and its observer's), Pss (shared pages split); then",
              "RssAnon's growth at a constant event rate, and per 1000 events/min more:",
              f"{'process':<14} {'anon':>15} {'file':>15} {'shmem':>15} {'Pss':>15} {'anon MB/h @load':>16} "
              f"{'anon MB/kev/min':>16}"]
    for s in summaries:
        kinds = " ".join(f"{s.end_by_kind[k]:>6.1f} ({_signed(s.growth_by_kind[k])})".rjust(15) for k in KINDS)
        fit = s.anon_at_constant_load
        at_load, per_rate = ("-", "-") if fit is None else (_signed(fit[0]), _signed(fit[1], 3))
        lines.append(f"{s.role:<14} {kinds} {at_load:>16} {per_rate:>16}")
    if load is not None:
        lines.append(f"\nevent rate (the mediator's ingest): {load.first:.0f}/min after the warm-up, "
                     f"{load.last:.0f}/min at the end, {load.mean:.0f}/min on average, "
                     f"{_signed(load.growth_per_h, 0)}/min per hour")
    observers = [s for s in summaries if s.role.startswith("observer")]
    if observers:
        worst = max(s.peak_mb for s in observers)
        lines.append(f"\nobserver RSS at most {worst:.1f} MB (target <= {OBSERVER_RSS_TARGET_MB:.0f} MB)")
    return "\n".join(lines)


# -- the live parts ---------------------------------------------------------------------------


def sample_process(pid: int, role: str, time_s: float, ticks: int, events_per_min: float | None) -> Sample | None:
    try:
        memory = status_memory_mb(Path(f"/proc/{pid}/status").read_text())
        pss = pss_mb(Path(f"/proc/{pid}/smaps_rollup").read_text())
        cpu = cpu_seconds(Path(f"/proc/{pid}/stat").read_text(), ticks)
    except (OSError, ValueError):
        return None  # gone meanwhile
    if memory is None or pss is None:
        return None
    return Sample(round(time_s, 1), role, pid, memory["rss"], cpu, memory["anon"], memory["file"], memory["shmem"],
                  pss, events_per_min)


class MediatorEvents:
    """The events the run's mediator has ingested so far, from its /metrics: its API listens
    in the gateway namespace on the address the host reaches, with the token the campaign
    wrote to the run's state directory (mode 0600: this bench runs as root). `windows` keeps
    the last window counters read with it (entries retained and dropped by the bounded buffer),
    `memory` the memory account of this very read."""

    def __init__(self, run: str) -> None:
        token = (load_run(run).state_dir / TOKEN_FILE).read_text()
        self.client = MediatorClient(ClusterLayout.load(run).gateway_control_address, API_PORT, token, timeout=5.0)
        self.windows: dict | None = None
        #: the "memory" section of the last read that succeeded (None: none did, or it had none)
        self.memory: dict | None = None

    def count(self) -> int | None:
        try:
            metrics = self.client.metrics()
            self.windows = metrics.get("windows", self.windows)
            count = int(metrics["ingest"]["events"])
        except (MalloryError, KeyError, TypeError, ValueError, AttributeError):
            self.memory = None
            return None  # not up yet, or gone
        self.memory = metrics.get("memory")
        return count


def running_processes(run: str) -> dict[str, int]:
    """role -> pid of the run's journaled processes that run now (the latest of each role)."""
    try:
        entries = load_run(run).entries()
    except MalloryError:
        return {}
    out = {}
    for entry in entries:
        if "proc" in entry and ProcessId(int(entry["proc"]), entry.get("start")).alive():
            out[role_of(entry)] = int(entry["proc"])
    return out


def largest_mappings(pid: int, top: int = 8) -> list[tuple[str, int]]:
    try:
        by_file = smaps_by_file(Path(f"/proc/{pid}/smaps").read_text())
    except OSError:
        return []
    return sorted(by_file.items(), key=lambda item: -item[1])[:top]


class _StopSoak(Exception):
    """SIGTERM or Ctrl-C: stop sampling; the campaign ends and the summary covers what was
    sampled (SIGTERM's default action left the campaign running and no summary at all)."""


def _stop_soak(signum: int, frame: object) -> None:
    raise _StopSoak


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", default="2h", help="campaign time (default 2h)")
    parser.add_argument("--interval", type=float, default=60.0, help="seconds between samples (default 60)")
    parser.add_argument("--warmup", type=float, default=300.0, help="seconds left out of start and growth (default 300)")
    parser.add_argument("--stationary", action="store_true",
                        help="run the campaign with --fresh-data: every schedule starts from empty data, so the "
                        "SUT's log (and the events a restart re-applies) does not grow through the soak")
    parser.add_argument("--out", type=Path, default=REPO / "out" / "soak")
    args = parser.parse_args()
    if os.geteuid() != 0:
        print("bench_soak: needs root (network namespaces)", file=sys.stderr)
        return 1
    campaign = args.out / "campaign"
    if (campaign / "campaign.json").exists():
        print(f"{campaign} already holds a campaign: use another --out", file=sys.stderr)
        return 1
    args.out.mkdir(parents=True, exist_ok=True)
    make_with_mallory_cc(EXAMPLE_DIR, None, "the example SUT")
    argv = [sys.executable, "-m", "mallory.cli", "fuzz", "--plain", "--sut", str(EXAMPLE_DIR / "example.toml"),
            "--nodes", "3", "--duration", args.duration, "--workload", "register", "--out", str(campaign)]
    if args.stationary:
        argv.append("--fresh-data")
    ticks = os.sysconf("SC_CLK_TCK")
    samples: list[Sample] = []
    counts: list[tuple[float, int]] = []  # (seconds, events the mediator ingested so far)
    memory_rows: list[tuple[float, dict]] = []  # (seconds, memory_row of the mediator's /metrics)
    mediator: MediatorEvents | None = None
    mappings: dict[str, list[tuple[str, int]]] = {}
    directory = CampaignDir(campaign)
    with open(args.out / "campaign.log", "w") as log:
        fuzz = subprocess.Popen(argv, cwd=REPO, stdout=log, stderr=subprocess.STDOUT)
    t0 = time.monotonic()
    deadline = t0 + parse_duration(args.duration) + 600  # start-up, calibration, the last schedule
    signal.signal(signal.SIGTERM, _stop_soak)
    signal.signal(signal.SIGINT, _stop_soak)
    try:
        while fuzz.poll() is None and time.monotonic() < deadline:
            now = time.monotonic() - t0
            run = directory.read_stats().get("cluster_run")
            roles = {"fuzz": fuzz.pid, **(running_processes(run) if run else {})}
            if mediator is None and "mediator" in roles:
                try:
                    mediator = MediatorEvents(run)
                except (OSError, MalloryError):
                    pass  # its token or layout not written yet: next round
            count = mediator.count() if mediator is not None else None
            if count is not None:
                counts.append((now, count))
                if mediator.memory is not None:
                    memory_rows.append((round(now, 1), memory_row(mediator.memory)))
            rate = event_rates(counts[-2:]).get(now)
            batch = [s for role, pid in roles.items()
                     if (s := sample_process(pid, role, now, ticks, rate)) is not None]
            samples += batch
            if now >= args.warmup:  # what the mediator and an observer map, once settled
                for role in ("mediator", "observer n1"):
                    if role not in mappings and role in roles:
                        mappings[role] = largest_mappings(roles[role])
            print(f"  {now / 60:6.1f} min: " + ("" if rate is None else f"{rate:.0f} events/min, ")
                  + ", ".join(f"{s.role} {s.rss_mb:.0f} MB" for s in batch), file=sys.stderr, flush=True)
            try:
                fuzz.wait(timeout=args.interval)  # the pause between samples, cut short by the campaign's end
            except subprocess.TimeoutExpired:
                pass
    except _StopSoak:
        print(f"  stopped at {(time.monotonic() - t0) / 60:.1f} min: ending the campaign", file=sys.stderr, flush=True)
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        if fuzz.poll() is None:
            fuzz.terminate()  # Ctrl-C's way: the campaign ends after its step and removes its cluster
            try:
                fuzz.wait(timeout=300)
            except subprocess.TimeoutExpired:
                fuzz.kill()
                fuzz.wait()
    with open(args.out / "soak.csv", "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["time_s", "role", "pid", "rss_mb", "anon_mb", "file_mb", "shmem_mb", "pss_mb", "cpu_s",
                         "events_per_min"])
        writer.writerows((s.time_s, s.role, s.pid, round(s.rss_mb, 2), round(s.anon_mb, 2), round(s.file_mb, 2),
                          round(s.shmem_mb, 2), round(s.pss_mb, 2), round(s.cpu_s, 2),
                          "" if s.events_per_min is None else round(s.events_per_min)) for s in samples)
    with open(args.out / "mediator_memory.csv", "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["time_s", *MEMORY_COLUMNS])
        writer.writerows((t, *("" if row[k] is None else row[k] for k in MEMORY_COLUMNS)) for t, row in memory_rows)
    print(f"campaign exit {fuzz.returncode}; {len(samples)} samples in {args.out / 'soak.csv'}\n")
    print(render(summarize(samples, args.warmup), summarize_load(samples, args.warmup)))
    if memory_rows:
        anon = [(s.time_s, s.events_per_min, s.anon_mb) for s in samples
                if s.role == "mediator" and s.events_per_min is not None and s.time_s >= args.warmup]
        print("\n" + render_memory(memory_rows, args.warmup, anon))
    for role, top in mappings.items():
        print(f"\nlargest resident mappings of the {role}:")
        for path, kb in top:
            print(f"  {kb / 1024:8.1f} MB  {path}")
    if mediator is not None and mediator.windows is not None:
        print("\nmediator windows (last read): " + ", ".join(f"{k} {v}" for k, v in mediator.windows.items()))
    return 0 if fuzz.returncode == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
