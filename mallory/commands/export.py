"""`mallory export --shiviz SOURCE`: a recorded timeline in ShiViz's log format.

SOURCE is an event recording (the wire codec, e.g. a campaign's events/events.jsonl) or a
bug bundle (DIR/bugs/<signature>: its schedule's span of the campaign's recording). The
output opens in ShiViz (https://bestchai.bitbucket.io/shiviz/) as is: the first line is
ShiViz's parser expression `(?<event>.*)\\n(?<host>\\S*) (?<clock>{.*})`, the second the
(empty) execution delimiter, then two lines per event: its text, and `host {vector clock}`.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from mallory.campaign.directory import read_bundle_config
from mallory.errors import MalloryError
from mallory.report.campaign_data import load_bug, recordings
from mallory.report.names import EventNamer
from mallory.report.recording import ALL_TIME, read_recording
from mallory.report.shiviz import shiviz_log
from mallory.report.sources import load_catalogues, schedule_span, sut_catalogue
from mallory.report.timeline_view import tail_by_time

NAME = "export"
HELP = "export a recorded timeline for other tools (--shiviz: ShiViz's vector-clock log)"

log = logging.getLogger(__name__)


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("source", type=Path, help="an event recording (JSON lines) or a bug bundle directory")
    parser.add_argument("--shiviz", action="store_true", required=True, help="write ShiViz's log format")
    parser.add_argument("--out", type=Path, help="output file (default: stdout)")
    parser.add_argument("--catalogue", type=Path, action="append", default=[], metavar="FILE",
                        help="an annotation catalogue naming code events (default for a bundle: the SUT's)")
    parser.add_argument("--max-events", type=int, default=None, help="only the latest N events")


def _bundle_slice(bundle: Path) -> tuple[list, list[str], str | None]:
    """The bundle's schedule's span of its campaign's recording, the recording's warnings,
    and the campaign's SUT (None if the bundle has no campaign.json)."""
    bug = load_bug(bundle)
    campaign = bundle.resolve().parent.parent
    span = schedule_span(bug.schedule)
    if span is None:
        raise MalloryError(f"{bundle}/schedule.json: no started_ns/ended_ns: cannot cut its timeline")
    paths = recordings(campaign)
    if not paths:
        raise MalloryError(f"{bundle}: no event recording at {campaign}/events/ (the bundle's campaign directory)")
    recording = read_recording(paths, [span])
    sut = read_bundle_config(bundle).sut if (bundle / "campaign.json").exists() else None
    return recording.spans[0], recording.warnings, sut


def run(args: argparse.Namespace) -> int:
    source: Path = args.source
    if args.max_events is not None and args.max_events < 1:
        raise MalloryError(f"--max-events must be positive, got {args.max_events}")
    if source.is_dir():
        entries, warnings, sut = _bundle_slice(source)
    elif source.is_file():
        recording = read_recording([source], [ALL_TIME])
        entries, warnings, sut = recording.spans[0], recording.warnings, None
    else:
        raise MalloryError(f"{source}: no such event recording or bug bundle")
    catalogue = load_catalogues(args.catalogue)
    found = sut_catalogue(sut) if not args.catalogue else None
    if found is not None:
        catalogue = catalogue.merge(found)
    if args.max_events is not None:
        entries = tail_by_time(entries, args.max_events)
    if not entries:
        raise MalloryError(f"{source}: no committed events to export" + (f" ({'; '.join(warnings)})" if warnings else ""))
    text = shiviz_log(entries, EventNamer(catalogue))
    for warning in warnings:
        log.warning("mallory export: %s", warning)
    if args.out:
        args.out.write_text(text)
        log.info("%d events -> %s", len(entries), args.out)
    else:
        sys.stdout.write(text)
    return 0
