"""`mallory report DIR [DIR...]`: a campaign directory (or several) as an offline HTML report.

    mallory report runs/c1                        # -> runs/c1/report/index.html
    mallory report runs/q1 runs/q2 runs/r1 runs/r2 --out cmp   # overlay, grouped by policy and settings

The page is self-contained (inline CSS and SVG, PNG plots as data: URIs): the summary
(calibration, abstraction, waypoints reached), distinct states and pairs covered over time,
new states per hour, with several campaigns their mean and spread by group (policy, preset,
reward, waypoints) with Vargha–Delaney Â12 and Mann–Whitney p-values; fault mix, feedback
latency, observer loss; the bug list, and a page per bug with its fault schedule, the
Lamport timeline of the schedule around the failure, the oracle's explanation and the node
logs.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from mallory.report.sources import DEFAULT_MAX_EVENTS

NAME = "report"
HELP = "write an HTML report (plots, bug pages with Lamport timelines) of campaign directories"


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("dirs", nargs="+", type=Path, metavar="DIR", help="campaign directories")
    parser.add_argument("--out", type=Path, help="report directory (default: the first DIR's report/)")
    parser.add_argument("--catalogue", type=Path, action="append", default=[], metavar="FILE",
                        help="an annotation catalogue (<binary>.mallory.json) naming code events; "
                        "by default the one next to the SUT's program (a spec's, or a built-in's build)")
    parser.add_argument("--max-events", type=int, default=DEFAULT_MAX_EVENTS,
                        help=f"most events each diagram of a bug page draws (default {DEFAULT_MAX_EVENTS})")


def run(args: argparse.Namespace) -> int:
    from mallory.report.build import (  # matplotlib: only when reporting
        ReportOptions,
        build_report,
    )

    index = build_report(args.dirs, ReportOptions(out=args.out, catalogues=args.catalogue, max_events=args.max_events))
    print(f"report: {index}")
    return 0
