"""Does Mallory survive its own faults? Kill trials: each trial starts a short example-SUT
campaign (`mallory fuzz`, netns backend), SIGKILLs one of its parts at a random moment,
runs `mallory cleanup RUN` (and `mallory fuzz --resume` where the campaign died), and
counts what went wrong.

Victims, in turn (trial i kills VICTIMS[i % 4]):

    fuzz          the `mallory fuzz` process: the cluster is left running; cleanup removes
                  it, --resume continues the campaign
    mediator      the gateway process: the campaign must end within a step (exit 69, its
                  cluster removed) and --resume continue it
    observer      the observer of n1 or n2 (the probe's path, below): the campaign must
                  restart it and go on (exit 0)
    observer+sut  that and the node's SUT process together: the same, and the SUT restarted
                  by the schedule's reset

Counted per trial:

    leaks         after cleanup (and after the resumed campaign): namespaces, the host link,
                  iptables lines of the run's addresses, processes the run's journal named
                  (or that mention `--run RUN`), shm segments, processes left paused
                  (SIGSTOP), and the run's state directory
    blackholed    seconds of probe packets lost while no fault asked for it, not counting
                  those in flight at the kill (below). A probe (this process, no process in
                  the run) sends a UDP datagram every 10 ms from n1's namespace to n2's,
                  through both observers' queues and the mediator's; the mediator's rules are
                  polled every 100 ms (its /status, with the token from the run's state
                  directory). A lost probe is unasked when every poll within RULE_MARGIN of
                  its sending saw no drop or delay rule on n1->n2 (a dead mediator holds no
                  rule). Measured from the first step until the campaign starts tearing its
                  cluster down (the first observer or mediator found dead that the trial did
                  not kill), or, when the fuzz process was killed, until cleanup. Target 0:
                  a dead part must not stop the SUT's traffic (--queue-bypass, fail-open)
    in flight     probes lost unasked that sat in the killed reader's queue when it died
                  (count and seconds; mediator and observer victims only, which read an
                  NFQUEUE queue). Linux drops them and nothing in user space can prevent it:
                  the reader's death releases its netlink socket, NETLINK_URELEASE makes
                  nfqnl_rcv_nl_event() call __instance_destroy() on its queue, which unlinks
                  it (later packets find no queue and --queue-bypass lets them by) and
                  call_rcu()s instance_destroy_rcu() -> nfqnl_flush(inst, NULL, 0) ->
                  nfqnl_reinject(entry, NF_DROP) for every packet still queued
                  (net/netfilter/nfnetlink_queue.c; mainline blob 8b7b39d8a109, January
                  2026: the NF_DROP at line 412). In flight: sent no earlier than
                  IN_FLIGHT_BEFORE before the kill (the bench's time.time_ns() just before
                  its SIGKILL, the clock of the probe's send stamps) and no later than the
                  reader's exit as this process saw it (a pidfd opened before the kill turns
                  readable once the process is gone, after do_exit() released its files, the
                  netlink socket among them: a probe stamped later cannot have entered the
                  dead queue, and a stamp precedes its packet's sendto). IN_FLIGHT_BEFORE
                  (200 ms) bounds how long an unfaulted probe takes through the three
                  queues: each reader gives its verdicts as soon as it reads (the observer
                  before it looks at the packets, mallory/observer/nfq.py `drain`; the
                  mediator per slice of 64, mallory/mediator/firewall.py `_loop`), and
                  between reads does one bounded piece of work: the observer a cut of at
                  most MAX_BATCH_EVENTS events every 0.1 s and a log poll, the mediator its
                  queued rule changes; a Python thread waits 5 ms per switch for the GIL.
                  Twice the observer's cut interval is a wide bound on that, and a probe
                  lost earlier before the kill stays blackholed (so does any probe lost
                  after the reader's exit, or around a kill of the fuzz process, which
                  reads no queue). Each trial records the offsets of its in-flight probes
                  from the kill, the reader's time to exit, and the longest transit of an
                  unasked probe received within 1 s of the kill (`transit_near_kill_ms`),
                  which must stay well under IN_FLIGHT_BEFORE for the bound to hold
    lost          steps done but recorded in no schedule when the campaign died, and the
                  schedules they belonged to (target: at most the one in flight)
    resume        whether `mallory fuzz --resume DIR --schedules 1` succeeded and continued
                  at the schedule in flight
    gap findings  bug bundles or schedule findings from schedules with an unobserved gap
                  (target 0: a gap's findings are kept out, as unobserved_findings)
    detection     for observer victims: seconds from the kill to the start of the restarted
                  observer (the watchdog looks once per step: target about a window)

Run as root, from the repository (builds the example SUT with mallory-cc first; each trial
about 1-2 minutes on a 2-core machine). The closing note wants >= 100 trials:

    .venv/bin/python bench/bench_kill_trials.py [--trials 20] [--seed 1] [--out out/kill-trials] [--json FILE]

Campaigns go to OUT/trial-NNN/ with their output in OUT/trial-NNN.log.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import select
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from mallory.campaign.directory import CampaignDir  # noqa: E402
from mallory.campaign.observed import TOKEN_FILE  # noqa: E402
from mallory.cluster.netns import ClusterLayout  # noqa: E402
from mallory.cluster.registry import (  # noqa: E402
    ProcessId,
    list_runs,
    load_run,
    proc_start_ticks,
    proc_state,
)
from mallory.errors import MalloryError  # noqa: E402
from mallory.harness.sut_make import make_with_mallory_cc  # noqa: E402
from mallory.mediator import API_PORT  # noqa: E402
from mallory.mediator.client import MediatorClient  # noqa: E402
from mallory.report.campaign_data import parse_plot_data  # noqa: E402

VICTIMS = ("fuzz", "mediator", "observer", "observer+sut")
EXAMPLE_DIR = REPO / "suts" / "example"
FAULTS = "partition,kill,pause,delay,clock"
STEPS = 3
PROBE_PORT = 47_000
PROBE_INTERVAL_S = 0.01
POLL_INTERVAL_S = 0.1
RULE_MARGIN_NS = 300_000_000  # rule changes vs probe timing: polls are 100 ms apart
PROBE_LINK = ("n1", "n2")
QUEUE_READERS = ("mediator", "observer", "observer+sut")  # victims whose death flushes an NFQUEUE queue
IN_FLIGHT_BEFORE_NS = 200_000_000  # the longest an unfaulted probe takes through the queues (see above)
DEATH_WAIT_S = 2.0  # how long the bench waits to see a killed queue reader exit
NEAR_KILL_NS = 1_000_000_000  # the probes whose transit is recorded: sent this close to the kill

# -- pure parts (tests/unit/bench/test_kill_trials.py) -----------------------------------------

FAULTED, CLEAR, UNKNOWN = "faulted", "clear", "unknown"


def link_state(status: Mapping, link: tuple[str, str]) -> str:
    """From the mediator's /status: FAULTED when a rule drops or delays packets on `link`."""
    for rule in status.get("firewall", {}).get("rules", []):
        if (rule.get("src"), rule.get("dst")) == link and (rule.get("drop") or rule.get("delay_ms")):
            return FAULTED
    return CLEAR


def unasked(samples: Sequence[tuple[int, str]], t_ns: int, margin_ns: int = RULE_MARGIN_NS) -> bool:
    """Whether a packet sent at t_ns met no fault anyone asked for: the polls around it
    (every sample within margin_ns, and the last one before and the first one after, each
    no farther than margin_ns) all saw the link CLEAR. `samples` are (time, state), sorted."""
    before = [s for s in samples if s[0] <= t_ns]
    after = [s for s in samples if s[0] > t_ns]
    if not before or not after:
        return False
    if t_ns - before[-1][0] > margin_ns or after[0][0] - t_ns > margin_ns:
        return False  # a gap in the polls: unknown
    near = [state for when, state in samples if abs(when - t_ns) <= margin_ns]
    return all(state == CLEAR for state in [before[-1][1], after[0][1], *near])


def in_flight_window(kill_ns: int, exited_ns: int | None, before_ns: int = IN_FLIGHT_BEFORE_NS) -> tuple[int, int]:
    """The send times [start_ns, end_ns] of the probes that can have been in a queue reader's
    queue when it died: from `before_ns` before the kill to the reader's exit as seen
    (`exited_ns`; the kill itself when its exit was not seen)."""
    return kill_ns - before_ns, max(kill_ns, exited_ns if exited_ns is not None else kill_ns)


@dataclass(frozen=True)
class ProbeLosses:
    """The probes lost unasked, by sequence number, split at a kill: `in_flight` sent within
    the in-flight window, `blackholed` all the others."""

    blackholed: list[int]
    in_flight: list[int]

    def longest_blackhole(self) -> int:
        """The most consecutive probes in `blackholed`."""
        longest = run = 0
        previous = None
        for seq in self.blackholed:
            run = run + 1 if previous is not None and seq == previous + 1 else 1
            longest = max(longest, run)
            previous = seq
        return longest


def probe_losses(sent: Mapping[int, int], received: Iterable[int], samples: Sequence[tuple[int, str]],
                 span: tuple[int, int], in_flight: tuple[int, int] | None = None) -> ProbeLosses:
    """The probes sent within `span` [start_ns, end_ns) that never arrived although no fault
    was asked for (`unasked`), split by `in_flight` (send times [start_ns, end_ns], from
    `in_flight_window`; None when no queue reader was killed: all are blackholed)."""
    got = set(received)
    lost = sorted(seq for seq, t in sent.items() if span[0] <= t < span[1] and seq not in got)
    unasked_lost = [seq for seq in lost if unasked(samples, sent[seq])]
    if in_flight is None:
        return ProbeLosses(unasked_lost, [])
    start, end = in_flight
    return ProbeLosses([seq for seq in unasked_lost if not start <= sent[seq] <= end],
                       [seq for seq in unasked_lost if start <= sent[seq] <= end])


def transit_near(sent: Mapping[int, int], received_at: Mapping[int, int], samples: Sequence[tuple[int, str]],
                 at_ns: int, around_ns: int = NEAR_KILL_NS) -> float | None:
    """The longest transit in ms (arrival minus sending) of a probe sent within `around_ns`
    of `at_ns` that arrived and met no fault anyone asked for; None without one."""
    transits = [received_at[seq] - t for seq, t in sent.items()
                if abs(t - at_ns) <= around_ns and seq in received_at and unasked(samples, t)]
    return round(max(transits) / 1e6, 1) if transits else None


def lost_work(steps_done: int, schedules: Sequence[Mapping], steps_per_schedule: int) -> tuple[int, int]:
    """(steps done but in no recorded schedule, the schedules they made up)."""
    steps = max(0, steps_done - sum(len(r.get("steps", [])) for r in schedules))
    return steps, math.ceil(steps / steps_per_schedule)


def gap_findings(schedules: Sequence[Mapping], bundled: Sequence[Mapping]) -> int:
    """Findings blamed on a schedule with an unobserved gap: in its record's findings, or
    a bug bundle made from it (`bundled`: the bundles' schedule records)."""
    in_records = sum(len(r.get("findings") or []) for r in schedules if r.get("unobserved"))
    return in_records + sum(1 for r in bundled if r.get("unobserved"))


def detection_s(entries: Sequence[dict], killed_pid: int, kill_boottime_s: float) -> float | None:
    """Seconds from the kill to the start of the observer that replaced `killed_pid`."""
    victim = [e for e in entries if int(e.get("proc", -1)) == killed_pid]
    if not victim:
        return None
    node = victim[0]["node"]
    after = [e for e in entries if e.get("name") == "observer" and e.get("node") == node
             and int(e["proc"]) != killed_pid and e.get("start") is not None]
    ticks = os.sysconf("SC_CLK_TCK")
    starts = [e["start"] / ticks - kill_boottime_s for e in after]
    starts = [s for s in starts if s >= -1 / ticks]  # started after the kill (to a tick)
    return round(min(starts), 2) if starts else None


LEAK_KINDS = ("netns", "links", "iptables", "processes", "shm", "paused", "state_dirs")


@dataclass
class Trial:
    """One trial's outcome (see the module docstring for each count)."""

    index: int
    victim: str
    seed: int
    started: bool = False
    killed: list[int] = field(default_factory=list)
    kill_after_s: float = 0.0
    exit_code: int | None = None
    leaks: dict[str, int] = field(default_factory=lambda: dict.fromkeys(LEAK_KINDS, 0))
    leak_details: list[str] = field(default_factory=list)
    blackholed_s: float = 0.0
    longest_blackhole_s: float = 0.0
    in_flight_probes: int = 0
    in_flight_s: float = 0.0
    in_flight_offsets_ms: list[float] = field(default_factory=list)  # each one's sending minus the kill
    reader_exit_ms: float | None = None  # from the kill to the killed queue reader's exit, as seen
    transit_near_kill_ms: float | None = None  # see transit_near
    probes_sent: int = 0
    steps_lost: int = 0
    schedules_lost: int = 0
    resumed: bool | None = None  # None: no resume in this trial
    gap_findings: int = 0
    unobserved_gaps: int = 0
    detection_s: float | None = None
    error: str = ""

    @property
    def leaked(self) -> int:
        return sum(self.leaks.values())


def max_or_dash(values: Iterable[float | None]) -> str:
    """The largest of the values that are not None, or '-' when none is."""
    known = [v for v in values if v is not None]
    return str(max(known)) if known else "-"


def summarize(trials: Sequence[Trial]) -> tuple[str, bool]:
    """The per-victim table and the closing figures; whether every target was met."""
    lines = [f"{'victim':<13} {'trials':>6} {'started':>7} {'leaks':>5} {'blackholed s':>12} {'longest s':>9} "
             f"{'in flight':>9} {'in flight s':>11} {'lost steps':>10} {'lost sched':>10} {'resume ok':>9} "
             f"{'gap finds':>9} {'detect s':>8}"]
    for victim in VICTIMS:
        mine = [t for t in trials if t.victim == victim]
        if not mine:
            continue
        resumes = [t.resumed for t in mine if t.resumed is not None]
        detections = [t.detection_s for t in mine if t.detection_s is not None]
        lines.append(
            f"{victim:<13} {len(mine):>6} {sum(t.started for t in mine):>7} {sum(t.leaked for t in mine):>5} "
            f"{sum(t.blackholed_s for t in mine):>12.2f} {max(t.longest_blackhole_s for t in mine):>9.2f} "
            f"{sum(t.in_flight_probes for t in mine):>9} {sum(t.in_flight_s for t in mine):>11.2f} "
            f"{sum(t.steps_lost for t in mine):>10} {max(t.schedules_lost for t in mine):>10} "
            f"{(f'{sum(resumes)}/{len(resumes)}' if resumes else '-'):>9} {sum(t.gap_findings for t in mine):>9} "
            f"{(f'{max(detections):.1f}' if detections else '-'):>8}")
    leaks = {kind: sum(t.leaks[kind] for t in trials) for kind in LEAK_KINDS}
    total = {
        "trials": len(trials),
        "leaks": sum(leaks.values()),
        "blackholed_s": round(sum(t.blackholed_s for t in trials), 2),
        "in_flight_probes": sum(t.in_flight_probes for t in trials),
        "in_flight_s": round(sum(t.in_flight_s for t in trials), 2),
        "schedules_lost_max": max((t.schedules_lost for t in trials), default=0),
        "gap_findings": sum(t.gap_findings for t in trials),
        "failed_resumes": sum(1 for t in trials if t.resumed is False),
        "not_started": sum(1 for t in trials if not t.started),
    }
    ok = (total["leaks"] == 0 and total["blackholed_s"] == 0 and total["schedules_lost_max"] <= 1
          and total["gap_findings"] == 0 and total["failed_resumes"] == 0 and total["not_started"] == 0)
    lines += [
        "",
        f"kill trials run        : {total['trials']} ({total['not_started']} did not start)",
        f"leaks                  : {total['leaks']} (target 0): " + ", ".join(f"{k} {n}" for k, n in leaks.items()),
        f"blackholed seconds     : {total['blackholed_s']} (target 0)",
        f"lost in flight at kill : {total['in_flight_probes']} probes, {total['in_flight_s']} s (in the killed "
        f"reader's queue, which Linux drops: reported, no target)",
        f"in-flight window       : sent {IN_FLIGHT_BEFORE_NS // 1_000_000} ms before the kill to the reader's exit "
        f"(seen at most {max_or_dash(t.reader_exit_ms for t in trials)} ms after it); longest unasked transit "
        f"near a kill {max_or_dash(t.transit_near_kill_ms for t in trials)} ms",
        f"schedules lost/resume  : at most {total['schedules_lost_max']} (target <= 1); "
        f"{total['failed_resumes']} resumes failed",
        f"unobserved-step finds  : {total['gap_findings']} (target 0)",
    ]
    return "\n".join(lines), ok


# -- the live parts -----------------------------------------------------------------------------


def in_namespace_socket(namespace: str, address: tuple[str, int]) -> socket.socket:
    """A UDP socket made (and bound) inside `namespace`; it stays there."""
    from tests.live.netns_helpers import in_netns

    with in_netns(namespace):
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        sock.bind(address)
    return sock


class LinkProbe:
    """A datagram every PROBE_INTERVAL_S from one node's namespace to another's: which were
    sent when, and which arrived when (time.time_ns(), as the kill's stamp). Runs in this process (threads), so `mallory cleanup` has
    nothing of it to kill; `stop()` closes its sockets, which would keep the namespaces alive."""

    def __init__(self, layout: ClusterLayout, src: str, dst: str) -> None:
        self.sender = in_namespace_socket(layout.node(src).namespace, (layout.node(src).address, 0))
        self.receiver = in_namespace_socket(layout.node(dst).namespace, (layout.node(dst).address, PROBE_PORT))
        self.receiver.settimeout(0.1)
        self.target = (layout.node(dst).address, PROBE_PORT)
        self.sent: dict[int, int] = {}
        self.received: dict[int, int] = {}
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._send, daemon=True), threading.Thread(target=self._receive, daemon=True)]
        for thread in self._threads:
            thread.start()

    def _send(self) -> None:
        seq = 0
        next_at = time.monotonic()
        while not self._stop.is_set():
            now_ns = time.time_ns()
            try:
                self.sender.sendto(struct.pack("!Q", seq), self.target)
            except OSError:
                pass  # a route gone for a moment: the probe is lost, as the SUT's packets would be
            self.sent[seq] = now_ns
            seq += 1
            next_at += PROBE_INTERVAL_S
            self._stop.wait(max(0.0, next_at - time.monotonic()))

    def _receive(self) -> None:
        while not self._stop.is_set():
            try:
                data = self.receiver.recv(64)
            except (TimeoutError, OSError):
                continue
            if len(data) == 8:
                self.received[struct.unpack("!Q", data)[0]] = time.time_ns()

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(2)
        self.sender.close()
        self.receiver.close()


class RunWatcher:
    """Every POLL_INTERVAL_S: the probe link's rule state at the mediator, and the run's
    journal while it exists. Notes when the campaign starts tearing down: the first journaled
    observer or mediator found dead that the trial did not kill."""

    def __init__(self, run: str, layout: ClusterLayout, token: str) -> None:
        self.run = run
        self.client = MediatorClient(layout.gateway_control_address, API_PORT, token, timeout=0.5)
        self.samples: list[tuple[int, str]] = []
        self.entries: list[dict] = []
        self.killed: set[int] = set()
        self.teardown_ns: int | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)
        self._thread.start()

    def _processes(self, name: str) -> list[dict]:
        return [e for e in self.entries if "proc" in e and e.get("name") == name]

    def _alive(self, entry: dict) -> bool:
        return ProcessId(int(entry["proc"]), entry.get("start")).alive()

    def _poll(self) -> None:
        while not self._stop.wait(POLL_INTERVAL_S):
            try:
                self.entries = load_run(self.run).entries()
            except MalloryError:
                pass  # the run is gone: keep the last journal seen
            mediators = self._processes("mediator")
            mediator_alive = bool(mediators) and self._alive(mediators[-1])
            try:
                state = link_state(self.client.status(), PROBE_LINK)
            except MalloryError:
                state = UNKNOWN if mediator_alive else CLEAR  # a dead mediator holds no rule
            self.samples.append((time.time_ns(), state))
            if self.teardown_ns is None:
                ours = [e for e in self._processes("observer") + mediators if int(e["proc"]) not in self.killed]
                latest = {(e["node"], e["name"]): e for e in ours}  # a restarted observer replaces its predecessor
                if any(not self._alive(e) for e in latest.values()):
                    self.teardown_ns = time.time_ns() - int(POLL_INTERVAL_S * 1e9)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)


def fuzz_argv(out: Path, seed: int, schedules: int) -> list[str]:
    return [sys.executable, "-m", "mallory.cli", "fuzz", "--plain", "--sut", str(EXAMPLE_DIR / "example.toml"),
            "--nodes", "3", "--schedules", str(schedules), "--steps", str(STEPS), "--window", "1.5", "--reset", "1",
            "--workload", "register", "--rate", "20", "--faults", FAULTS, "--calibrate", "0", "--seed", str(seed),
            "--out", str(out)]


def wait_for(predicate: Callable[[], object], timeout: float, process: subprocess.Popen | None = None) -> bool:
    """Poll until `predicate()`; False on timeout or when `process` ends first."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline or (process is not None and process.poll() is not None):
            return False
        time.sleep(0.1)
    return True


def leftovers_of(run: str, layout: ClusterLayout, processes: Iterable[ProcessId]) -> tuple[dict[str, int], list[str]]:
    """What of the run is still on the machine (tests/live/cluster/conftest.py's snapshot,
    with other runs' observer chains left out): of `processes` (known by pid and start, so
    a reused pid is no leak), those still running and those left paused; and any process
    whose command line names the run."""
    from tests.live.cluster.conftest import leftovers

    prefix = layout.supernet.split(".0.0/")[0] + "."
    running = sorted({p.pid for p in processes if p.alive()})
    by_argv = [int(line.split()[0]) for line in subprocess.run(["ps", "-ww", "-eo", "pid,args"], capture_output=True,
                                                                 text=True).stdout.splitlines()[1:]
               if f"--run {run}" in line]
    left = leftovers(run, layout.host_interface, prefix, [*running, *by_argv])
    iptables = {ns: lines for ns, lines in left.iptables.items() if ns in ("", *left.netns) or any(prefix in line for line in lines)}
    paused = [pid for pid in running if proc_state(pid) in ("T", "t")]
    state_dirs = [run] if any(r.name == run for r in list_runs()) else []
    counts = {"netns": len(left.netns), "links": len(left.links), "iptables": sum(map(len, iptables.values())),
              "processes": len(left.processes), "shm": len(left.shm), "paused": len(paused), "state_dirs": len(state_dirs)}
    details = [*left.netns, *left.links, *(f"{ns or 'root'}: {line}" for ns, lines in iptables.items() for line in lines),
               *(f"process {pid}" for pid in left.processes), *left.shm, *(f"paused {pid}" for pid in paused),
               *(f"state dir of {run}" for run in state_dirs)]
    return counts, details


def add_leaks(trial: Trial, counts: Mapping[str, int], details: Sequence[str]) -> None:
    for kind, n in counts.items():
        trial.leaks[kind] += n
    trial.leak_details += list(details)


def victims_of(victim: str, fuzz: subprocess.Popen, entries: Sequence[dict], rng: random.Random) -> list[int]:
    """The pids the trial kills: the fuzz process, or the latest journaled process(es)."""
    def latest(node: str, name: str) -> int:
        return [int(e["proc"]) for e in entries if e.get("node") == node and e.get("name") == name][-1]

    if victim == "fuzz":
        return [fuzz.pid]
    if victim == "mediator":
        return [latest("gw", "mediator")]
    node = rng.choice(PROBE_LINK)  # a node the probe's packets cross
    return [latest(node, "observer")] + ([latest(node, "sut")] if victim == "observer+sut" else [])


def kill_all(pids: Sequence[int], reader: int | None) -> tuple[int, int | None]:
    """SIGKILL `pids`, in order: (time.time_ns() just before the first signal, time.time_ns()
    once the queue reader `reader` has exited, or None when it was not seen to within
    DEATH_WAIT_S). The exit is seen through a pidfd opened before the kill (so a reused pid
    cannot fool it), readable once the whole process is gone."""
    pidfd = None
    if reader is not None:
        try:
            pidfd = os.pidfd_open(reader)
        except ProcessLookupError:
            pass  # gone before the kill: it died of something else, nothing flushed by us
    kill_ns = time.time_ns()
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    if pidfd is None:
        return kill_ns, None
    try:
        readable, _, _ = select.select([pidfd], [], [], DEATH_WAIT_S)
        return kill_ns, (time.time_ns() if readable else None)
    finally:
        os.close(pidfd)


def runs_for(process: subprocess.Popen, seconds: float) -> bool:
    """Wait `seconds`; whether the process still runs then."""
    try:
        process.wait(timeout=seconds)
    except subprocess.TimeoutExpired:
        return True
    return False


def bundle_schedules(directory: CampaignDir) -> list[dict]:
    """The schedule records in the campaign's bug bundles."""
    return [json.loads((b / "schedule.json").read_text()) for b in (directory.root / "bugs").iterdir()
            if b.is_dir() and not b.name.startswith(".") and (b / "schedule.json").exists()]


def steps_in_plot(directory: CampaignDir) -> int:
    """Steps the campaign had done, by its plot_data (a line per step, recorded or not)."""
    path = directory.root / "plot_data"
    rows = parse_plot_data(path.read_text(), str(path)) if path.exists() else []
    return max((row.steps_done for row in rows), default=0)


def cleanup(run: str) -> None:
    """`mallory cleanup RUN` when the run is still registered."""
    if any(r.name == run for r in list_runs()):
        subprocess.run([sys.executable, "-m", "mallory.cli", "cleanup", run], cwd=REPO, capture_output=True,
                       text=True, timeout=120)


def resume(trial: Trial, directory: CampaignDir, log: Path, timeout: float) -> None:
    """`mallory fuzz --resume DIR --schedules 1`: whether it continues at the schedule in
    flight; what its own run leaves behind is counted too."""
    done = directory.schedules_done()
    result = subprocess.run([sys.executable, "-m", "mallory.cli", "fuzz", "--plain", "--resume", str(directory.root),
                             "--schedules", "1"], cwd=REPO, capture_output=True, text=True, timeout=timeout)
    with open(log, "a") as output:
        output.write(f"\n== resume (exit {result.returncode})\n{result.stdout}{result.stderr}")
    trial.resumed = result.returncode == 0 and [r["index"] for r in directory.read_schedules()] == list(range(done + 1))
    run = directory.read_stats().get("cluster_run")
    if run and (directory.root / "cluster.json").exists():
        cleanup(run)
        add_leaks(trial, *leftovers_of(run, ClusterLayout.from_json((directory.root / "cluster.json").read_text()), []))


def run_trial(index: int, victim: str, args: argparse.Namespace, rng: random.Random) -> Trial:
    seed = args.seed * 1000 + index
    trial = Trial(index, victim, seed)
    out = args.out / f"trial-{index:03d}"
    log = out.with_name(out.name + ".log")
    directory = CampaignDir(out)
    with open(log, "w") as output:
        fuzz = subprocess.Popen(fuzz_argv(out, seed, args.schedules), cwd=REPO, stdout=output, stderr=subprocess.STDOUT)
    fuzz_id = ProcessId(fuzz.pid, proc_start_ticks(fuzz.pid))
    probe = watcher = None
    run = None
    kill_ns = exited_ns = reader = None
    try:
        if not wait_for(lambda: "cluster_run" in directory.read_stats(), 240, fuzz):
            trial.error = f"no first step (exit {fuzz.poll()}; see {log})"
            return trial
        trial.started = True
        run = directory.read_stats()["cluster_run"]
        layout = ClusterLayout.from_json((out / "cluster.json").read_text())
        watcher = RunWatcher(run, layout, (load_run(run).state_dir / TOKEN_FILE).read_text())
        probe = LinkProbe(layout, *PROBE_LINK)
        span_start = time.time_ns()
        trial.kill_after_s = round(rng.uniform(0, args.kill_window), 2)
        if not runs_for(fuzz, trial.kill_after_s):
            trial.error = "the campaign ended before the kill"
        else:
            wait_for(lambda: bool(watcher.entries), 5)
            trial.killed = victims_of(victim, fuzz, watcher.entries, rng)
            watcher.killed.update(trial.killed)  # first: the watcher must not take their deaths for a teardown
            kill_boottime = time.clock_gettime(time.CLOCK_BOOTTIME)
            reader = trial.killed[0] if victim in QUEUE_READERS else None  # the observer before its SUT
            kill_ns, exited_ns = kill_all(trial.killed, reader)
        if victim == "fuzz" and not trial.error:
            fuzz.wait()
            time.sleep(args.after)  # the cluster runs on without its controller, until cleanup
            span_end = time.time_ns()
        else:
            try:
                fuzz.wait(timeout=args.campaign_timeout)
            except subprocess.TimeoutExpired:
                trial.error = f"the campaign did not end within {args.campaign_timeout} s after the kill"
                fuzz.kill()
                fuzz.wait()
            span_end = watcher.teardown_ns or time.time_ns()
        trial.exit_code = fuzz.returncode
        watcher.stop()
        probe.stop()  # before cleanup: its sockets would keep the namespaces alive
        trial.probes_sent = sum(1 for t in probe.sent.values() if span_start <= t < span_end)
        window = in_flight_window(kill_ns, exited_ns) if reader is not None else None
        losses = probe_losses(probe.sent, probe.received, watcher.samples, (span_start, span_end), window)
        trial.blackholed_s = len(losses.blackholed) * PROBE_INTERVAL_S
        trial.longest_blackhole_s = losses.longest_blackhole() * PROBE_INTERVAL_S
        trial.in_flight_probes = len(losses.in_flight)
        trial.in_flight_s = len(losses.in_flight) * PROBE_INTERVAL_S
        if kill_ns is not None:
            trial.in_flight_offsets_ms = [round((probe.sent[seq] - kill_ns) / 1e6, 1) for seq in losses.in_flight]
            trial.transit_near_kill_ms = transit_near(probe.sent, probe.received, watcher.samples, kill_ns)
        if exited_ns is not None:
            trial.reader_exit_ms = round((exited_ns - kill_ns) / 1e6, 1)
        if victim.startswith("observer") and trial.killed:
            trial.detection_s = detection_s(watcher.entries, trial.killed[0], kill_boottime)

        cleanup(run)
        journaled = [ProcessId(int(e["proc"]), e.get("start")) for e in watcher.entries if "proc" in e]
        add_leaks(trial, *leftovers_of(run, layout, [fuzz_id, *journaled]))
        trial.steps_lost, trial.schedules_lost = lost_work(steps_in_plot(directory), directory.read_schedules(), STEPS)
        if victim in ("fuzz", "mediator") and trial.killed:  # the campaign died with it: resume it
            resume(trial, directory, log, args.campaign_timeout + 300)
        schedules = directory.read_schedules()
        trial.gap_findings = gap_findings(schedules, bundle_schedules(directory))
        trial.unobserved_gaps = sum(len(r.get("unobserved", [])) for r in schedules)
    except Exception as exc:  # one broken trial must not lose the others' figures
        trial.error = f"{type(exc).__name__}: {exc}"
    finally:
        for part in (probe, watcher):
            if part is not None:
                part.stop()
        if fuzz.poll() is None:
            fuzz.kill()
            fuzz.wait()
        if run is not None:
            cleanup(run)
    return trial


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=20, help="trials, victims in turn (default 20)")
    parser.add_argument("--seed", type=int, default=1, help="seed of the kill moments and the campaigns")
    parser.add_argument("--schedules", type=int, default=4, help="schedules per campaign (default 4)")
    parser.add_argument("--kill-window", type=float, default=20.0,
                        help="the kill comes uniformly within this many seconds after the first step (default 20)")
    parser.add_argument("--after", type=float, default=5.0,
                        help="seconds the cluster runs on after its fuzz process was killed, probed (default 5)")
    parser.add_argument("--campaign-timeout", type=float, default=300.0, help="seconds a campaign may take after the kill")
    parser.add_argument("--out", type=Path, default=REPO / "out" / "kill-trials", help="where the campaigns go")
    parser.add_argument("--json", type=Path, help="also write every trial's figures here")
    args = parser.parse_args()
    if os.geteuid() != 0:
        print("bench_kill_trials: needs root (network namespaces)", file=sys.stderr)
        return 1
    args.out.mkdir(parents=True, exist_ok=True)
    taken = sorted(p.name for p in args.out.glob("trial-*") if p.is_dir())
    if taken:
        print(f"{args.out} already holds trials ({', '.join(taken[:3])}...): use another --out", file=sys.stderr)
        return 1
    make_with_mallory_cc(EXAMPLE_DIR, None, "the example SUT")
    rng = random.Random(args.seed)
    trials = []
    for i in range(args.trials):
        trial = run_trial(i, VICTIMS[i % len(VICTIMS)], args, rng)
        trials.append(trial)
        print(f"trial {i:3d} {trial.victim:<12} kill at +{trial.kill_after_s:5.1f}s exit {trial.exit_code} "
              f"leaks {trial.leaked} blackholed {trial.blackholed_s:.2f}s in flight {trial.in_flight_probes} "
              f"lost {trial.steps_lost} steps "
              f"resume {trial.resumed} gap findings {trial.gap_findings} detect {trial.detection_s} "
              f"{trial.error}", flush=True)
        for detail in trial.leak_details[:10]:
            print(f"    leaked: {detail}", flush=True)
    table, ok = summarize(trials)
    print()
    print(table)
    if args.json:
        args.json.write_text(json.dumps([asdict(t) for t in trials], indent=2))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
