"""The wire codec: one JSON record per line (orjson), round-tripping exactly.

Three record shapes, told apart by their first byte and key:

    ["n1", "SEND", 1200, 987654321, "17030300"]                     an Event
    {"batch": "n1", "seq": 3, "until_ns": 1300, "lost": 0,
     "events": [["SEND", 1200, 987654321, "17030300"], ...]}        a Batch
    {"clock": "n1", "mono_ns": 5, "real_ns": 1700000000000000000}   a ClockPair

Ids are unsigned 64-bit integers, written as JSON integers (orjson reads and writes the
full range). Decoding checks every field and raises `MalformedRecord` naming the line.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import IO, Union

import orjson

from mallory.errors import MalloryError
from mallory.timeline.event import KIND_BY_NAME, MAX_ID, Batch, ClockPair, Event

Record = Union[Event, Batch, ClockPair]

#: The most events an observer puts in one batch (mallory/observer/observer.py says why).
MAX_BATCH_EVENTS = 8192
#: The longest batch line an observer sends and the mediator reads (newline included). A
#: batch of MAX_BATCH_EVENTS ring or packet events is about 0.5 MB (60 bytes an event), of
#: LOG events with the longest names (96 characters) about 1.3 MB: this holds either, and a
#: sender splits a batch whose line would be longer (mallory/observer/sender.py).
MAX_BATCH_LINE = 2 * 1024 * 1024


class MalformedRecord(MalloryError):
    """A line of the event stream that is not a valid record."""

    def __init__(self, reason: str, line: int | None = None, source: str = "") -> None:
        where = f"{source}:{line}: " if line is not None else ""
        super().__init__(f"{where}malformed record: {reason}")
        self.reason = reason
        self.line = line


def encode(record: Record) -> bytes:
    """One record as one line of JSON, without the trailing newline."""
    if isinstance(record, Event):
        return orjson.dumps([record.node, record.kind.name, record.ts, record.id, record.data])
    if isinstance(record, Batch):
        return orjson.dumps(
            {
                "batch": record.node,
                "seq": record.seq,
                "until_ns": record.until_ns,
                "lost": record.lost,
                "events": [[e.kind.name, e.ts, e.id, e.data] for e in record.events],
            }
        )
    if isinstance(record, ClockPair):
        return orjson.dumps({"clock": record.node, "mono_ns": record.mono_ns, "real_ns": record.real_ns})
    raise TypeError(f"cannot encode {type(record).__name__}")


def write_records(stream: IO[bytes], records: Iterable[Record]) -> None:
    for record in records:
        stream.write(encode(record))
        stream.write(b"\n")


def _int(value: object, name: str, low: int = 0, high: int = 2**63 - 1) -> int:
    if type(value) is not int or not low <= value <= high:
        raise ValueError(f"{name} must be an integer in [{low}, {high}], got {value!r}")
    return value


def _node(value: object) -> str:
    if type(value) is not str or not value:
        raise ValueError(f"node must be a non-empty string, got {value!r}")
    return value


def _event(node: str, fields: object) -> Event:
    if type(fields) is not list or len(fields) != 4:
        raise ValueError(f"an event is [kind, ts, id, data], got {fields!r}")
    kind_name, ts, ident, data = fields
    kind = KIND_BY_NAME.get(kind_name) if type(kind_name) is str else None
    if kind is None:
        raise ValueError(f"unknown event kind {kind_name!r}")
    if type(ts) is not int or ts < 0:
        raise ValueError(f"ts must be a non-negative integer, got {ts!r}")
    if type(ident) is not int or not 0 <= ident <= MAX_ID:
        raise ValueError(f"id must be an unsigned 64-bit integer, got {ident!r}")
    if type(data) is not str:
        raise ValueError(f"data must be a string, got {data!r}")
    return Event(node, kind, ts, ident, data)


def _events(node: str, raw: list) -> list[Event]:
    """A batch's events. The fast path builds them all, then checks them in one pass; only
    when something is wrong does the slow path run, to say exactly what."""
    try:
        events = [Event(node, KIND_BY_NAME[k], ts, i, d) for k, ts, i, d in raw]
    except (KeyError, TypeError, ValueError):
        events = None
    if events is not None:
        for e in events:
            ts, ident = e.ts, e.id
            if type(ts) is not int or ts < 0 or type(ident) is not int or not 0 <= ident <= MAX_ID or type(e.data) is not str:
                break
        else:
            return events
    return [_event(node, e) for e in raw]


def decode_obj(obj: object) -> Record:
    """A parsed JSON value as a record; raises ValueError saying what is wrong."""
    if type(obj) is list:
        if len(obj) != 5:
            raise ValueError(f"an event is [node, kind, ts, id, data], got {len(obj)} fields")
        return _event(_node(obj[0]), obj[1:])
    if type(obj) is dict:
        if "batch" in obj:
            node = _node(obj["batch"])
            events = obj.get("events")
            if type(events) is not list:
                raise ValueError("batch.events must be a list")
            unknown = set(obj) - {"batch", "seq", "until_ns", "lost", "events"}
            if unknown:
                raise ValueError(f"batch has unknown fields {sorted(unknown)}")
            batch = Batch(
                node=node,
                seq=_int(obj.get("seq"), "batch.seq"),
                until_ns=_int(obj.get("until_ns"), "batch.until_ns"),
                lost=_int(obj.get("lost", 0), "batch.lost"),
                events=_events(node, events),
            )
            return batch
        if "clock" in obj:
            return ClockPair(
                node=_node(obj["clock"]),
                mono_ns=_int(obj.get("mono_ns"), "clock.mono_ns"),
                real_ns=_int(obj.get("real_ns"), "clock.real_ns"),
            )
        raise ValueError(f"an object record needs a 'batch' or 'clock' key, got {sorted(obj)}")
    raise ValueError(f"a record is a JSON array (event) or object (batch, clock), got {type(obj).__name__}")


def decode(line: bytes | str, lineno: int | None = None, source: str = "") -> Record:
    """One line back into a record, or `MalformedRecord` naming the line and the fault."""
    try:
        obj = orjson.loads(line)
    except orjson.JSONDecodeError as exc:
        raise MalformedRecord(f"not JSON ({exc})", lineno, source) from None
    try:
        return decode_obj(obj)
    except ValueError as exc:
        raise MalformedRecord(str(exc), lineno, source) from None


def read_records(stream: IO[bytes], source: str = "") -> Iterator[Record]:
    """Every record of a stream, skipping blank lines; errors name the 1-based line."""
    for lineno, line in enumerate(stream, start=1):
        if line.strip():
            yield decode(line, lineno, source)
