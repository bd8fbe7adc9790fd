"""The bug page's verdict in words and pictures (pure): every anomaly the history showed,
each case's explanation beside its picture (`mallory.pictures`: a cycle's graph, the ops
around a linearizability failure), the sightings of the bug and what each saw, and the
schedule's latency plot."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from html import escape
from typing import Any

from mallory.pictures.verdict import case_svg
from mallory.report import html


@dataclass(frozen=True)
class LatencyPart:
    """The schedule's latency plot (SVG), or None and why there is none."""

    svg: str | None
    note: str = ""


def anomalies_part(report: Mapping[str, Any]) -> str:
    """Each anomaly type of a history's finding (its report's details are the checker's
    result), its cases in words and, where there is one, in a picture; "" for other
    findings."""
    details = report.get("details")
    anomalies = details.get("anomalies") if isinstance(details, dict) else None
    if not isinstance(anomalies, dict) or not anomalies:
        return ""
    types = f"{len(anomalies)} type{'s' if len(anomalies) != 1 else ''}"
    parts = [f'<h2 id="anomalies">Anomalies of the history ({types})</h2>',
             "<p class=\"note\">One history, one finding: every anomaly the checker found in this schedule's "
             "history, with up to 10 cases each. Cycles are drawn with their transactions as nodes and their "
             "dependencies as arrows (ww, wr, rw, process, realtime); hover a transaction for its "
             "operations.</p>"]
    if details.get("not"):
        parts.append(html.key_values([("the weakest models it violates", ", ".join(details["not"])),
                                      ("also violates", ", ".join(details.get("also_not") or []))]))
    for i, (kind, cases) in enumerate(anomalies.items()):
        opened = " open" if i == 0 else ""
        parts.append(f'<details class="anomaly" data-anomaly="{escape(kind)}"{opened}><summary>{escape(kind)}: '
                     f"{len(cases)} case{'s' if len(cases) != 1 else ''}</summary>")
        for case in cases:
            words = f"<pre>{escape(str(case.get('text', '')))}</pre>"
            svg = case_svg(case)
            if svg is None:
                parts.append(words)
            else:  # the picture first; the checker's words one click away
                parts.append(f'<div class="picture scroll">{svg}</div>'
                             f'<details class="words"><summary>in words</summary>{words}</details>')
        parts.append("</details>")
    return "\n".join(parts)


def sightings_part(sightings: Sequence[Mapping[str, Any]], origin_s: float | None) -> str:
    """Each sighting: its schedule, when, how often and where it showed, what it saw."""
    rows = []
    for s in sightings:
        time = s.get("time")
        rows.append([s.get("schedule"), html.when(time if isinstance(time, (int, float)) else None, origin_s),
                     s.get("occurrences"), ", ".join(s.get("nodes") or []), ", ".join(s.get("seen") or [])])
    return ("<h2>Sightings</h2><p class=\"note\">Every schedule whose checks found this bug; for a history, "
            "the anomaly types it showed that time.</p>"
            + html.table(["schedule", "when", "occurrences", "nodes", "anomalies seen"], rows))


def latency_part(latency: LatencyPart) -> str:
    """The schedule's client operations: latency by invocation time, faults shaded."""
    head = "<h2 id=\"latency\">Latency of the schedule's client operations</h2>"
    if latency.svg is None:
        return head + f"<p>{escape(latency.note)}</p>"
    return (head + "<p class=\"note\">Each dot is an operation: when it was invoked (since the history started) "
            "and how long it took to complete, by outcome; shaded: the faults in force, from the nemesis ops "
            f"in the history.</p><div class=\"picture scroll\">{latency.svg}</div>")
