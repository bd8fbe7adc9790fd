"""Where the report's inputs are: the SUT's annotation catalogue, a schedule's time span.

Kept apart from `build` (which draws with matplotlib) so that `mallory export` and command
discovery do not pay for importing it.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from mallory.instrument.catalogue import Catalogue, catalogue_path
from mallory.suts.registry import sut_programs

#: the most events one diagram of a bug page draws: the first ones of its step window
DEFAULT_MAX_EVENTS = 1500


def sut_catalogue(sut: str | None) -> Catalogue | None:
    """The catalogues the build wrote next to the SUT's programs (`<program>.mallory.json`),
    merged: the programs found through the campaign's `sut` (a spec's, or a built-in's
    builds: mallory/suts/registry.py `sut_programs`); None if there is none (names fall back
    to ids), as for an uninstrumented SUT or an unknown campaign (None)."""
    found = [Path(catalogue_path(program)) for program in sut_programs(sut)] if sut is not None else []
    present = [path for path in found if path.exists()]
    return load_catalogues(present) if present else None


def load_catalogues(paths: Sequence[Path]) -> Catalogue:
    catalogue = Catalogue()
    for path in paths:
        catalogue = catalogue.merge(Catalogue.load(path))
    return catalogue


def schedule_span(schedule: dict) -> tuple[int, int] | None:
    start, end = schedule.get("started_ns"), schedule.get("ended_ns")
    if isinstance(start, int) and isinstance(end, int) and end > start:
        return start, end
    return None
