"""`mallory report`'s work: read campaign directories, compute, write the report's files.

    OUT/index.html                 summary, plots (PNG data: URIs), bug lists
    OUT/bugs/<signature>.html      one page per bug: schedule, explanation, each anomaly with its
                                   picture, sightings, latency plot, timeline SVG, logs
    OUT/bugs/<signature>.shiviz    the bug's timeline slice in ShiViz's log format

With several campaigns, bug files are prefixed by the campaign's position (c1-, c2-...).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from mallory.errors import MalloryError
from mallory.history.ops import read_history
from mallory.pictures.latency import latency_svg
from mallory.report import pages, plots, series
from mallory.report.campaign_data import BugInfo, CampaignData, PlotRow, load_campaign
from mallory.report.comparison import compare, group_label
from mallory.report.names import EventNamer
from mallory.report.recording import Recording, read_recording
from mallory.report.shiviz import shiviz_log
from mallory.report.sources import (
    DEFAULT_MAX_EVENTS,
    load_catalogues,
    schedule_span,
    sut_catalogue,
)
from mallory.report.timeline_view import (
    fault_spans,
    head_by_time,
    schedule_sections,
    timeline_svg,
)
from mallory.report.verdict_view import LatencyPart
from mallory.timeline.builder import Committed


@dataclass
class ReportOptions:
    out: Path | None = None
    catalogues: Sequence[Path] = ()
    max_events: int = DEFAULT_MAX_EVENTS


def bug_timeline(bug: BugInfo, recording: Recording | None, span_index: int | None,
                 max_events: int, namer: EventNamer) -> tuple[list[Committed], pages.TimelinePart]:
    """The schedule's entries (for the ShiViz file) and the page's timeline: one diagram per
    step window and one for the reset, each of its earliest `max_events` events (a fault's
    effect starts with its step)."""
    if recording is None:
        return [], pages.TimelinePart("No event recording in the campaign directory (events/events*.jsonl): no timeline.")
    if span_index is None:
        return [], pages.TimelinePart("The schedule record has no start and end times: no timeline.")
    entries = recording.spans[span_index]
    if not entries:
        return [], pages.TimelinePart("The recording holds no event of this schedule.")
    faults = fault_spans(bug.schedule)
    sections = schedule_sections(bug.schedule)
    part = pages.TimelinePart(
        f"Schedule {bug.schedule.get('index')}: {len(entries)} events, drawn per step window and for the reset "
        f"after the last step (the checks that found the bug ran after it); each diagram shows at most the "
        f"first {max_events} events of its window." + (" " + " ".join(recording.warnings) if recording.warnings else "")
    )
    for i, section in enumerate(sections):
        inside = [e for e in entries if section.start_ns <= e.real_ns < section.end_ns]
        shown = head_by_time(inside, max_events)
        cut = f", the first {len(shown)} drawn" if len(shown) < len(inside) else ""
        title = f"{section.label} ({(section.end_ns - section.start_ns) / 1e9:.2f} s, {len(inside)} events{cut})"
        svg = timeline_svg(shown, namer, faults, recording.nodes) if shown else None
        part.sections.append(pages.TimelineSection(title, svg, opened=i >= len(sections) - 2, start_ns=section.start_ns))
    return entries, part


def bug_latency(bug: BugInfo) -> LatencyPart:
    """The latency plot of the bug's schedule, from the history in its bundle."""
    path = bug.history_path()
    if path is None:
        return LatencyPart(None, "The bundle holds no client history (the campaign ran no workload).")
    try:
        _, ops = read_history(path)
        svg = latency_svg(ops, str(path))
    except MalloryError as exc:
        return LatencyPart(None, f"The history could not be read: {exc}")
    return LatencyPart(svg, "" if svg is not None else "No client operation of the history has times.")


def _counts_over_time(runs: dict[str, Sequence[PlotRow]]) -> list[pages.Plot]:
    """Distinct states over time, and beside it pairs covered over time of the campaigns
    that recorded them (no pairs plot if none did)."""
    states = {label: series.over_time(rows, series.STATES) for label, rows in runs.items()}
    out = [("distinct states over time", plots.cumulative_plot(series.STATES, states))]
    pairs = {label: series.over_time(rows, series.PAIRS) for label, rows in runs.items() if series.PAIRS.recorded(rows)}
    if pairs:
        out.append(("pairs covered over time", plots.cumulative_plot(series.PAIRS, pairs)))
    return out


def _campaign_plots(data: CampaignData, recording: Recording | None, width: float, with_counts: bool) -> list[list[pages.Plot]]:
    out = []
    if with_counts:
        out.append(_counts_over_time({data.name: data.plot}))
        out.append([("new states per hour", plots.rate_plot({data.name: series.states_per_hour(data.plot, width)}, width))])
    starts, mix = series.fault_mix(data.plot, width)
    out.append([("fault mix over time", plots.fault_mix_plot(starts, mix, width))])
    t, fb = series.feedback_series(data.plot)
    lt, late = series.late_series(data.plot)
    out.append([("feedback latency", plots.feedback_plot(t, fb, lt, late))])
    origin = int(data.start_time * 1e9) if data.start_time is not None else None
    out.append([("observer loss", plots.loss_plot(recording.loss if recording else None, origin))])
    return out


def _comparison(campaigns: Sequence[CampaignData], width: float) -> tuple[str, list[list[pages.Plot]]]:
    """With several campaigns: the comparison by group, and the plots with a line per campaign."""
    groups: dict[str, list[list[PlotRow]]] = {}
    for data in campaigns:
        groups.setdefault(group_label(data.config), []).append(data.plot)
    overview = ""
    compared = compare(groups)
    if compared is not None:
        overlays = [(f"{m.metric.name} by group", plots.overlay_plot(m.metric, m.curves, compared.horizon_s))
                    for m in (compared.states, compared.pairs) if m.curves]
        overview = pages.comparison_part(compared, overlays)
    labels = [f"c{k}: {d.name} ({group_label(d.config)})" for k, d in enumerate(campaigns, start=1)]  # names may repeat
    shared = [
        _counts_over_time({label: d.plot for label, d in zip(labels, campaigns)}),
        [("new states per hour", plots.rate_plot({label: series.states_per_hour(d.plot, width)
                                                  for label, d in zip(labels, campaigns)}, width))],
    ]
    return overview, shared


def build_report(dirs: Sequence[Path], options: ReportOptions) -> Path:
    """Write the report; returns the path of its index.html."""
    if not dirs:
        raise MalloryError("give at least one campaign directory")
    if options.max_events < 1:
        raise MalloryError(f"--max-events must be positive, got {options.max_events}")
    campaigns = [load_campaign(Path(d)) for d in dirs]
    out = Path(options.out) if options.out else Path(dirs[0]) / "report"
    (out / "bugs").mkdir(parents=True, exist_ok=True)
    extra = load_catalogues(options.catalogues)
    duration = max((c.plot[-1].time_s for c in campaigns if c.plot), default=0.0)
    width = series.bin_width(duration)
    several = len(campaigns) > 1
    sections = []
    for k, data in enumerate(campaigns, start=1):
        section = pages.CampaignSection(data, anchor=f"c{k}")
        found = sut_catalogue(data.config.sut)
        namer = EventNamer(extra.merge(found) if found is not None else extra)
        if found is None and not options.catalogues:
            section.notes.append("No annotation catalogue found next to the SUT's program: code events are named by id.")
        spans = [schedule_span(b.schedule) for b in data.bugs]
        recorded = data.recordings()
        recording = read_recording(recorded, [s for s in spans if s is not None]) if recorded else None
        positions = iter(range(len(spans)))
        span_index = [next(positions) if s is not None else None for s in spans]
        for bug, index in zip(data.bugs, span_index):
            stem = f"c{k}-{bug.signature}" if several else bug.signature
            section.bug_pages[bug.signature] = f"bugs/{stem}.html"
            _write_bug_page(out, stem, bug, data, recording, index, namer, options.max_events)
        section.plots = _campaign_plots(data, recording, width, with_counts=not several)
        if data.plot and not series.PAIRS.recorded(data.plot):
            section.notes.append("No pairs covered over time: this campaign's plot_data does not record them "
                                 "(it predates event-pair coverage).")
        sections.append(section)
    overview, shared = _comparison(campaigns, width) if several else ("", [])
    index = out / "index.html"
    index.write_text(pages.index_page(sections, overview, shared))
    return index


def _write_bug_page(out: Path, stem: str, bug: BugInfo, data: CampaignData, recording: Recording | None,
                    span_index: int | None, namer: EventNamer, max_events: int) -> None:
    entries, timeline = bug_timeline(bug, recording, span_index, max_events, namer)
    if entries:
        (out / "bugs" / f"{stem}.shiviz").write_text(shiviz_log(entries, namer))
        timeline.shiviz_href = f"{stem}.shiviz"
    bugs_dir = out / "bugs"
    logs = [(p.name, os.path.relpath(p, bugs_dir)) for p in bug.log_files()]
    html_text = pages.bug_page(bug, data.start_time, "../index.html", timeline, logs, bug_latency(bug))
    (bugs_dir / f"{stem}.html").write_text(html_text)
