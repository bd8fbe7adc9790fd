"""The report's two kinds of page, composed from data already computed (pure)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from html import escape

from mallory.campaign.config import CampaignConfig
from mallory.report import html
from mallory.report.campaign_data import BugInfo, CampaignData
from mallory.report.comparison import (
    BASELINE,
    Comparison,
    MetricComparison,
    group_label,
)
from mallory.report.stats import a12_magnitude
from mallory.report.verdict_view import (
    LatencyPart,
    anomalies_part,
    latency_part,
    sightings_part,
)

#: a plot: its title and its PNG
Plot = tuple[str, bytes]


@dataclass
class CampaignSection:
    """One campaign's part of the index: its data, plots and bug page links."""

    data: CampaignData
    anchor: str
    plots: list[list[Plot]] = field(default_factory=list)  # rows, each drawn side by side
    bug_pages: dict[str, str] = field(default_factory=dict)  # signature -> href
    notes: list[str] = field(default_factory=list)


def summary_rows(data: CampaignData) -> list[tuple[str, object]]:
    c, s = data.config, data.stats
    return [
        ("directory", str(data.root)),
        ("SUT", c.sut),
        ("policy / reward", f"{c.policy} / {c.reward}" + (f" (preset {c.preset})" if c.preset else "")),
        ("seed", c.seed),
        ("nodes", c.nodes),
        ("faults", ", ".join(c.faults) if c.faults else "all the SUT can take"),
        ("workload", c.workload),
        ("steps × window", f"{c.steps} × {c.window_s} s, reset {c.reset_s} s"),
        ("state abstraction", c.abstraction),
        *calibration_rows(c),
        ("waypoints", c.waypoints or "none"),
        ("run time (s)", s.get("run_time")),
        ("schedules", s.get("schedules_done")),
        ("steps (late)", f"{s.get('steps_done', '-')} ({s.get('late_steps', '-')})"),
        ("refused faults", s.get("refused_faults")),
        ("distinct states", s.get("distinct_states")),
        ("states per hour", s.get("states_per_hour")),
        ("pairs covered", pairs_text(s)),
        *model_rows(data),
        ("bugs", len(data.bugs)),
        ("feedback p50 / p99 (ms)", f"{s.get('feedback_ms_p50', '-')} / {s.get('feedback_ms_p99', '-')}"),
    ]


def pairs_text(stats: dict[str, str]) -> str:
    """Pairs covered and when the last new one came, from fuzzer_stats."""
    pairs, last = stats.get("pairs_covered"), stats.get("last_new_pair", "-")
    if pairs is None:
        return "n/a: the campaign predates event-pair coverage"
    return pairs + (f" (last new at {last} s)" if last != "-" else "")


def model_rows(data: CampaignData) -> list[tuple[str, str]]:
    """The protocol model's coverage from fuzzer_stats, and the steps it could not take by
    event, from the schedules' records (none: the campaign had no model)."""
    if data.config.model is None:
        return []
    s = data.stats
    mismatches: dict[str, int] = {}
    for record in data.schedules:
        for step in record.get("steps", []):
            for event in step.get("model_mismatches", []):
                mismatches[event] = mismatches.get(event, 0) + 1
    by_event = ", ".join(f"{event} {n}" for event, n in sorted(mismatches.items(), key=lambda item: -item[1]))
    return [
        ("protocol model", data.config.model),
        ("model states (transitions)", f"{s.get('model_states', '-')} ({s.get('model_transitions', '-')})"),
        ("model mismatches", f"{s.get('model_mismatches', '-')}" + (f": {by_event}" if by_event else "")),
    ]


def calibration_rows(config: CampaignConfig) -> list[tuple[str, str]]:
    """The similarity threshold and where it came from: a calibration's measurements, or
    the configuration."""
    cal = config.calibration
    if cal is None:
        # asked for but absent: the campaign stopped before its calibration ended
        why = (f"not calibrated ({config.calibrate} fault-free windows asked for, none recorded)"
               if config.calibrate else "not calibrated")
        return [("similarity threshold", f"{config.threshold:.4g} (threshold from the configuration)"), ("calibration", why)]
    steady = f"in {cal.steady_states} steady state(s)" if cal.steady_states is not None else "(steady states not recorded)"
    largest = f"{cal.largest:.4g}" if cal.largest is not None else "not recorded"
    return [
        ("similarity threshold", f"{cal.threshold:.4g} (calibrated: the lower of the configured one and the largest)"),
        ("calibration", f"{cal.windows} fault-free windows {steady}; largest threshold under which 90% of "
                        f"them coincide: {largest}"),
    ]


def waypoint_part(data: CampaignData) -> str:
    """The table of how many schedules reached each waypoint ("" without waypoints)."""
    reached = data.waypoints
    if reached is None:
        return ""
    try:
        total = int(data.stats["schedules_done"])
    except (KeyError, ValueError):
        total = len(data.schedules)
    counted = sum(n for _, n in reached.counts)
    rows = [[name, n, f"{n / total:.0%}" if total else "-"] for name, n in reached.counts]
    rows.append(["(none reached)", total - counted, f"{(total - counted) / total:.0%}" if total else "-"])
    parts = [f"<h3>Waypoints ({total} schedules)</h3>",
             "<p class=\"note\">Each schedule counts once, under the deepest waypoint it reached: the last in "
             "the file that one of its windows satisfied. Deeper waypoints come later.</p>"]
    if reached.problem:
        parts.append(f"<p class=\"note\">{escape(reached.problem)}: the waypoints in the order fuzzer_stats "
                     "records them, those no schedule reached missing.</p>")
    parts.append(html.table(["waypoint", "schedules", "share"], rows))
    return "\n".join(parts)


def bug_rows(section: CampaignSection) -> list[list[object]]:
    rows = []
    origin = section.data.start_time
    for bug in section.data.bugs:
        href = section.bug_pages.get(bug.signature)
        name = html.link(href, bug.signature) if href else escape(bug.signature)
        rows.append([name, f"{bug.report.get('oracle', '?')}/{bug.report.get('kind', '?')}",
                     str(bug.report.get("message", ""))[:160], html.when(bug.first_seen, origin),
                     html.when(bug.last_seen, origin), bug.count])
    return rows


def _at_horizon(comparison: MetricComparison, group: str, campaigns: int) -> str:
    """A group's count at the horizon: mean ± std (min–max), over how many of its campaigns
    recorded it if not all."""
    curve = comparison.curve(group)
    if curve is None:
        return "n/a"
    s = curve.final_spread
    text = f"{s.mean:.4g} ± {s.std:.2g} ({s.low:g}–{s.high:g})"
    return text + (f", {curve.runs} of {campaigns}" if curve.runs < campaigns else "")


def comparison_part(comparison: Comparison, plots: Sequence[Plot]) -> str:
    """The groups at the common horizon: the overlay plots, each group's steps, states and
    pairs, and the contrasts between groups."""
    parts = ["<h2>Comparison by policy</h2>", html.side_by_side(plots)]
    if not comparison.pairs.curves:
        parts.append("<p class=\"note\">No pairs covered to compare: every campaign predates event-pair coverage.</p>")
    parts.append(f"<p class=\"note\">At the common horizon, {comparison.horizon_s:.1f} s (the shortest campaign's "
                 "run time), over each group's campaigns (seeds): mean ± standard deviation (min–max). A group is "
                 "a policy or a preset, with /reward when the reward is not the one it implies and +waypoints when "
                 "a waypoint file guided it. Steps done: a group that spends longer per step (deciding, enacting, "
                 "waiting for feedback) has taken fewer steps by the horizon.</p>")
    rows = [[group, n, *(_at_horizon(m, group, n) for m in (comparison.steps, comparison.states, comparison.pairs))]
            for group, n in comparison.campaigns.items()]
    parts.append(html.table(["group", "campaigns", "steps done", "distinct states", "pairs covered"], rows))
    contrasts = [(m.metric.name, c) for m in (comparison.states, comparison.pairs) for c in m.contrasts]
    if contrasts:
        parts.append(f"<p>Each measure at the horizon: each group against {BASELINE} when that group has it, else "
                     "every ordered pair of groups. Vargha–Delaney Â12: the probability that a "
                     "campaign of A reaches more than one of B (0.5: no difference). p: the one-sided Mann–Whitney "
                     "U test's p-value for \"A reaches more than B\" (with few campaigns per group it cannot be "
                     "small: one against one is never below 0.5).</p>")
        parts.append(html.table(["measure", "A", "B", "Â12(A, B)", "effect", "p (A > B)"],
                                [[name, c.a, c.b, c.a12, a12_magnitude(c.a12), c.p_greater] for name, c in contrasts]))
    return "\n".join(parts)


def index_page(sections: Sequence[CampaignSection], overview: str = "", shared_plots: Sequence[Sequence[Plot]] = ()) -> str:
    title = "Mallory campaign report" + (f": {sections[0].data.name}" if len(sections) == 1 else f" ({len(sections)} campaigns)")
    body = [f"<h1>{escape(title)}</h1>"]
    if len(sections) > 1:
        body.append("<ul>" + "".join(f"<li>{html.link('#' + s.anchor, f'{s.anchor}: {s.data.name}')} ({escape(group_label(s.data.config))})</li>"
                                     for s in sections) + "</ul>")
    body.append(overview)
    body += [html.side_by_side(row) for row in shared_plots]
    for s in sections:
        body.append(f"<h2 id=\"{escape(s.anchor)}\">Campaign {escape(s.anchor)}: {escape(s.data.name)}</h2>")
        body.append(html.key_values(summary_rows(s.data)))
        body.append(waypoint_part(s.data))
        for note in s.notes:
            body.append(f"<p class=\"note\">{escape(note)}</p>")
        body += [html.side_by_side(row) for row in s.plots]
        body.append(f"<h3>Bugs ({len(s.data.bugs)})</h3>")
        if s.data.bugs:
            body.append(html.table(["signature", "oracle", "message", "first seen", "last seen", "sightings"],
                                   bug_rows(s), raw_columns=(0,)))
        else:
            body.append("<p>No bug found.</p>")
    return html.page(title, "\n".join(body))


@dataclass
class TimelineSection:
    """One diagram of the bug page: a step's window or the reset."""

    title: str
    svg: str | None
    opened: bool = False
    start_ns: int = 0


@dataclass
class TimelinePart:
    """The bug page's timeline: what to say about it, its diagrams, the ShiViz file."""

    note: str
    sections: list[TimelineSection] = field(default_factory=list)
    shiviz_href: str | None = None


def bug_page(bug: BugInfo, origin_s: float | None, index_href: str, timeline: TimelinePart,
             logs: Sequence[tuple[str, str]], latency: LatencyPart) -> str:
    """logs: (name, href) of the schedule's node logs; latency: the schedule's latency plot."""
    r = bug.report
    body = [
        f"<p>{html.link(index_href, 'back to the report')}</p>",
        f"<h1>Bug {escape(bug.signature)}</h1>",
        html.key_values([
            ("oracle / kind", f"{r.get('oracle', '?')} / {r.get('kind', '?')}"),
            ("node", r.get("node")),
            ("schedule", bug.schedule.get("index")),
            ("sightings", bug.count),
            ("first seen", html.when(bug.first_seen, origin_s)),
            ("last seen", html.when(bug.last_seen, origin_s)),
            ("bundle", str(bug.bundle)),
        ]),
        "<h2>Fault schedule</h2>",
        html.schedule_table(bug.schedule),
        "<h2>The oracle's explanation</h2>",
        html.explanation(r),
        anomalies_part(r),
        sightings_part(bug.sightings, origin_s),
        latency_part(latency),
        "<h2>Lamport timeline</h2>",
        f"<p class=\"note\">{escape(timeline.note)}</p>",
    ]
    if timeline.sections:
        body.append("<p class=\"note\">Lanes are nodes; dots are events at their Lamport time (hover for names); "
                    "arrows are messages from SEND to RECV within a diagram; shaded spans are faults, from when "
                    "they were enacted to their heal or the schedule's reset.</p>")
    for section in timeline.sections:
        opened = " open" if section.opened else ""
        inner = f"<div class=\"scroll\">{section.svg}</div>" if section.svg else "<p>No event in this window.</p>"
        body.append(f"<details class=\"section\" data-start-ns=\"{section.start_ns}\"{opened}>"
                    f"<summary>{escape(section.title)}</summary>{inner}</details>")
    if timeline.shiviz_href:
        body.append(f"<p>The same events for ShiViz: {html.link(timeline.shiviz_href, 'ShiViz log')} "
                    "(open it on ShiViz's input page).</p>")
    body.append("<h2>Node logs</h2>")
    body.append("<ul>" + "".join(f"<li>{html.link(href, name)}</li>" for name, href in logs) + "</ul>"
                if logs else "<p>The bundle holds no node logs.</p>")
    return html.page(f"Bug {bug.signature}", "\n".join(body))
