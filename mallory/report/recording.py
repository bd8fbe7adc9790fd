"""Reading the mediator's event recording (`events/events.jsonl`) for the report.

One pass over a recording rebuilds the committed Lamport timeline exactly as the mediator
built it (the same `TimelineBuilder`), keeps the entries that fall in the requested spans
of the common time axis, and collects the observers' loss counts from their batches. A
day-long recording holds tens of millions of events: the pass logs how far it got every few
seconds.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

import orjson

from mallory.errors import MalloryError
from mallory.timeline.builder import BatchRejected, Committed, TimelineBuilder
from mallory.timeline.codec import MalformedRecord, read_records
from mallory.timeline.event import Batch, ClockPair
from mallory.timeline.window import Timeline

log = logging.getLogger(__name__)

#: a span covering the whole common time axis: every entry of a recording
ALL_TIME = (0, 2**63 - 1)
#: seconds between two progress messages while a recording is read
PROGRESS_EVERY_S = 5.0


@dataclass(frozen=True)
class LossPoint:
    """An observer batch that reported lost events: when (common axis, ns), where, how many."""

    real_ns: int
    node: str
    lost: int


@dataclass
class Recording:
    """What one pass over a recording gave: entries per requested span, and loss."""

    spans: list[list[Committed]]
    loss: list[LossPoint] = field(default_factory=list)
    nodes: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def node_names(path: Path) -> list[str]:
    """Every node with a clock pair in the recording: the builder must know the whole cluster
    before it may decide that a RECV has no SEND."""
    names: set[str] = set()
    try:
        stream = open(path, "rb")
    except OSError as exc:
        raise MalloryError(f"cannot read the event recording {path}: {exc.strerror}") from None
    with stream:
        for line in stream:
            if line.startswith(b'{"clock"'):
                try:
                    obj = orjson.loads(line)
                except orjson.JSONDecodeError:
                    continue
                if isinstance(obj, dict) and isinstance(obj.get("clock"), str):
                    names.add(obj["clock"])
    return sorted(names)


def read_recording(paths: Sequence[Path], spans: Sequence[tuple[int, int]]) -> Recording:
    """Entries committed in each [start, end) span (commit order, a causal order) over all
    the given recordings (one per mediator incarnation, each a self-contained stream)."""
    out = Recording(spans=[[] for _ in spans])
    nodes: set[str] = set()
    for path in paths:
        log.info("reading the event recording %s (%.0f MB): its nodes, then its timeline",
                 path, path.stat().st_size / 1e6 if path.exists() else 0)
        names = node_names(path)
        nodes.update(names)
        timeline = Timeline(TimelineBuilder(nodes=names or None))
        clocks: dict[str, ClockPair] = {}
        try:
            with open(path, "rb") as stream:
                progress = _ReadProgress(path, stream)
                for record in read_records(stream, source=str(path)):
                    progress.tick()
                    if isinstance(record, ClockPair):
                        clocks.setdefault(record.node, record)
                    elif isinstance(record, Batch) and record.lost and record.node in clocks:
                        out.loss.append(LossPoint(clocks[record.node].to_real(record.until_ns), record.node, record.lost))
                    timeline.add(record)
                    _keep(timeline, spans, out.spans)
        except MalformedRecord as exc:
            # e.g. the torn last line of a killed campaign: keep what came before it, say so
            out.warnings.append(f"{exc}; the rest of {path.name} is not shown")
        try:
            timeline.finish()
        except BatchRejected as exc:
            out.warnings.append(f"{path.name}: {exc}")
        _keep(timeline, spans, out.spans)
    out.nodes = sorted(nodes)
    return out


class _ReadProgress:
    """Logs how far the reading of a recording got, every PROGRESS_EVERY_S seconds."""

    def __init__(self, path: Path, stream: BinaryIO) -> None:
        self.path, self.stream = path, stream
        self.size = max(path.stat().st_size, 1)
        self.records = 0
        self.next_s = time.monotonic() + PROGRESS_EVERY_S

    def tick(self) -> None:
        """One more record (a line: an observer's batch of events, mostly) read."""
        self.records += 1
        if time.monotonic() >= self.next_s:
            self.next_s = time.monotonic() + PROGRESS_EVERY_S
            log.info("%s: %.0f%% read, %d records", self.path.name, 100 * self.stream.tell() / self.size, self.records)


def _keep(timeline: Timeline, spans: Sequence[tuple[int, int]], into: list[list[Committed]]) -> None:
    """Move the buffered entries into the spans they fall in; forget the rest."""
    if not timeline.pending():
        return
    entries = timeline.take(*ALL_TIME)
    for i, (start, end) in enumerate(spans):
        into[i].extend(e for e in entries if start <= e.real_ns < end)
