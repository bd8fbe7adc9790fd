"""The report's HTML pages as strings (pure): inline CSS, images as data: URIs, SVG inline.

Nothing a page refers to lives on another machine: no scripts, fonts or style sheets from
a CDN; links go only to other pages of the report and to files of the campaign directory.
"""

from __future__ import annotations

import base64
import time
from collections.abc import Iterable, Sequence
from html import escape
from typing import Any

import orjson

CSS = """
body { font-family: sans-serif; margin: 1.5em; color: #222; max-width: 1400px; }
h1 { font-size: 1.5em; } h2 { font-size: 1.2em; margin-top: 1.6em; border-bottom: 1px solid #ddd; }
table { border-collapse: collapse; margin: 0.5em 0; font-size: 0.9em; }
td, th { border: 1px solid #ddd; padding: 3px 8px; text-align: left; vertical-align: top; }
th { background: #f4f4f4; }
img.plot { display: block; margin: 0.6em 0; max-width: 100%; }
.side-by-side { display: flex; gap: 0.5em; align-items: flex-start; }
.side-by-side img.plot { flex: 1 1 0; min-width: 0; max-width: 800px; }
pre { background: #f7f7f7; padding: 0.6em; overflow-x: auto; font-size: 0.85em; }
.scroll { overflow-x: auto; border: 1px solid #ddd; }
.note { color: #666; font-size: 0.9em; }
svg.timeline circle:hover { stroke: #000; stroke-width: 2; }
.picture svg { display: block; margin: 0.4em 0; }
details.anomaly { margin: 0.4em 0; } details.anomaly > summary { font-weight: bold; cursor: pointer; }
svg.timeline line.msg:hover { stroke: #d62728; stroke-width: 2; }
"""


def page(title: str, body: str) -> str:
    return (
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        f"<title>{escape(title)}</title><style>{CSS}</style></head>\n<body>\n{body}\n</body></html>\n"
    )


def png_img(png: bytes, alt: str) -> str:
    data = base64.b64encode(png).decode()
    return f'<img class="plot" alt="{escape(alt)}" src="data:image/png;base64,{data}">'


def side_by_side(plots: Sequence[tuple[str, bytes]]) -> str:
    """Plots side by side, each a (title, PNG), shrunk to share the page's width."""
    return '<div class="side-by-side">' + "".join(png_img(png, title) for title, png in plots) + "</div>"


def cell(value: Any) -> str:
    if value is None or value == "":
        return "-"
    if isinstance(value, float):
        return f"{value:.4g}"
    return escape(str(value))


def table(header: Sequence[str], rows: Iterable[Sequence[Any]], raw_columns: Sequence[int] = ()) -> str:
    """A table; cells of `raw_columns` are HTML already (e.g. links), the rest are escaped."""
    head = "".join(f"<th>{escape(h)}</th>" for h in header)
    body = []
    for row in rows:
        body.append("<tr>" + "".join(f"<td>{v if i in raw_columns else cell(v)}</td>" for i, v in enumerate(row)) + "</tr>")
    return f"<table><tr>{head}</tr>{''.join(body)}</table>"


def key_values(pairs: Iterable[tuple[str, Any]]) -> str:
    return "<table>" + "".join(f"<tr><th>{escape(k)}</th><td>{cell(v)}</td></tr>" for k, v in pairs) + "</table>"


def link(href: str, text: str) -> str:
    return f'<a href="{escape(href)}">{escape(text)}</a>'


def when(unix_s: float | None, origin_s: float | None = None) -> str:
    """A Unix time as UTC, with its offset from the campaign start when known."""
    if unix_s is None:
        return "-"
    text = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(unix_s)) + " UTC"
    if origin_s is not None:
        text += f" (+{unix_s - origin_s:.1f} s)"
    return text


def explanation(report: dict[str, Any]) -> str:
    """The oracle's explanation: its message, the sanitizer's report (stack) or where the
    log line was, a crashed or unrestartable node's last log lines and backtrace; then
    every detail it recorded. (A history's anomalies have their own part:
    `verdict_view.anomalies_part`.)"""
    details = report.get("details") or {}
    parts = [f"<p><b>{escape(str(report.get('oracle', '?')))}</b> / {escape(str(report.get('kind', '?')))}"
             + (f" on {escape(str(report['node']))}" if report.get("node") else "") + "</p>"]
    parts.append(f"<pre>{escape(str(report.get('message', '')))}</pre>")
    if isinstance(details, dict) and details.get("report"):
        parts.append(f"<p>Sanitizer report</p><pre>{escape(str(details['report']))}</pre>")
    if isinstance(details, dict) and isinstance(details.get("line"), int) and report.get("node"):
        parts.append(f"<p class=\"note\">line {details['line']} of {escape(str(report['node']))}'s log during the schedule</p>")
    if isinstance(details, dict):
        parts.append(crash_part(details, str(report.get("node") or "the node")))
    if details:
        parts.append("<details><summary>all details</summary><pre>"
                     + escape(orjson.dumps(details, option=orjson.OPT_INDENT_2).decode()) + "</pre></details>")
    return "\n".join(parts)


def crash_part(details: dict[str, Any], node: str) -> str:
    """A dying (or unrestartable) node's backtrace, frame by frame (where the symbolizer
    found the function and line, else the object and offset), and its last log lines; ""
    when the details hold neither."""
    parts = []
    frames = details.get("backtrace") or []
    if frames:
        rows = [[i, frame.get("where") or frame.get("symbol") or "?", f"{frame.get('module')}+{frame.get('offset')}"]
                for i, frame in enumerate(frames, start=1) if isinstance(frame, dict)]
        parts.append(f"<p>Backtrace of {escape(node)} (innermost first, as the fault shim caught the crash)</p>")
        parts.append(table(["#", "function", "object + offset"], rows))
    lines = details.get("last_log_lines") or []
    if lines:
        parts.append(f"<p>The last {len(lines)} lines {escape(node)} logged</p>")
        parts.append("<pre>" + escape("\n".join(str(line) for line in lines)) + "</pre>")
    return "\n".join(parts)


def targets(report: dict[str, Any]) -> str:
    """The nodes (and links) a fault's report says it hit."""
    nodes = report.get("nodes") or []
    links = report.get("links") or []
    text = ",".join(str(n) for n in nodes)
    if links:
        text += (" " if text else "") + " ".join("-".join(map(str, l)) if isinstance(l, list) else str(l) for l in links)
    return text


def schedule_table(schedule: dict[str, Any]) -> str:
    """The fault schedule: each step's action, when it started, what the learner saw."""
    start = schedule.get("started_ns")
    rows = []
    for step in schedule.get("steps", []):
        window = step.get("window_ns") or [None, None]
        offset = (window[0] - start) / 1e9 if isinstance(start, int) and isinstance(window[0], int) else None
        report = step.get("report") if isinstance(step.get("report"), dict) else {}
        rows.append([step.get("step"), step.get("action"), offset, targets(report), step.get("refused"),
                     step.get("state"), step.get("new"), step.get("reward"), step.get("late")])
    return table(["step", "action", "at (s)", "targets", "refused", "state", "new", "reward", "late"], rows)
