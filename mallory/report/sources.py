"""Where the report's inputs are: the SUT's annotation catalogue, a schedule's time span.

Kept apart from `build` (which draws with matplotlib) so that `mallory export` and command
discovery do not pay for importing it.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from mallory.errors import MalloryError
from mallory.harness.spec import load_spec
from mallory.instrument.catalogue import Catalogue, catalogue_path

#: the most events one diagram of a bug page draws: the first ones of its step window
DEFAULT_MAX_EVENTS = 1500


def sut_catalogue(sut: str | None) -> Catalogue | None:
    """The catalogue the build wrote next to the SUT's program (`<program>.mallory.json`),
    found through the campaign's `sut` (a spec path); None if there is none (names fall back
    to ids), as for a built-in SUT or an unknown campaign (None)."""
    if sut is None or not sut.endswith(".toml") or not Path(sut).exists():
        return None
    try:
        program = load_spec(sut).command[0]
    except MalloryError:
        return None
    path = Path(catalogue_path(program))
    return Catalogue.load(path) if path.exists() else None


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
