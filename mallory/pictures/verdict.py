"""Which picture each anomaly case calls for, and the pictures of one run, named as the
files the campaign writes beside its results.edn."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from mallory.history.ops import Op
from mallory.pictures.cycles import cycle_svg
from mallory.pictures.latency import latency_svg
from mallory.pictures.linear import linear_svg

#: the run's latency plot, under Jepsen's name
LATENCY_FILE = "latency-raw.svg"


@dataclass(frozen=True)
class Picture:
    """An SVG picture and its file name in a run directory."""

    name: str
    svg: str


def case_svg(case: Mapping[str, Any]) -> str | None:
    """The picture of one anomaly case: its cycle (an Elle-style cycle case), the ops
    around the stuck point (a nonlinearizable case); None for other anomalies (they are
    words: an incompatible order, an aborted read...)."""
    if case.get("cycle"):
        return cycle_svg(case)
    if case.get("around"):
        return linear_svg(case)
    return None


def run_pictures(ops: Sequence[Op], anomalies: Mapping[str, Sequence[Mapping[str, Any]]],
                 source: str = "<history>") -> list[Picture]:
    """The pictures of a run: its latency plot (when its ops have times) and one per anomaly
    case that has one, named `<anomaly type>-<k>.svg` (k from 1, in the checker's order).
    Raises HistoryError when the history's calls do not pair up."""
    latency = latency_svg(ops, source)
    out = [Picture(LATENCY_FILE, latency)] if latency is not None else []
    for kind, cases in anomalies.items():
        for k, case in enumerate(cases, start=1):
            svg = case_svg(case)
            if svg is not None:
                out.append(Picture(f"{kind}-{k}.svg", svg))
    return out
