"""Everything the report needs from one campaign directory, read once.

Only reading: `plot_data`, `fuzzer_stats`, `campaign.json`, `schedules/`, `bugs/*/`, and the
waypoint file campaign.json names (for the waypoints' names and order). The
event recording is read separately (`recording.py`), since only bug pages and the loss plot
need it and it is the one large file.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from mallory.campaign.config import CampaignConfig
from mallory.campaign.directory import (
    PLOT_COLUMNS,
    RENAMED_PLOT_COLUMNS,
    CampaignDir,
    read_bundle_file,
)
from mallory.campaign.waypoints import waypoint_names
from mallory.errors import MalloryError


@dataclass(frozen=True)
class PlotRow:
    """One line of `plot_data`: the campaign right after one step (fields under Mallory's
    names: `distinct_states` is the column corpus_count, `bugs` saved_crashes,
    `pairs_covered` edges_found, `time_s` relative_time). Columns a campaign written before
    they existed did not have are None (pairs_covered) or 0 (waypoint)."""

    time_s: float
    schedules_done: int
    steps_done: int
    distinct_states: int
    bugs: int
    late_steps: int
    action: str
    state: int | None
    new_state: bool
    feedback_ms: float | None
    pairs_covered: int | None = None
    waypoint: int = 0


def parse_plot_data(text: str, source: str = "plot_data") -> list[PlotRow]:
    """The rows of a `plot_data` file, by the column names of its header ("# a, b, ...",
    AFL++'s form; a file without one has today's `PLOT_COLUMNS`). Older campaigns have
    fewer columns, and some under the names of RENAMED_PLOT_COLUMNS. Blank lines are
    skipped. A torn last line (the campaign was killed while appending) is dropped; any
    other malformed line is an error."""
    columns = list(PLOT_COLUMNS)
    lines = []
    for n, line in enumerate(text.splitlines(), start=1):
        if line.startswith("#"):
            if not lines:
                columns = [c.strip() for c in line[1:].split(",")]
        elif line.strip():
            lines.append((n, line))
    columns = [RENAMED_PLOT_COLUMNS.get(c, c) for c in columns]
    rows = []
    for pos, (lineno, line) in enumerate(lines):
        fields = [f.strip() for f in line.split(",")]
        try:
            if len(fields) != len(columns):
                raise ValueError(f"{len(fields)} fields, expected {len(columns)}")
            row = dict(zip(columns, fields))
            pairs = row.get("edges_found", "")
            rows.append(
                PlotRow(
                    time_s=float(row["relative_time"]),
                    schedules_done=int(row["schedules_done"]),
                    steps_done=int(row["steps_done"]),
                    distinct_states=int(row["corpus_count"]),
                    bugs=int(row["saved_crashes"]),
                    late_steps=int(row["late_steps"]),
                    action=row["action"],
                    state=int(row["state"]) if row["state"] else None,
                    new_state=row["new_state"] == "1",
                    feedback_ms=float(row["feedback_ms"]) if row["feedback_ms"] else None,
                    pairs_covered=int(pairs) if pairs else None,
                    waypoint=int(row.get("waypoint") or 0),
                )
            )
        except (ValueError, KeyError) as exc:
            if pos == len(lines) - 1 and not text.endswith("\n"):
                break  # torn last line
            raise MalloryError(f"{source}:{lineno}: malformed plot_data line ({exc}): {line!r}") from None
    return rows


@dataclass
class BugInfo:
    """One bug bundle and its sightings."""

    signature: str
    bundle: Path
    report: dict[str, Any]
    schedule: dict[str, Any]
    sightings: list[dict[str, Any]]

    @property
    def count(self) -> int:
        return len(self.sightings)

    def _times(self) -> list[float]:
        return [s["time"] for s in self.sightings if isinstance(s.get("time"), (int, float))]

    @property
    def first_seen(self) -> float | None:
        return min(self._times(), default=None)

    @property
    def last_seen(self) -> float | None:
        return max(self._times(), default=None)

    def run_dir(self) -> Path | None:
        """The schedule's run directory copied into the bundle (node logs, history)."""
        index = self.schedule.get("index")
        if isinstance(index, int):
            path = self.bundle / f"{index:06d}"
            if path.is_dir():
                return path
        return None

    def history_path(self) -> Path | None:
        """The schedule's client history in the bundle (history.edn), if it recorded one."""
        run = self.run_dir()
        return run / "history.edn" if run is not None and (run / "history.edn").is_file() else None

    def log_files(self) -> list[Path]:
        run = self.run_dir()
        if run is None or not (run / "logs").is_dir():
            return []
        return sorted(p for p in (run / "logs").iterdir() if p.is_file())


def recordings(campaign: Path) -> list[Path]:
    """The mediator's event recordings of a campaign, one per incarnation, in order
    (events.jsonl, events.1.jsonl, ...)."""
    folder = Path(campaign) / "events"
    if not folder.is_dir():
        return []

    def incarnation(p: Path) -> int:
        middle = p.name[len("events."):-len(".jsonl")]
        return int(middle) if middle.isdigit() else 0

    return sorted(folder.glob("events*.jsonl"), key=incarnation)


def parse_waypoints_reached(text: str, source: str = "fuzzer_stats") -> dict[str, int]:
    """fuzzer_stats' `waypoints_reached`, "name:count,name:count" ("-" or "": none), as
    name -> count; MalloryError if an item is not a name and a count."""
    reached: dict[str, int] = {}
    for item in text.split(","):
        if item.strip() in ("", "-"):
            continue
        name, _, count = item.strip().rpartition(":")  # a name may hold a colon, a count cannot
        if not name or not count.isdigit():
            raise MalloryError(f"{source}: waypoints_reached item {item!r} is not name:count")
        reached[name] = int(count)
    return reached


@dataclass(frozen=True)
class WaypointsReached:
    """How far a campaign's schedules got through its waypoint file.

    `counts` pairs each waypoint with the schedules whose deepest waypoint it was (a
    schedule counts once, under the last waypoint of the file one of its windows
    satisfied), in the file's order when it could be read, else in fuzzer_stats' order;
    `problem` says why the file could not be read (then waypoints no schedule reached are
    missing)."""

    counts: list[tuple[str, int]]
    problem: str | None = None


def read_waypoints_reached(config: CampaignConfig, stats: dict[str, str]) -> WaypointsReached | None:
    """The campaign's waypoints and how many schedules reached each; None if it had none."""
    if config.waypoints is None:
        return None
    reached = parse_waypoints_reached(stats.get("waypoints_reached", ""))
    try:
        names = waypoint_names(Path(config.waypoints))
    except MalloryError as exc:
        return WaypointsReached(list(reached.items()), str(exc))
    # a name recorded but not in the file: the file changed after the campaign; keep it, last
    names += [name for name in reached if name not in names]
    return WaypointsReached([(name, reached.get(name, 0)) for name in names])


@dataclass
class CampaignData:
    root: Path
    config: CampaignConfig
    stats: dict[str, str]
    plot: list[PlotRow]
    schedules: list[dict[str, Any]]
    bugs: list[BugInfo] = field(default_factory=list)
    waypoints: WaypointsReached | None = None

    @property
    def name(self) -> str:
        return self.root.resolve().name

    @property
    def start_time(self) -> float | None:
        """The campaign's start (Unix seconds), from fuzzer_stats."""
        try:
            return float(self.stats["start_time"])
        except (KeyError, ValueError):
            return None

    def recordings(self) -> list[Path]:
        return recordings(self.root)


def _sightings(path: Path) -> list[dict[str, Any]]:
    out = []
    if path.exists():
        for line in path.read_bytes().splitlines():
            if line.strip():
                try:
                    value = orjson.loads(line)
                except orjson.JSONDecodeError:
                    continue  # a torn last line of a killed campaign
                if isinstance(value, dict):
                    out.append(value)
    return out


def load_bug(bundle: Path) -> BugInfo:
    bundle = Path(bundle)
    report = read_bundle_file(bundle, "report.json")
    schedule = read_bundle_file(bundle, "schedule.json")
    return BugInfo(bundle.name, bundle, report, schedule, _sightings(bundle / "sightings.jsonl"))


def load_campaign(root: Path) -> CampaignData:
    """A campaign directory, or MalloryError naming what is missing or malformed."""
    root = Path(root)
    if not root.is_dir():
        raise MalloryError(f"{root}: no such campaign directory")
    directory = CampaignDir(root)
    config = directory.config()
    plot_path = root / "plot_data"
    plot = parse_plot_data(plot_path.read_text(), str(plot_path)) if plot_path.exists() else []
    try:
        schedules = directory.read_schedules()
    except orjson.JSONDecodeError as exc:
        raise MalloryError(f"{root}/schedules: a schedule file is not valid JSON ({exc})") from None
    bugs_dir = root / "bugs"
    bugs = []
    if bugs_dir.is_dir():
        for bundle in sorted(bugs_dir.iterdir()):
            if bundle.is_dir() and not bundle.name.startswith("."):
                bugs.append(load_bug(bundle))
    bugs.sort(key=lambda b: (b.first_seen is None, b.first_seen or 0.0, b.signature))
    stats = directory.read_stats()
    return CampaignData(root, config, stats, plot, schedules, bugs, read_waypoints_reached(config, stats))
