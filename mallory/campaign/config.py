"""A campaign's configuration: what `mallory fuzz` was asked to do, kept in campaign.json.

`CampaignConfig` is the one record of it. `mallory fuzz` builds it from its arguments, the
campaign directory writes it (`to_json`) and reads it back on `--resume` (`from_json`), a
calibration replaces its threshold, and `mallory replay` and `mallory shrink` rebuild a
bug's cluster from the copy in its bundle. Every value is checked when the record is made,
so a bad one is refused before any cluster comes up, naming its field (`ConfigError`).

campaign.json stays what it always was, a flat JSON object under these field names, so
older code and the report keep reading it. Reading is lenient in two ways only: a key
missing from a file written before it existed takes its default (the default of `mallory
fuzz`'s option, unless the default changed since: `ABSENT_MEANS`), and a key this version does not know (written by a newer one) is kept in
`extra` and written back, so rewriting the file loses nothing. Only `sut` has no default.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping
from dataclasses import MISSING, asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from mallory.errors import MalloryError
from mallory.harness.workload import NO_WORKLOAD, WORKLOADS
from mallory.learner.calibration import MAX_WINDOWS
from mallory.learner.learner import CONTEXTS
from mallory.learner.policies import POLICIES, PRIORS, SAMPLER_FAULTS
from mallory.learner.rewards import NEEDS_MODEL, REWARDS
from mallory.timeline.abstraction import ABSTRACTIONS
from nemesis.faults.crashes import DEFAULT_CRASH_RATE
from nemesis.faults.rounds import DEFAULT_D, DEFAULT_DROP_P, DEFAULT_K

#: the cluster backends a campaign can run on (mallory/cluster/netns.py, docker.py)
BACKENDS = ("netns", "docker")
#: fewer fault-free windows than this cannot calibrate the similarity threshold
MIN_CALIBRATION_WINDOWS = 3
#: fault-free windows a new campaign calibrates on unless told otherwise (50 s of 2.5 s)
DEFAULT_CALIBRATION_WINDOWS = 20
#: named sets of settings (`mallory fuzz --preset`); a preset's values stand in for the
#: defaults of the options it names, options given explicitly still win
PRESETS: dict[str, dict[str, Any]] = {
    # the Mallory paper's learner as published (CCS'23): threshold 0.7 without calibration,
    # the event-history abstraction, reward -1 seen / 0 new, Q-learning with alpha 0.1 and
    # gamma 0.6, softmax, untried actions at 0, 12 steps of 2.5 s
    "paper": {"policy": "qlearning", "reward": "paper", "prior": "optimistic", "context": "state",
              "abstraction": "event-history",
              "threshold": 0.7, "calibrate": 0, "steps": 12, "window_s": 2.5},
}


class ConfigError(MalloryError):
    """A configuration value that is not allowed: `field` names it, `problem` says what is
    wrong with it ("must be at least 1, got 0"); the message is "<where>: <field> <problem>",
    `where` being the file it was read from."""

    def __init__(self, field: str, problem: str, where: str = "campaign configuration") -> None:
        super().__init__(f"{where}: {field} {problem}")
        self.field = field
        self.problem = problem


@dataclass
class LoopConfig:
    """The campaign loop's share of the configuration (mallory/campaign/loop.py)."""

    steps: int = 12
    window_s: float = 2.5
    reset_s: float = 5.0
    #: how long after a window ends its feedback may take before the step counts as late
    feedback_timeout_s: float = 1.0
    seed: int = 0
    #: every schedule starts from empty data (CampaignConfig.fresh_data)
    fresh_data: bool = False


@dataclass(frozen=True)
class Calibration:
    """What a calibration measured: `windows` complete fault-free windows under load set
    the state similarity `threshold`. `largest` is the largest threshold under which 90%
    of them coincide; the threshold is that or the configured one, whichever is lower.
    `steady_states` is how many states the windows fall into at the chosen threshold. A
    campaign that has one is not calibrated again on resume. (Calibrations recorded before
    `largest` and `steady_states` existed have None there.)"""

    windows: int
    threshold: float
    largest: float | None = None
    steady_states: int | None = None

    def __post_init__(self) -> None:
        _integer(self, "windows", low=1, name="calibration.windows")
        _number(self, "threshold", at_most_one=True, name="calibration.threshold")
        if self.largest is not None:
            _number(self, "largest", at_most_one=True, name="calibration.largest")
        if self.steady_states is not None:
            _integer(self, "steady_states", low=1, name="calibration.steady_states")

    @classmethod
    def from_json(cls, value: Any) -> Calibration:
        """campaign.json's `calibration` object; ConfigError if `value` is not one."""
        keys = {"windows", "threshold", "largest", "steady_states"}
        if not isinstance(value, Mapping) or not {"windows", "threshold"} <= set(value) <= keys:
            raise ConfigError("calibration", f"must be an object of {', '.join(sorted(keys))}, got {value!r}")
        return cls(**value)


@dataclass(frozen=True, kw_only=True)
class CampaignConfig:
    """One campaign's configuration; campaign.json holds `to_json()`, in this field order.

    Immutable: a later decision (a calibrated threshold) is a `dataclasses.replace`, checked
    like the original, which the campaign directory then writes."""

    #: the mallory version that created the campaign ("" if the file did not say)
    version: str = ""
    #: the command line that created it (sys.argv)
    command: tuple[str, ...] = ()
    #: the system under test: a built-in name or the absolute path of a TOML spec
    sut: str
    #: the client port of a built-in SUT (a spec's ports are its own)
    port: int = 6379
    #: cluster size
    nodes: int = 3
    #: how the learner chooses the next fault (learner/policies.py: POLICIES)
    policy: str = "qlearning"
    #: how a window is rewarded (learner/rewards.py: REWARDS); pair-novelty measured best
    #: beside random (README "Status")
    reward: str = "pair-novelty"
    #: qlearning's softmax temperature (None: the policy's default)
    temperature: float | None = None
    #: where an untried fault starts in a state, one of PRIORS (None: the policy's default)
    prior: str | None = None
    #: what the policy learns values for: the window's "state" or the "faults" in force
    #: (learner/learner.py CONTEXTS)
    context: str = "faults"
    #: the root seed; each schedule's seed derives from it
    seed: int = 0
    #: the enabled fault families or labels (None: every fault the SUT can take)
    faults: tuple[str, ...] | None = None
    #: the client workload run during every schedule, one of WORKLOADS or NO_WORKLOAD
    workload: str = "list-append"
    #: client workers
    concurrency: int = 5
    #: client operations per second over all workers
    rate: float = 50.0
    #: steps (faults) per schedule
    steps: int = 12
    #: seconds per step: the window whose timeline becomes the next state
    window_s: float = 2.5
    #: seconds given the cluster to settle after a schedule's reset
    reset_s: float = 5.0
    #: how a window of the timeline becomes a state's summary (timeline/abstraction.py)
    abstraction: str = "code-history"
    #: the state similarity threshold, in (0, 1]; calibration may lower it
    threshold: float = 0.7
    #: fault-free windows to calibrate the threshold on before fuzzing (0: no calibration)
    calibrate: int = DEFAULT_CALIBRATION_WINDOWS
    #: the cluster backend, one of BACKENDS
    backend: str = "netns"
    #: a waypoint file (campaign/waypoints.py), absolute path, or None
    waypoints: str | None = None
    #: a filter-set file (harness/scenario_file.py), absolute path, or None: its sets become
    #: faults `filters:<name>` and the mediator runs the message layer (netns backend only)
    filter_sets: str | None = None
    #: a protocol model, the absolute path of its Python file (campaign/model.py), or None
    model: str | None = None
    #: the preset the settings came from (PRESETS), for the record, or None
    preset: str | None = None
    #: lossy-synchronous round faults (nemesis/faults/round_schedule.py): at most this many
    #: faulty processes per round, at most `nodes`
    rounds_d: int = DEFAULT_D
    #: ... and this many rounds of recovery after a process was faulty
    rounds_k: int = DEFAULT_K
    #: the random-drop baseline: the probability that a link loses a round, in (0, 1]
    drop_p: float = DEFAULT_DROP_P
    #: the Poisson-crash baseline: crashes per second over the cluster
    crash_rate: float = DEFAULT_CRASH_RATE
    #: after each schedule's checks every node is torn down (its data removed) and started
    #: afresh, so a schedule does not start from what all those before wrote: a stationary
    #: load for a soak (an SUT that keeps a log re-applies all of it after each kill)
    fresh_data: bool = False
    #: the calibration done, once done (not written before)
    calibration: Calibration | None = None
    #: campaign.json's keys this version does not know, kept to be written back
    extra: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        _text(self, "version", empty_ok=True)
        _texts(self, "command", empty_ok=True)
        _text(self, "sut")
        _integer(self, "port", low=1, high=65535)
        _integer(self, "nodes", low=1)
        _choice(self, "policy", POLICIES)
        _choice(self, "reward", REWARDS)
        if self.temperature is not None:
            _number(self, "temperature", positive=True)
        if self.prior is not None:
            _choice(self, "prior", PRIORS)
        _choice(self, "context", CONTEXTS)
        _integer(self, "seed")
        if self.faults is not None:
            _texts(self, "faults")
        _choice(self, "workload", (*WORKLOADS, NO_WORKLOAD))
        _integer(self, "concurrency", low=1)
        _number(self, "rate", positive=True)
        _integer(self, "steps", low=1)
        _number(self, "window_s", positive=True)
        _number(self, "reset_s")
        if not isinstance(self.fresh_data, bool):
            raise ConfigError("fresh_data", f"must be true or false, got {self.fresh_data!r}")
        _choice(self, "abstraction", ABSTRACTIONS)
        _number(self, "threshold", at_most_one=True)
        _integer(self, "calibrate", low=0, high=MAX_WINDOWS)
        if 0 < self.calibrate < MIN_CALIBRATION_WINDOWS:
            raise ConfigError("calibrate", f"must be 0 (off) or at least {MIN_CALIBRATION_WINDOWS}, got {self.calibrate}")
        _choice(self, "backend", BACKENDS)
        if self.waypoints is not None:
            _text(self, "waypoints")
        if self.filter_sets is None and self.faults is not None and any(f.partition(":")[0] == "filters"
                                                                        for f in self.faults):
            raise ConfigError("faults", "names filters, but no filter-set file gives any (--filter-sets FILE)")
        if self.filter_sets is not None:
            _text(self, "filter_sets")
            if self.backend != "netns":
                raise ConfigError("filter_sets", f"needs the netns backend (the message layer's transparent proxy is "
                                  f"not set up in a compose project), not {self.backend}")
            if self.faults is not None and not any(f.partition(":")[0] == "filters" for f in self.faults):
                raise ConfigError("filter_sets", "gives filter sets, but faults names none: add filters (every set) "
                                  "or filters:NAME to them")
        if self.model is not None:
            _text(self, "model")
        elif self.reward in NEEDS_MODEL:
            raise ConfigError("reward", f"{self.reward!r} needs a protocol model (--model FILE)")
        elif POLICIES[self.policy].needs_model:
            raise ConfigError("policy", f"{self.policy!r} needs a protocol model (--model FILE)")
        if self.preset is not None:
            _choice(self, "preset", PRESETS)
        _integer(self, "rounds_d", low=1)
        if self.rounds_d > self.nodes:
            raise ConfigError("rounds_d", f"must be at most the {self.nodes} nodes, got {self.rounds_d}")
        _integer(self, "rounds_k", low=0)
        _number(self, "drop_p", at_most_one=True)
        _number(self, "crash_rate", positive=True)
        fault = SAMPLER_FAULTS.get(self.policy)
        if fault is not None and not _enables(self.faults, fault):
            raise ConfigError("faults", f"must include {fault}, the fault policy {self.policy} takes, got "
                              f"{'every default fault' if self.faults is None else ','.join(self.faults)}")
        if self.calibration is not None and not isinstance(self.calibration, Calibration):
            raise ConfigError("calibration", f"must be a Calibration, got {self.calibration!r}")
        clash = set(self.extra) & _KNOWN_KEYS
        if clash:
            raise ConfigError("extra", f"must not hold known fields, got {sorted(clash)}")

    def loop_config(self) -> LoopConfig:
        """The campaign loop's settings (a scripted schedule takes as many steps as it has)."""
        return LoopConfig(steps=self.steps, window_s=self.window_s, reset_s=self.reset_s, seed=self.seed,
                          fresh_data=self.fresh_data)

    def to_json(self) -> dict[str, Any]:
        """campaign.json's object: every field under its name (lists for tuples), then
        `calibration` once there is one, then the unknown keys as they were read."""
        out = {f.name: getattr(self, f.name) for f in fields(self) if f.name not in ("calibration", "extra")}
        out["command"] = list(self.command)
        out["faults"] = None if self.faults is None else list(self.faults)
        if self.calibration is not None:
            out["calibration"] = {k: v for k, v in asdict(self.calibration).items() if v is not None}
        return {**out, **self.extra}

    @classmethod
    def from_json(cls, value: Mapping[str, Any], source: str | Path) -> CampaignConfig:
        """The configuration in campaign.json's object `value`, read from `source` (a file
        name, for errors). A key it lacks takes its default, except `sut`; a key it does not
        know goes to `extra`; a bad value is a ConfigError naming `source` and the field."""
        try:
            for f in fields(cls):
                if f.default is MISSING and f.default_factory is MISSING and f.name not in value:
                    raise ConfigError(f.name, "is missing")
            calibration = value.get("calibration")
            return cls(
                **{key: item for key, item in ABSENT_MEANS.items() if key not in value},
                **{key: item for key, item in value.items() if key in _KNOWN_KEYS - {"calibration"}},
                calibration=None if calibration is None else Calibration.from_json(calibration),
                extra={key: item for key, item in value.items() if key not in _KNOWN_KEYS},
            )
        except ConfigError as exc:
            raise ConfigError(exc.field, exc.problem, where=str(source)) from None


#: keys whose default changed after campaigns without them were written: absent from a
#: campaign.json, they mean what they meant when it was written (a campaign from before
#: calibration existed did not calibrate)
ABSENT_MEANS: dict[str, Any] = {"calibrate": 0, "abstraction": "event-history", "context": "state"}

#: campaign.json's keys this version knows
_KNOWN_KEYS = frozenset(f.name for f in fields(CampaignConfig)) - {"extra"}


# -- checks of one field's value; `name` is how an error calls it (default: the field) --
# A frozen dataclass is normalised in place with object.__setattr__ (JSON's 50 -> 50.0,
# a list -> a tuple), so equal configurations compare equal however they were made.


def _enables(faults: tuple[str, ...] | None, label: str) -> bool:
    """Whether the enabled faults name `label`, itself or its whole family (its family is
    opt-in: the default set, None, has it not)."""
    return faults is not None and any(item in (label, label.partition(":")[0]) for item in faults)


def _text(record: Any, attr: str, *, empty_ok: bool = False) -> None:
    value = getattr(record, attr)
    if not isinstance(value, str) or not (value or empty_ok):
        raise ConfigError(attr, f"must be a {'' if empty_ok else 'non-empty '}string, got {value!r}")


def _texts(record: Any, attr: str, *, empty_ok: bool = False) -> None:
    """A list of strings; unless `empty_ok`, a non-empty one of non-empty strings."""
    value = getattr(record, attr)
    if (not isinstance(value, (list, tuple)) or not (value or empty_ok)
            or not all(isinstance(item, str) and (item or empty_ok) for item in value)):
        what = "a list of strings" if empty_ok else "a non-empty list of non-empty strings"
        raise ConfigError(attr, f"must be {what}, got {value!r}")
    object.__setattr__(record, attr, tuple(value))


def _integer(record: Any, attr: str, *, low: int | None = None, high: int | None = None, name: str = "") -> None:
    value = getattr(record, attr)
    name = name or attr
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(name, f"must be an integer, got {value!r}")
    if low is not None and value < low:
        raise ConfigError(name, f"must be at least {low}, got {value}")
    if high is not None and value > high:
        raise ConfigError(name, f"must be at most {high}, got {value}")


def _number(record: Any, attr: str, *, positive: bool = False, at_most_one: bool = False, name: str = "") -> None:
    """A finite number, at least 0; with `positive` more than 0, with `at_most_one` in (0, 1]."""
    value = getattr(record, attr)
    name = name or attr
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ConfigError(name, f"must be a number, got {value!r}")
    if at_most_one and not 0 < value <= 1:
        raise ConfigError(name, f"must be in (0, 1], got {value}")
    if positive and value <= 0:
        raise ConfigError(name, f"must be positive, got {value}")
    if value < 0:
        raise ConfigError(name, f"must not be negative, got {value}")
    object.__setattr__(record, attr, float(value))


def _choice(record: Any, attr: str, choices: Collection[str]) -> None:
    value = getattr(record, attr)
    if not isinstance(value, str) or value not in choices:
        raise ConfigError(attr, f"must be one of {', '.join(sorted(choices))}, got {value!r}")
