"""`mallory fuzz`: a campaign against a real cluster, choosing each fault from what it sees.

    mallory fuzz --sut SPEC --nodes 3 --duration 1h --policy qlearning --out DIR --seed 1
    mallory fuzz --resume DIR [--duration 2h]
    mallory fuzz ... --workers N [--ray ADDRESS]   # N clusters, one learner, on Ray (docs/ray.md)

Brings up a network-namespace cluster with the mediator as gateway and an observer per
node, starts the SUT through its adapter (clock and disk fault controls preloaded), runs the
workload during every schedule, and lets the campaign loop pick faults. Ctrl-C (or SIGTERM)
ends the campaign after the current step, resets the cluster and removes it; after a kill -9,
`mallory cleanup` removes what is left and `--resume DIR` continues from the checkpoint. A
dead observer is restarted; a dead mediator ends the campaign the same way, saying so
(exit status 69; see mallory/campaign/observed.py). Exits 1 when the campaign holds a bug
(as Jepsen's test command does for an invalid history), 0 when it holds none.

With --workers, N workers (each a cluster of its own, on whichever machine of the Ray
cluster it lands on) share one learner (mallory/campaign/ray_engine.py); Ray is imported
then only. --resume continues a campaign with any number of workers, or without.
"""

from __future__ import annotations

import argparse
import re
import secrets
import signal
import sys
import threading
from pathlib import Path

from mallory import __version__
from mallory.campaign.config import (
    BACKENDS,
    NO_WORKLOAD,
    PRESETS,
    CampaignConfig,
    ConfigError,
)
from mallory.campaign.directory import CampaignDir
from mallory.campaign.live import (
    calibrate,
    check_sampler_fault,
    filter_set_faults,
    live_model,
    live_parts,
    live_waypoints,
)
from mallory.campaign.loop import Campaign, ComponentDied
from mallory.campaign.model import load_model
from mallory.campaign.progress import Progress
from mallory.campaign.service import learner_for
from mallory.campaign.status import StatusScreen
from mallory.campaign.waypoints import waypoint_names
from mallory.errors import ExitCode, MalloryError
from mallory.harness.workload import WORKLOADS
from mallory.learner.learner import CONTEXTS
from mallory.learner.policies import POLICIES, PRIORS, SAMPLER_FAULTS
from mallory.learner.rewards import REWARDS
from mallory.suts.registry import BUILTIN_SUTS, check_workload, resolve_sut
from mallory.timeline.abstraction import ABSTRACTIONS
from nemesis.nemesis import check_fault_names

NAME = "fuzz"
HELP = "run a fuzz campaign against a real cluster (learns which fault to inject next)"

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
    parser.add_argument("--model", type=Path, default=None, metavar="FILE",
                        help="a protocol model in Python whose states reached are model coverage (model_states) "
                        "and the `model` reward, e.g. suts/raft/model.py (see mallory/learner/model.py)")
    parser.add_argument("--preset", choices=sorted(PRESETS), default=None,
                        help="a named set of settings; `paper`: the Mallory paper's learner as published "
                        "(event-history, threshold 0.7 uncalibrated, paper reward, Q-learning with untried "
                        "actions at 0); options given explicitly still win")
    parser.add_argument("--port", type=int, default=defaults.port, help="client port of a built-in SUT")
    parser.add_argument("--plain", action="store_true", help="log lines instead of the status screen")
    parser.add_argument("--workers", type=int, default=None, metavar="N",
                        help="run N workers, each with a cluster of its own, sharing one learner, on Ray "
                        "(pip install 'mallory[ray]'; root on every machine a worker lands on; see docs/ray.md)")
    parser.add_argument("--ray", default=None, metavar="ADDRESS",
                        help="with --workers: the Ray cluster to run on ('auto': the one this machine is in; "
                        "default: a local one started for the run)")
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
    if args.model is not None and not args.model.is_file():
        raise MalloryError(f"--model {args.model}: no such file")
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
            model=str(args.model.resolve()) if args.model else None,
            preset=args.preset,
            rounds_d=args.rounds_d,
            rounds_k=args.rounds_k,
            drop_p=args.drop_p,
            crash_rate=args.crash_rate,
        )
    except ConfigError as exc:
        raise MalloryError(f"{OPTION_OF_FIELD.get(exc.field, '--' + exc.field)} {exc.problem}") from None


def _check_workers(args: argparse.Namespace, config: CampaignConfig) -> None:
    """--workers and --ray make sense together, on a cluster backend of the workers' own."""
    if args.ray is not None and args.workers is None:
        raise MalloryError("--ray needs --workers N")
    if args.workers is None:
        return
    if args.workers < 1:
        raise MalloryError(f"--workers must be at least 1, got {args.workers}")
    if config.backend != "netns":
        raise MalloryError("--workers runs each worker's cluster in network namespaces (--backend netns); "
                           "a docker campaign runs in its compose project")


def _run_here(args: argparse.Namespace, directory: CampaignDir, config: CampaignConfig, duration: float | None,
              stopping: threading.Event) -> Progress:
    """The campaign in this process, on a cluster of this machine."""
    run_name = "fz" + secrets.token_hex(3)
    with StatusScreen(f"{config.sut} x{config.nodes} ({config.policy})", plain=args.plain or None) as screen:
        screen.phase("bring-up: cluster, mediator, observers, SUT")
        with live_parts(config, directory, run_name) as live:
            check_sampler_fault(config, live.nemesis)
            if config.calibrate and directory.load_learner() is None and config.calibration is None:
                screen.phase("calibration: fault-free windows under load")
                config = calibrate(config, directory, live)
            campaign = Campaign(
                directory, learner_for(directory, config), live.windows, live.nemesis, config.loop_config(),
                checker=live.checks, on_update=screen.update, on_action=live.record_action,
                info={"cluster_run": run_name}, waypoints=live_waypoints(config, live), watchdog=live.stack,
                model=live_model(config, live),
            )
            progress = campaign.run(schedules=args.schedules, duration_s=duration, stop=stopping.is_set)
            screen.phase("tear-down: SUT, observers, mediator, cluster")
    return progress


def _run_on_ray(args: argparse.Namespace, directory: CampaignDir, config: CampaignConfig, duration: float | None,
                stopping: threading.Event) -> Progress:
    """The campaign on Ray (campaign/ray_engine.py, imported only here: no Ray without --workers)."""
    try:
        from mallory.campaign.ray_engine import run_on_ray
    except ImportError as exc:
        raise MalloryError(f"--workers needs Ray ({exc}): pip install 'mallory[ray]'") from None
    elapsed = float(directory.read_stats().get("run_time") or 0)
    seconds = None if duration is None else max(0.0, duration - elapsed)
    title = f"{config.sut} x{config.nodes} ({config.policy}, {args.workers} workers)"
    with StatusScreen(title, plain=args.plain or None) as screen:
        screen.phase(f"{args.workers} workers on Ray: each brings up its cluster")
        result = run_on_ray(directory, config, workers=args.workers, address=args.ray, seconds=seconds,
                            schedules=args.schedules, stop=stopping.is_set, on_update=screen.update)
    for worker in result.workers:
        print(f"  worker {worker.worker}: {worker.schedules} schedules, {worker.steps} steps, "
              f"decision latency {_latency(worker.decision_ms_p50, worker.decision_ms_p99)}, {worker.fallback_decisions} "
              "decided without the learner")
    for worker, why in result.deaths:
        print(f"  worker {worker} died: {why}")
    p = result.progress
    print(f"  decision latency over all workers: {_latency(p.decision_percentile(0.5), p.decision_percentile(0.99))}")
    return p


def _latency(p50: float | None, p99: float | None) -> str:
    """Decision latency percentiles, None when no step asked the learner (a plan's steps do not)."""
    return "none asked" if p50 is None else f"p50 {p50} ms, p99 {p99} ms"


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
    if config.model:
        load_model(Path(config.model))
    _check_workers(args, config)
    if not args.resume:
        directory.create(config)

    stopping = threading.Event()

    def on_signal(signum: int, frame: object) -> None:
        if stopping.is_set():
            raise KeyboardInterrupt
        stopping.set()

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        if args.workers is not None:
            progress = _run_on_ray(args, directory, config, duration, stopping)
        else:
            progress = _run_here(args, directory, config, duration, stopping)
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
