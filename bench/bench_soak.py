"""Does a long campaign hold its memory and CPU? A soak: one example-SUT campaign (`mallory
fuzz`, netns backend) for --duration (default 2 h), with the resident memory (VmRSS) and
CPU time of every process of the campaign sampled every --interval seconds (default 60):
the fuzz process, the mediator, each observer, each SUT node. Processes are named by role
and node from the run's journal ("mediator", "observer n2", "sut n1"); a restarted one
continues its role's series (its CPU time counted from its own start).

Prints, per role: RSS at the first sample after --warmup (default 5 min) and at the end,
the growth per hour (least-squares slope of RSS over the samples after the warm-up), the
peak, and the mean CPU share; then, for the mediator and one observer, the files mapped
into them with the most resident memory (from /proc/PID/smaps: shared libraries such as
numpy's show what a process loads). Targets of the issue: growth flat, observer RSS at
most 40 MB. Every sample also goes to OUT/soak.csv (time_s, role, pid, rss_mb, cpu_s).

Run as root, from the repository (builds the example SUT with mallory-cc first):

    .venv/bin/python bench/bench_soak.py [--duration 2h] [--interval 60] [--out out/soak]

The campaign itself is OUT/campaign (its output in OUT/campaign.log): `mallory report` reads it.
"""

from __future__ import annotations

import argparse
import csv
import os
import re
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
from mallory.cluster.registry import ProcessId, load_run  # noqa: E402
from mallory.commands.fuzz import parse_duration  # noqa: E402
from mallory.errors import MalloryError  # noqa: E402
from mallory.harness.sut_make import make_with_mallory_cc  # noqa: E402

EXAMPLE_DIR = REPO / "suts" / "example"
OBSERVER_RSS_TARGET_MB = 40.0

# -- pure parts (tests/unit/bench/test_soak.py) ------------------------------------------------


def rss_mb(status_text: str) -> float | None:
    """VmRSS of a /proc/PID/status, in MB (None: a kernel thread or a zombie has none)."""
    found = re.search(r"^VmRSS:\s+(\d+) kB", status_text, re.MULTILINE)
    return int(found.group(1)) / 1024 if found else None


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


@dataclass(frozen=True)
class Sample:
    time_s: float
    role: str
    pid: int
    rss_mb: float
    cpu_s: float


@dataclass(frozen=True)
class RoleSummary:
    role: str
    start_mb: float
    end_mb: float
    peak_mb: float
    growth_mb_per_h: float | None
    cpu_share: float | None  # of one core, over the samples after the warm-up
    restarts: int


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
        out.append(RoleSummary(role, late[0].rss_mb, late[-1].rss_mb, max(s.rss_mb for s in mine),
                               growth_per_hour([(s.time_s, s.rss_mb) for s in late]),
                               sum(cpu) / len(cpu) if cpu else None, len({s.pid for s in mine}) - 1))
    return out


def render(summaries: Sequence[RoleSummary]) -> str:
    lines = [f"{'process':<14} {'RSS start MB':>12} {'RSS end MB':>10} {'peak MB':>8} {'growth MB/h':>11} "
             f"{'CPU %':>6} {'restarts':>8}"]
    for s in summaries:
        growth = "-" if s.growth_mb_per_h is None else f"{s.growth_mb_per_h:+.2f}"
        cpu = "-" if s.cpu_share is None else f"{100 * s.cpu_share:.1f}"
        lines.append(f"{s.role:<14} {s.start_mb:>12.1f} {s.end_mb:>10.1f} {s.peak_mb:>8.1f} {growth:>11} {cpu:>6} "
                     f"{s.restarts:>8}")
    observers = [s for s in summaries if s.role.startswith("observer")]
    if observers:
        worst = max(s.peak_mb for s in observers)
        lines.append(f"\nobserver RSS at most {worst:.1f} MB (target <= {OBSERVER_RSS_TARGET_MB:.0f} MB)")
    return "\n".join(lines)


# -- the live parts ---------------------------------------------------------------------------


def sample_process(pid: int, role: str, time_s: float, ticks: int) -> Sample | None:
    try:
        rss = rss_mb(Path(f"/proc/{pid}/status").read_text())
        cpu = cpu_seconds(Path(f"/proc/{pid}/stat").read_text(), ticks)
    except (OSError, ValueError):
        return None  # gone meanwhile
    return None if rss is None else Sample(round(time_s, 1), role, pid, rss, cpu)


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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", default="2h", help="campaign time (default 2h)")
    parser.add_argument("--interval", type=float, default=60.0, help="seconds between samples (default 60)")
    parser.add_argument("--warmup", type=float, default=300.0, help="seconds left out of start and growth (default 300)")
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
    ticks = os.sysconf("SC_CLK_TCK")
    samples: list[Sample] = []
    mappings: dict[str, list[tuple[str, int]]] = {}
    directory = CampaignDir(campaign)
    with open(args.out / "campaign.log", "w") as log:
        fuzz = subprocess.Popen(argv, cwd=REPO, stdout=log, stderr=subprocess.STDOUT)
    t0 = time.monotonic()
    deadline = t0 + parse_duration(args.duration) + 600  # start-up, calibration, the last schedule
    try:
        while fuzz.poll() is None and time.monotonic() < deadline:
            now = time.monotonic() - t0
            run = directory.read_stats().get("cluster_run")
            roles = {"fuzz": fuzz.pid, **(running_processes(run) if run else {})}
            batch = [s for role, pid in roles.items() if (s := sample_process(pid, role, now, ticks)) is not None]
            samples += batch
            if now >= args.warmup:  # what the mediator and an observer map, once settled
                for role in ("mediator", "observer n1"):
                    if role not in mappings and role in roles:
                        mappings[role] = largest_mappings(roles[role])
            print(f"  {now / 60:6.1f} min: " + ", ".join(f"{s.role} {s.rss_mb:.0f} MB" for s in batch),
                  file=sys.stderr, flush=True)
            try:
                fuzz.wait(timeout=args.interval)  # the pause between samples, cut short by the campaign's end
            except subprocess.TimeoutExpired:
                pass
    finally:
        if fuzz.poll() is None:
            fuzz.terminate()  # Ctrl-C's way: the campaign ends after its step and removes its cluster
            try:
                fuzz.wait(timeout=300)
            except subprocess.TimeoutExpired:
                fuzz.kill()
                fuzz.wait()
    with open(args.out / "soak.csv", "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["time_s", "role", "pid", "rss_mb", "cpu_s"])
        writer.writerows((s.time_s, s.role, s.pid, round(s.rss_mb, 2), round(s.cpu_s, 2)) for s in samples)
    print(f"campaign exit {fuzz.returncode}; {len(samples)} samples in {args.out / 'soak.csv'}\n")
    print(render(summarize(samples, args.warmup)))
    for role, top in mappings.items():
        print(f"\nlargest resident mappings of the {role}:")
        for path, kb in top:
            print(f"  {kb / 1024:8.1f} MB  {path}")
    return 0 if fuzz.returncode == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
