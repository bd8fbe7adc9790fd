"""`mallory fuzz`: a campaign against a real cluster, choosing each fault from what it sees.

    mallory fuzz --sut SPEC --nodes 3 --duration 1h --policy qlearning --out DIR --seed 1
    mallory fuzz --resume DIR [--duration 2h]

Brings up a network-namespace cluster with the mediator as gateway and an observer per
node, starts the SUT through its adapter (clock and disk fault controls preloaded), runs the
workload during every schedule, and lets the campaign loop pick faults. Ctrl-C (or SIGTERM)
ends the campaign after the current step, resets the cluster and removes it; after a kill -9,
`mallory cleanup` removes what is left and `--resume DIR` continues from the checkpoint. A
dead observer is restarted; a dead mediator ends the campaign the same way, saying so
(exit status 69; see mallory/campaign/observed.py). Exits 1 when the campaign holds a bug
(as Jepsen's test command does for an invalid history), 0 when it holds none.
"""

from __future__ import annotations

import argparse
import logging
import re
import secrets
import signal
import sys
import threading
from dataclasses import replace
from pathlib import Path

from mallory import __version__
from mallory.campaign.config import (
    BACKENDS,
    MIN_CALIBRATION_WINDOWS,
    NO_WORKLOAD,
    PRESETS,
    Calibration,
    CampaignConfig,
    ConfigError,
)
from mallory.campaign.directory import CampaignDir
from mallory.campaign.live import LiveParts, filter_set_faults, live_parts
from mallory.campaign.loop import Campaign, ComponentDied, RealSleeper, steady_summaries
from mallory.campaign.service import learner_for
from mallory.campaign.status import StatusScreen
from mallory.campaign.waypoints import Waypoints, load_waypoints, waypoint_names
from mallory.errors import ExitCode, MalloryError
from mallory.harness.workload import WORKLOADS
from mallory.learner.calibration import calibrate_threshold
from mallory.learner.learner import CONTEXTS
from mallory.learner.policies import POLICIES, PRIORS, SAMPLER_FAULTS
from mallory.learner.rewards import REWARDS
from mallory.learner.states import StateStore
from mallory.suts.registry import BUILTIN_SUTS, check_workload, resolve_sut
from mallory.timeline.abstraction import ABSTRACTIONS
from nemesis.nemesis import Nemesis, check_fault_names

NAME = "fuzz"
HELP = "run a fuzz campaign against a real cluster (learns which fault to inject next)"

log = logging.getLogger(__name__)


def parse_duration(text: str) -> float:
    """'90s', '30m', '1.5h', '24h', '2d' or plain seconds."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*", text)
    if not m:
        raise MalloryError(f"duration {text!r}: use e.g. 90s, 30m, 1.5h, 24h")
    return float(m.group(1)) * {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}[m.group(2)]


def configure(parser: argparse.ArgumentParser) -> None:
    # A campaign option's default is its CampaignConfig field's (a dataclass keeps a field's
    # default as a class attribute): campaign.json's missing keys mean the same.
    defaults = CampaignConfig
    parser.add_argument("--sut", help=f"a TOML SUT spec, or a built-in: {', '.join(BUILTIN_SUTS)}")
    parser.add_argument("--nodes", type=int, default=defaults.nodes, help="cluster size (default %(default)s)")
    parser.add_argument("--duration", default=None, help="campaign time, e.g. 5m, 1h, 24h (default 1h)")
    parser.add_argument("--schedules", type=int, default=None, help="stop after this many schedules")
    parser.add_argument("--policy", choices=sorted(POLICIES), default=defaults.policy,
                        help="how each step's fault is chosen: a learner (qlearning, epsilon-greedy, bonus-max), "
                        "uniformly (random), or a sampler that takes one fault every step, each drawing a "
                        "window of faults: rounds (lossy-synchronous rounds), random-drop, poisson-crash "
                        "(default %(default)s)")
    parser.add_argument("--rounds-d", type=int, default=defaults.rounds_d, metavar="D",
                        help="round faults: at most D processes isolated or lossy per round (default %(default)s)")
    parser.add_argument("--rounds-k", type=int, default=defaults.rounds_k, metavar="K",
                        help="round faults: K rounds of recovery after a process was faulty (default %(default)s)")
    parser.add_argument("--drop-p", type=float, default=defaults.drop_p, metavar="P",
                        help="random-drop: the probability that a link loses a round (default %(default)s)")
    parser.add_argument("--crash-rate", type=float, default=defaults.crash_rate, metavar="LAMBDA",
                        help="poisson-crash: crashes per second over the cluster (default %(default)s)")
    parser.add_argument("--reward", default=defaults.reward,
                        help=f"reward: {', '.join(sorted(REWARDS))} (default %(default)s; see mallory/learner/rewards.py)")
    parser.add_argument("--temperature", type=float, default=defaults.temperature, help="qlearning softmax temperature")
    parser.add_argument("--prior", choices=PRIORS, default=defaults.prior,
                        help="where an untried fault starts in a state: optimistic (0: try each once there "
                        "first) or shared (its mean value over the states where it was tried; the default)")
    parser.add_argument("--context", choices=CONTEXTS, default=defaults.context,
                        help="what the policy learns fault values for: the window's state (the paper's) or the "
                        "fault families in force (default %(default)s)")
    parser.add_argument("--out", type=Path, help="campaign directory (new)")
    parser.add_argument("--resume", type=Path, metavar="DIR", help="continue the campaign in DIR")
    parser.add_argument("--seed", type=int, default=defaults.seed, help="root seed (each schedule's seed derives from it)")
    parser.add_argument("--faults", default=None, help="comma-separated families or labels (default: all a SUT can take)")
    parser.add_argument("--workload", choices=(*WORKLOADS, NO_WORKLOAD), default=defaults.workload)
    parser.add_argument("--concurrency", type=int, default=defaults.concurrency)
    parser.add_argument("--rate", type=float, default=defaults.rate, help="client ops/s over all workers (default %(default)s)")
    parser.add_argument("--steps", type=int, default=defaults.steps, help="steps per schedule (default %(default)s)")
    parser.add_argument("--window", type=float, default=defaults.window_s, help="seconds per step (default %(default)s)")
    parser.add_argument("--reset", type=float, default=defaults.reset_s,
                        help="seconds of reset after a schedule (default %(default)s)")
    parser.add_argument("--fresh-data", action="store_true",
                        help="after each schedule's checks, start every node afresh with its data removed "
                        "(a stationary load, e.g. for a soak; by default a schedule starts from what the ones "
                        "before wrote)")
    parser.add_argument("--abstraction", choices=sorted(ABSTRACTIONS), default=defaults.abstraction)
    parser.add_argument("--threshold", type=float, default=defaults.threshold,
                        help="state similarity threshold (default %(default)s)")
    parser.add_argument("--calibrate", type=int, default=defaults.calibrate, metavar="WINDOWS",
                        help="before fuzzing, run this many fault-free windows under load and lower the "
                        "threshold, if need be, until 90%% of them coincide (the paper's convention; "
                        "default %(default)s; 0: off)")
    parser.add_argument("--waypoints", type=Path, default=None, metavar="FILE",
                        help="waypoint predicates (TOML) that split the search into levels, e.g. "
                        "suts/example/waypoints.toml (see mallory/campaign/waypoints.py)")
    parser.add_argument("--filter-sets", type=Path, default=None, metavar="FILE",
                        help="named Netrix-style filter sets (a Python file defining FILTER_SETS, e.g. "
                        "suts/example/filter_sets.py): each becomes a fault filters:NAME, in force for one step's "
                        "window; the mediator then relays the SUT's declared peer ports message by message "
                        "(see mallory/harness/scenario_file.py)")
    parser.add_argument("--preset", choices=sorted(PRESETS), default=None,
                        help="a named set of settings; `paper`: the Mallory paper's learner as published "
                        "(event-history, threshold 0.7 uncalibrated, paper reward, Q-learning with untried "
                        "actions at 0); options given explicitly still win")
    parser.add_argument("--port", type=int, default=defaults.port, help="client port of a built-in SUT")
    parser.add_argument("--plain", action="store_true", help="log lines instead of the status screen")
    parser.add_argument("--backend", choices=BACKENDS, default=defaults.backend,
                        help="netns: a cluster of namespaces made here (default); docker: the containers of the "
                        "compose project this runs in (see `mallory compose`)")


#: the options whose name is not their field's (the others are --<field>)
OPTION_OF_FIELD = {"window_s": "--window", "reset_s": "--reset", "filter_sets": "--filter-sets", "rounds_d": "--rounds-d",
                   "rounds_k": "--rounds-k", "drop_p": "--drop-p", "crash_rate": "--crash-rate"}


def _apply_preset(args: argparse.Namespace) -> None:
    """Give the options a preset names its values, where the command line left them at
    their defaults (an option given explicitly, even to its default value, is kept: argparse
    cannot tell the two apart, and both mean the same then)."""
    for field, value in PRESETS[args.preset].items():
        option = OPTION_OF_FIELD.get(field, "--" + field).removeprefix("--").replace("-", "_")
        if getattr(args, option) == getattr(CampaignConfig, field):
            setattr(args, option, value)


def config_from_args(args: argparse.Namespace) -> CampaignConfig:
    """A new campaign's configuration from the command line; a bad value is refused naming
    its option."""
    if not args.sut:
        raise MalloryError("--sut is required for a new campaign")
    if args.preset:
        _apply_preset(args)
    if args.waypoints is not None and not args.waypoints.is_file():
        raise MalloryError(f"--waypoints {args.waypoints}: no such file")
    if args.filter_sets is not None and not args.filter_sets.is_file():
        raise MalloryError(f"--filter-sets {args.filter_sets}: no such file")
    faults = tuple(args.faults.split(",")) if args.faults else None
    if faults is None and args.policy in SAMPLER_FAULTS:
        faults = (SAMPLER_FAULTS[args.policy],)  # a sampler policy takes its fault alone
    try:
        return CampaignConfig(
            version=__version__,
            command=tuple(sys.argv),
            sut=resolve_sut(args.sut),
            port=args.port,
            nodes=args.nodes,
            policy=args.policy,
            reward=args.reward,
            temperature=args.temperature,
            prior=args.prior,
            context=args.context,
            seed=args.seed,
            faults=faults,
            workload=args.workload,
            concurrency=args.concurrency,
            rate=args.rate,
            steps=args.steps,
            window_s=args.window,
            reset_s=args.reset,
            fresh_data=args.fresh_data,
            abstraction=args.abstraction,
            threshold=args.threshold,
            calibrate=args.calibrate,
            backend=args.backend,
            waypoints=str(args.waypoints.resolve()) if args.waypoints else None,
            filter_sets=str(args.filter_sets.resolve()) if args.filter_sets else None,
            preset=args.preset,
            rounds_d=args.rounds_d,
            rounds_k=args.rounds_k,
            drop_p=args.drop_p,
            crash_rate=args.crash_rate,
        )
    except ConfigError as exc:
        raise MalloryError(f"{OPTION_OF_FIELD.get(exc.field, '--' + exc.field)} {exc.problem}") from None


def _calibrate(config: CampaignConfig, directory: CampaignDir, live: LiveParts) -> CampaignConfig:
    """The paper's calibration: fault-free windows under load set the similarity threshold.
    The calibrated configuration is written to the campaign directory before it is used."""
    log.info("calibrating on %d fault-free windows under load...", config.calibrate)
    run_dir = directory.root / "runs" / "calibration"
    run_dir.mkdir(parents=True, exist_ok=True)
    live.checks.start_workload(run_dir, config.seed, key_slot=0)
    try:
        summaries = steady_summaries(live.windows, RealSleeper(), config.calibrate, config.window_s)
    finally:
        live.checks.stop_workload()
    if len(summaries) < MIN_CALIBRATION_WINDOWS:
        raise MalloryError(f"calibration: only {len(summaries)} complete windows; the timeline is not keeping up")
    # The largest threshold that makes 90% coincide is 1.0 when the steady windows are all
    # alike: as discriminating as exact equality, which would split every faulty window
    # from its neighbours. It lowers the configured threshold; it never raises it.
    largest = calibrate_threshold(summaries)
    threshold = min(largest, config.threshold)
    store = StateStore(threshold=threshold)
    for summary in summaries:
        store.lookup(summary)
    log.info("calibration: %d fault-free windows fall into %d state(s) at threshold %.3f (90%% coincide up to %.3f; "
             "configured %s)", len(summaries), len(store), threshold, largest, config.threshold)
    calibrated = replace(config, threshold=threshold, calibration=Calibration(
        windows=len(summaries), threshold=threshold, largest=largest, steady_states=len(store)))
    directory.write_config(calibrated)
    return calibrated


def _waypoints(config: CampaignConfig, live: LiveParts) -> Waypoints | None:
    """The campaign's waypoints, their event names resolved against the SUT's catalogue and
    log events, their fault families against the nemesis's."""
    if config.waypoints is None:
        return None
    families = {label.partition(":")[0] for label in live.nemesis.actions()}
    return load_waypoints(Path(config.waypoints), live.event_catalogue(), live.log_event_names(), families)


def check_sampler_fault(config: CampaignConfig, nemesis: Nemesis) -> None:
    """A sampler policy's fault must be one the SUT can take: refused before fuzzing, with
    the nemesis's reason (the SUT cannot be asked before its cluster is up)."""
    fault = SAMPLER_FAULTS.get(config.policy)
    if fault is not None and fault not in nemesis.actions():
        reason = nemesis.refused.get(fault, "not enabled by --faults")
        raise MalloryError(f"--policy {config.policy} takes {fault}, which {config.sut} cannot: {reason}")


def run(args: argparse.Namespace) -> int:
    if bool(args.out) == bool(args.resume):
        raise MalloryError("give either --out DIR (a new campaign) or --resume DIR")
    duration = parse_duration(args.duration) if args.duration else (None if args.schedules else 3600.0)
    if args.resume:
        directory = CampaignDir(args.resume)
        config = directory.config()
    else:
        config = config_from_args(args)
        directory = CampaignDir(args.out)
    # before anything is made: a workload the SUT cannot run would fail in a worker thread,
    # a misspelt fault or a broken waypoint file once the cluster is up (a waypoint's event
    # names are checked then, against the SUT's catalogue)
    check_workload(config.sut, config.workload)
    filter_faults = [filter_set_faults(Path(config.filter_sets))] if config.filter_sets else []
    if config.faults:
        check_fault_names(config.faults, filter_faults)
    if config.waypoints:
        waypoint_names(Path(config.waypoints))
    if not args.resume:
        directory.create(config)

    stopping = threading.Event()

    def on_signal(signum: int, frame: object) -> None:
        if stopping.is_set():
            raise KeyboardInterrupt
        stopping.set()

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    run_name = "fz" + secrets.token_hex(3)
    try:
        with StatusScreen(f"{config.sut} x{config.nodes} ({config.policy})", plain=args.plain or None) as screen:
            screen.phase("bring-up: cluster, mediator, observers, SUT")
            with live_parts(config, directory, run_name) as live:
                check_sampler_fault(config, live.nemesis)
                if config.calibrate and directory.load_learner() is None and config.calibration is None:
                    screen.phase("calibration: fault-free windows under load")
                    config = _calibrate(config, directory, live)
                campaign = Campaign(
                    directory, learner_for(directory, config), live.windows, live.nemesis, config.loop_config(),
                    checker=live.checks, on_update=screen.update, on_action=live.record_action,
                    info={"cluster_run": run_name}, waypoints=_waypoints(config, live), watchdog=live.stack,
                )
                progress = campaign.run(schedules=args.schedules, duration_s=duration, stop=stopping.is_set)
                screen.phase("tear-down: SUT, observers, mediator, cluster")
    except ComponentDied as exc:
        raise ComponentDied(f"{exc}. The campaign stopped and removed its cluster; the schedule in flight was "
                            f"dropped: `mallory fuzz --resume {directory.root}` continues from the last whole "
                            "schedule") from None
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
    print(
        f"campaign {directory.root}: {progress.schedules_done} schedules, {progress.steps_done} steps, "
        f"{progress.states} distinct states, {progress.pairs_covered} event pairs covered, {progress.bugs} bugs "
        f"({len(directory.known_bugs())} bundles in {directory.root / 'bugs'})"
    )
    bugs = sorted(directory.known_bugs())
    for bug in bugs:
        print(f"  bug {bug}: {directory.root / 'bugs' / bug}")
    return ExitCode.FAILED if bugs else ExitCode.OK
