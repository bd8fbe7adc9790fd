"""`mallory analyze EVENTS`: replay a recorded event stream through timeline and learner.

Reads the wire codec (one event, batch or clock pair per line; `-` for stdin), builds the
timeline, cuts fixed windows on the common time axis as soon as they are complete,
summarises each with the chosen abstraction and maps it to a state. Prints one line per
window (state id, new or seen, summary size) and totals; `--json` prints JSON lines.
Windows are printed as they close, so a malformed line further on loses none of them.

`--packet-types` says what types a packet where the SUT declares its messages: the message
types it starts (`messages`, the default), its first payload bytes as without the
declaration (`bytes`), or both, each window summarised twice into two stores of states:
how many distinct states one recording makes with message types and with four-byte payload
types (the recording keeps both: mallory/timeline/event.py `packet_data`). The totals also
count the SEND packets by the message types they start.

    mallory analyze runs/c1/events/events.jsonl --abstraction event-history --packet-types both
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from collections.abc import Iterator
from typing import IO

import orjson

from mallory.errors import MalloryError
from mallory.learner.states import StateStore
from mallory.timeline.abstraction import ABSTRACTIONS, PACKET_TYPES
from mallory.timeline.builder import Committed, TimelineBuilder
from mallory.timeline.codec import read_records
from mallory.timeline.event import Kind, message_types
from mallory.timeline.window import Timeline, summarize

NAME = "analyze"
HELP = "replay a recorded event stream: timeline, window summaries, states"


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("events", help="event stream in the wire codec (JSON lines), or - for stdin")
    parser.add_argument("--window", type=float, default=2.5, help="window length in seconds (default 2.5)")
    parser.add_argument("--abstraction", choices=sorted(ABSTRACTIONS), default="event-history")
    parser.add_argument("--skew-ms", type=float, default=100.0, help="cross-node clock-skew bound (default 100)")
    parser.add_argument("--nodes", help="comma-separated node names (default: every node named in the file)")
    parser.add_argument("--num-perm", type=int, default=128, help="MinHash permutations (default 128)")
    parser.add_argument("--threshold", type=float, default=0.7, help="state similarity threshold (default 0.7)")
    parser.add_argument("--seed", type=int, default=1, help="MinHash seed (default 1)")
    parser.add_argument("--packet-types", choices=[*PACKET_TYPES, "both"], default="messages",
                        help="what types a packet of a declared flow: its message types (default), its first "
                        "payload bytes as without the declaration, or both, counted apart")
    parser.add_argument("--json", action="store_true", help="JSON lines instead of a table")


def _open(path: str) -> IO[bytes]:
    if path == "-":
        return sys.stdin.buffer
    try:
        return open(path, "rb")
    except OSError as exc:
        raise MalloryError(f"cannot read {path}: {exc.strerror}") from None


def _node_names(path: str) -> list[str] | None:
    """The nodes named anywhere in the file: the builder must know the whole cluster before a
    RECV can be declared to have no SEND. Lines that do not parse are left to the real pass."""
    if path == "-":
        return None
    names: set[str] = set()
    with _open(path) as stream:
        for line in stream:
            try:
                obj = orjson.loads(line)
            except orjson.JSONDecodeError:
                continue
            if type(obj) is list and obj and type(obj[0]) is str:
                names.add(obj[0])
            elif type(obj) is dict:
                for key in ("batch", "clock"):
                    if type(obj.get(key)) is str:
                        names.add(obj[key])
    return sorted(names)


def _windows(timeline: Timeline, window_ns: int, records: Iterator) -> Iterator[tuple[int, list]]:
    """(window start, entries) for each window, as soon as the timeline has completed it."""
    start = None
    for record in records:
        timeline.add(record)
        if start is None:
            start = timeline.origin()
        while start is not None and timeline.complete_until(start + window_ns):
            yield start, timeline.take(start, start + window_ns)
            start += window_ns
    timeline.finish()
    if start is None:
        start = timeline.origin()
    while start is not None and timeline.pending():
        yield start, timeline.take(start, start + window_ns)
        start += window_ns


def _sends_by_message_type(entries: list[Committed], counts: Counter[str]) -> None:
    """Count each SEND packet under every message type it starts."""
    for entry in entries:
        event = entry.event
        if event.kind is Kind.SEND:
            counts.update(message_types(event.data))


def run(args: argparse.Namespace) -> int:
    if args.window <= 0:
        raise MalloryError(f"--window must be positive, got {args.window}")
    if args.skew_ms < 0:
        raise MalloryError(f"--skew-ms must be non-negative, got {args.skew_ms}")
    nodes = [n for n in args.nodes.split(",") if n] if args.nodes else _node_names(args.events)
    views = list(PACKET_TYPES) if args.packet_types == "both" else [args.packet_types]
    stores = {view: StateStore(num_perm=args.num_perm, threshold=args.threshold, seed=args.seed) for view in views}
    # the first view is the table's; with both, the bytes view's columns follow (suffix _bytes)
    suffix = {views[0]: "", **({"bytes": "_bytes"} if len(views) > 1 else {})}
    timeline = Timeline(TimelineBuilder(skew_ns=int(args.skew_ms * 1e6), nodes=nodes or None))
    window_ns = int(args.window * 1e9)
    out = sys.stdout
    if not args.json:
        extra = f" {'state_b':>7} {'new_b':>5}" if len(views) > 1 else ""
        print(f"{'window':>6} {'start_s':>9} {'events':>8} {'state':>6} {'new':>4} {'summary':>8}{extra}", file=out)
    origin = None
    count = 0
    sends: Counter[str] = Counter()
    with _open(args.events) as stream:
        records = read_records(stream, source=args.events)
        for start, entries in _windows(timeline, window_ns, records):
            origin = start if origin is None else origin
            _sends_by_message_type(entries, sends)
            row: dict[str, object] = {"window": count, "start_s": round((start - origin) / 1e9, 3), "events": len(entries)}
            for view in views:
                summary = summarize(entries, args.abstraction, view)
                match = stores[view].lookup(summary)
                row.update({f"state{suffix[view]}": match.state_id, f"new{suffix[view]}": match.is_new,
                            f"summary_size{suffix[view]}": len(summary),
                            f"similarity{suffix[view]}": round(match.similarity, 3)})
            if args.json:
                out.write(orjson.dumps(row).decode() + "\n")
            else:
                line = (f"{count:>6} {row['start_s']:>9.3f} {len(entries):>8} {row['state']:>6} "
                        f"{'yes' if row['new'] else '-':>4} {row['summary_size']:>8}")
                if len(views) > 1:
                    line += f" {row['state_bytes']:>7} {'yes' if row['new_bytes'] else '-':>5}"
                print(line, file=out)
            out.flush()
            count += 1
    stats = timeline.builder.stats()
    total = {
        "windows": count,
        "states": len(stores[views[0]]),
        "events": stats["committed"],
        "unmatched_recvs": stats["unmatched_recvs"],
        "forced_recvs": stats["forced_recvs"],
        "skipped_batches": sum(stats["skipped_batches"].values()),
        "lost_events": sum(stats["lost"].values()),
        "duplicate_batches": stats["duplicate_batches"],
        "late_events": timeline.late,
        "states_by_packet_types": {view: len(store) for view, store in stores.items()},
        "sends_by_message_type": dict(sends.most_common()),
    }
    if args.json:
        out.write(orjson.dumps({"total": total}).decode() + "\n")
    else:
        by_view = " and ".join(f"{len(store)} with {'message types' if view == 'messages' else 'payload bytes'}"
                               for view, store in stores.items())
        print(
            f"{count} windows, {len(stores[views[0]])} distinct states{f' ({by_view})' if len(views) > 1 else ''}, "
            f"{total['events']} events ({total['unmatched_recvs']} RECVs without SEND, {total['lost_events']} lost "
            f"by observers, {total['late_events']} too late for their window)",
            file=out,
        )
        if total["forced_recvs"] or total["skipped_batches"]:  # the builder's bounds (timeline/builder.py)
            print(f"incomplete timeline: {total['skipped_batches']} batches skipped behind sequence gaps, "
                  f"{total['forced_recvs']} RECVs committed without waiting for their SEND", file=out)
        if sends:
            print("SEND packets by the message types they start: "
                  + ", ".join(f"{name} {n}" for name, n in sends.most_common()), file=out)
    return 0
