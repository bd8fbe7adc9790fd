"""Waypoints (WaypointRL): predicates over a window that split the search into levels.

A waypoint file is TOML: an ordered list of predicates, each a situation a person expects
interesting behaviour behind (the thesis' "semantic waypoints"):

    [[waypoint]]
    name = "new-leader-while-cut-off"   # what the report calls it
    events = ["became-leader"]          # every one of these code or log events occurred
                                        # in the window (annotation labels, log event names)
    faults = ["partition"]              # a fault of each of these families was in force
                                        # when the window ended

A window's waypoint is the 1-based index of the LAST predicate in the file that it
satisfies (0: none), so later entries are deeper levels; the learner keeps the highest
level a schedule reached (mallory/learner/learner.py). Names resolve to the timeline's
event types through the SUT's annotation catalogue (code events) and the stable id of log
event names; a name that is neither a label of the catalogue nor a log event the SUT
declares is refused when the file is loaded, not silently never met.
"""

from __future__ import annotations

import tomllib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mallory.errors import MalloryError
from mallory.instrument.catalogue import Catalogue
from mallory.observer.log_events import log_event_id

MAX_WAYPOINTS = 64
_KEYS = {"name", "events", "faults"}


@dataclass(frozen=True)
class Waypoint:
    """One predicate: `types` (any of the event types a name may denote, per name) all
    occurred and a fault of each family in `faults` is in force."""

    name: str
    events: tuple[str, ...]
    faults: tuple[str, ...]
    types: tuple[frozenset[str], ...]

    def holds(self, window_types: frozenset[str], active_families: frozenset[str]) -> bool:
        return all(alternatives & window_types for alternatives in self.types) and all(
            family in active_families for family in self.faults
        )


class Waypoints:
    """The file's predicates, in order; `level` evaluates a window."""

    def __init__(self, waypoints: Sequence[Waypoint], source: str) -> None:
        self.waypoints = tuple(waypoints)
        self.source = source

    @property
    def names(self) -> list[str]:
        return [w.name for w in self.waypoints]

    def level(self, window_types: Iterable[str], active_families: Iterable[str]) -> int:
        """The 1-based index of the last waypoint the window satisfies, 0 for none."""
        types, families = frozenset(window_types), frozenset(active_families)
        for index in range(len(self.waypoints), 0, -1):
            if self.waypoints[index - 1].holds(types, families):
                return index
        return 0


def event_types(name: str, catalogue: Catalogue) -> frozenset[str]:
    """The timeline types an event name may denote: the annotation labelled `name` (one
    per kind and id it has in the catalogue), or the log event called `name`."""
    code = {f"{e.kind}:{e.id:x}" for e in catalogue if e.label == name}
    return frozenset(code | {f"LOG:{log_event_id(name):x}"})


def parse_waypoints(text: str, source: str, catalogue: Catalogue, log_names: Iterable[str],
                    families: Iterable[str]) -> Waypoints:
    """The waypoints of a TOML text; MalloryError naming the file and the entry when it is
    malformed or names an event the SUT does not have (`catalogue` labels, `log_names`) or
    a fault family the campaign does not know (`families`)."""
    entries = _entries(text, source)
    labels = {e.label for e in catalogue if e.label}
    known_events = labels | set(log_names)
    known_families = set(families)
    waypoints = []
    for i, entry in enumerate(entries, start=1):
        where = f"{source}: waypoint {i}"
        if not isinstance(entry, dict) or set(entry) - _KEYS:
            raise MalloryError(f"{where}: fields are {', '.join(sorted(_KEYS))}")
        name = entry.get("name")
        events = entry.get("events", [])
        faults = entry.get("faults", [])
        if not isinstance(name, str) or not name or "," in name or ":" in name:
            raise MalloryError(f"{where}: needs a name, without ',' or ':' (fuzzer_stats lists them as name:count,...)")
        for field, values in (("events", events), ("faults", faults)):
            if not isinstance(values, list) or not all(isinstance(v, str) and v for v in values):
                raise MalloryError(f"{where} ({name}): {field} must be a list of names")
        if not events and not faults:
            raise MalloryError(f"{where} ({name}): give events, faults or both (it would hold everywhere)")
        for event in events:
            if event not in known_events:
                known = ", ".join(sorted(known_events)) or "none: the SUT has no catalogue or log events"
                raise MalloryError(f"{where} ({name}): no event named {event!r} (known: {known})")
        for family in faults:
            if family not in known_families:
                raise MalloryError(f"{where} ({name}): no fault family {family!r} (known: {', '.join(sorted(known_families))})")
        waypoints.append(Waypoint(name, tuple(events), tuple(faults), tuple(event_types(e, catalogue) for e in events)))
    if len({w.name for w in waypoints}) != len(waypoints):
        raise MalloryError(f"{source}: two waypoints have the same name")
    return Waypoints(waypoints, source)


def _entries(text: str, source: str) -> list[Any]:
    """The [[waypoint]] tables of a file's text, unchecked inside; MalloryError if there
    are none, too many, or anything else."""
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise MalloryError(f"{source}: not valid TOML ({exc})") from None
    entries = raw.get("waypoint")
    if set(raw) != {"waypoint"} or not isinstance(entries, list) or not entries:
        raise MalloryError(f"{source}: expected one or more [[waypoint]] tables and nothing else")
    if len(entries) > MAX_WAYPOINTS:
        raise MalloryError(f"{source}: at most {MAX_WAYPOINTS} waypoints, got {len(entries)}")
    return entries


def _read(path: Path) -> str:
    try:
        return Path(path).read_text()
    except OSError as exc:
        raise MalloryError(f"cannot read waypoints {path}: {exc.strerror}") from None


def load_waypoints(path: Path, catalogue: Catalogue, log_names: Iterable[str], families: Iterable[str]) -> Waypoints:
    return parse_waypoints(_read(path), str(path), catalogue, log_names, families)


def waypoint_names(path: Path) -> list[str]:
    """The names in a waypoint file, in its order (deeper levels later), without resolving
    their events, which needs the SUT's catalogue: for readers of a finished campaign such
    as the report. MalloryError if the file cannot be read or is no waypoint file."""
    entries = _entries(_read(path), str(path))
    names = [entry.get("name") if isinstance(entry, dict) else None for entry in entries]
    if not all(isinstance(name, str) and name for name in names):
        raise MalloryError(f"{path}: a waypoint has no name")
    return names
