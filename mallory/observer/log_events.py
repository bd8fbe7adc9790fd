"""Log-derived events: lines of a node's log files that match configured patterns become
events of kind LOG, so a binary that cannot be rebuilt with the LLVM pass (etcd, a
library's trace output) still gives code-level feedback.

Configured in a TOML SUT spec (or a JSON file for `mallory observe --log-events`, or a
Python adapter's `log_events` attribute) as a list of entries:

    [[log_events]]
    pattern = 'became leader at term (\\d+)'   # Python regex, searched in each line
    name = "became-leader"                     # optional
    file = "{log_dir}/raft.log"                # optional: default the node's own output

A line gives at most one event: the first entry (in configuration order, among those that
watch the line's file) whose pattern it matches. The event's name is the entry's `name`,
else the line's message NORMALISED (`mallory.log_lines.normalise`): numbers, hex ids,
addresses, times and quoted values replaced by placeholders, so "became leader at term 5"
and "... term 6" are one kind. A zap/JSON line's message is its "msg" field; a text
line's is the line without its leading timestamp.

Event: kind LOG, id = FNV-1a 64 of "LOG:<name>" (stable across runs and machines, like
code-event ids), data = the name (cut to `MAX_NAME` characters), ts = the observer's
monotonic clock when the line was read.

Tailing (`FileTail`) follows a path, not an open file: it survives rotation (rename or
delete and recreate: the old file is read to its end first) and truncation, holds a
partial last line until its newline arrives, and its position can be saved and restored
(`LogWatcher.save_cursor` / `load_cursor`), so a restarted observer neither loses nor
repeats lines. A file that exists when the tail starts without a saved position is read
from its end: what it holds is an earlier run's. The SUT's own restarts append to the same
file and need nothing special.

Cost: per file, each pattern is searched over the whole chunk read (in C), so lines that
match nothing cost no Python code at all; only a line some pattern matches is checked
against the entries one by one to find the first that matches (`LineMatcher`).
"""

from __future__ import annotations

import os
import re
import time
import tomllib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

import orjson

from mallory.errors import MalloryError
from mallory.files import atomic_write
from mallory.instrument.event_ids import fnv1a64
from mallory.log_lines import TIME, LogPattern, normalise, spec_regex, spec_tables
from mallory.timeline.event import Event, Kind

#: An event name (its data) is at most this long: it travels in every event.
MAX_NAME = 96
#: A partial line this long is given out as a line without waiting for its newline.
MAX_LINE = 1 << 20
#: At most this much of one file is read per poll (the rest waits for the next).
READ_CHUNK = 4 << 20
CURSOR_VERSION = 1

FIELDS = ("pattern", "name", "file")


# -- configuration ----------------------------------------------------------------------


@dataclass(frozen=True)
class WatchedPattern:
    """A `LogPattern` resolved for one node: `path` is the concrete file it watches."""

    pattern: str
    name: str
    path: str


def parse_log_events(raw: object, source: str, check_file: Callable[[str, str], None] | None = None) -> tuple[LogPattern, ...]:
    """Validate a list of `{pattern, name?, file?}` tables; errors name `source` and the
    entry. `check_file(template, fieldname)` validates a file's placeholders."""
    found = []
    for i, where, entry in spec_tables(raw, source, "log_events", FIELDS, "a `pattern`"):
        pattern = spec_regex(entry, where).pattern
        name = entry.get("name", "")
        if not isinstance(name, str) or len(name) > MAX_NAME or "\n" in name:
            raise MalloryError(f"{where}.name: must be a one-line string of at most {MAX_NAME} characters")
        file = entry.get("file", "")
        if not isinstance(file, str):
            raise MalloryError(f"{where}.file: must be a path string")
        if file and check_file is not None:
            check_file(file, f"log_events[{i}].file")
        found.append(LogPattern(pattern, name.strip(), file))
    return tuple(found)


def resolve(patterns: Iterable[LogPattern], expand: Callable[[str], str], default_file: str) -> list[WatchedPattern]:
    """The entries for one node: placeholders expanded, the default file filled in."""
    return [WatchedPattern(p.pattern, p.name, expand(p.file) if p.file else default_file) for p in patterns]


def load_log_events(path: str) -> tuple[tuple[LogPattern, ...], dict[str, int]]:
    """The entries of a file for `mallory observe --log-events`: a TOML file (an SUT spec,
    or just `[[log_events]]` tables) or JSON (`{"log_events": [...]}`), and the ports its
    TOML `[ports]` names (for `{port_<name>}` in file templates)."""
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except OSError as exc:
        raise MalloryError(f"{path}: cannot read log events: {exc.strerror}") from None
    if path.endswith(".toml"):
        try:
            doc = tomllib.loads(raw.decode("utf-8", "replace"))
        except tomllib.TOMLDecodeError as exc:
            raise MalloryError(f"{path}: not valid TOML: {exc}") from None
    else:
        try:
            doc = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            raise MalloryError(f"{path}: log events are not JSON ({exc})") from None
    if type(doc) is not dict or "log_events" not in doc:
        raise MalloryError(f'{path}: no log_events (TOML: [[log_events]] tables; JSON: {{"log_events": [...]}})')
    ports = doc.get("ports", {})
    ports = {k: v for k, v in ports.items() if type(v) is int} if isinstance(ports, dict) else {}
    return parse_log_events(doc["log_events"], path), ports


def expand_template(template: str, values: Mapping[str, object], where: str) -> str:
    try:
        return template.format_map(values)
    except (KeyError, ValueError, IndexError) as exc:
        raise MalloryError(f"{where}: cannot expand {template!r}: {exc!r} (known: {', '.join(sorted(values))})") from None


def write_watch_file(path: str, watched: Sequence[WatchedPattern]) -> None:
    """Entries resolved for one node, as a JSON file `load_log_events` reads (the paths'
    braces escaped, so they expand to themselves)."""
    entries = [
        {"pattern": w.pattern, "name": w.name, "file": w.path.replace("{", "{{").replace("}", "}}")} for w in watched
    ]
    atomic_write(path, orjson.dumps({"log_events": entries}, option=orjson.OPT_INDENT_2))


# -- names ------------------------------------------------------------------------------

_LEADING_TIME = re.compile(rf"^\s*\[?(?:{TIME})\]?\s*")


def message_of(line: str) -> str:
    """The message part of a log line: a JSON (zap) line's "msg", else the line without a
    leading timestamp."""
    text = line.strip()
    if text.startswith("{"):
        try:
            obj = orjson.loads(text)
        except orjson.JSONDecodeError:
            obj = None
        if type(obj) is dict:
            for key in ("msg", "message", "M"):
                if type(obj.get(key)) is str:
                    return obj[key]
    return _LEADING_TIME.sub("", text, count=1)


def event_name(line: str) -> str:
    """The name an unnamed pattern gives the line: its normalised message."""
    return normalise(message_of(line), MAX_NAME) or "<empty>"


def log_event_id(name: str) -> int:
    """The stable 64-bit id of the log event called `name`."""
    return fnv1a64(f"LOG:{name}".encode())


# -- matching ---------------------------------------------------------------------------

#: Constructs that can match differently in a whole chunk than in the line alone (absolute
#: anchors, back references, lookbehinds): with one of them among a file's patterns, that
#: file's lines are matched one by one.
_LINE_ONLY = re.compile(r"\\[AZz]|\\[1-9]|\(\?P=|\(\?<[=!]")


class LineMatcher:
    """The entries watching one file, in configuration order.

    `names` scans the chunk once per pattern, in C (re's search, with its literal-prefix
    fast path), noting which patterns were found in which lines; only those lines are then
    checked in Python, against the patterns found in them, in order: the first that
    matches the line alone names it.
    One alternation of all the patterns would be a single scan, but re tries every branch
    at every position and is slower (bench/bench_log_events_match.py).
    """

    def __init__(self, entries: Sequence[tuple[str, str]]) -> None:
        """entries: (pattern, name) pairs; name "" means "from the normalised message"."""
        self.entries = [(re.compile(p), n) for p, n in entries]
        self.line_by_line = any(_LINE_ONLY.search(p) for p, _ in entries)
        self._scanners = [re.compile(p, re.MULTILINE) for p, _ in entries]

    def name(self, line: str) -> str | None:
        """The event name `line` gives, or None when no entry matches it."""
        for regex, name in self.entries:
            if regex.search(line):
                return name or event_name(line)
        return None

    def names(self, text: str) -> list[str]:
        """The event names of the lines in `text` ('\\n'-separated), in order."""
        if self.line_by_line:
            return [n for n in map(self.name, text.split("\n")) if n is not None]
        hits: dict[int, int] = {}  # line start -> bitmask of the patterns found in that line
        rfind, find, get = text.rfind, text.find, hits.get
        for index, scanner in enumerate(self._scanners):
            bit, search, pos = 1 << index, scanner.search, 0
            while (m := search(text, pos)) is not None:
                at = m.start()
                start = rfind("\n", 0, at) + 1
                hits[start] = get(start, 0) | bit
                pos = find("\n", at) + 1  # a match spanning lines is checked from its first
                if not pos:
                    break
        found = []
        entries = self.entries
        for start in sorted(hits):
            end = find("\n", start)
            line = text[start:] if end < 0 else text[start:end]
            mask = hits[start]
            while mask:  # the line alone decides, among the patterns found in it, in order
                low = mask & -mask
                regex, name = entries[low.bit_length() - 1]
                if regex.search(line):
                    found.append(name or event_name(line))
                    break
                mask ^= low
        return found


# -- tailing ----------------------------------------------------------------------------


class FileTail:
    """Complete lines appended to the file at `path`, across rotation and truncation."""

    def __init__(self, path: str, cursor: tuple[int, int, int] | None = None) -> None:
        """cursor: (dev, ino, offset) saved by an earlier tail of the same path. Without
        one, a file that exists now is read from its current end (an earlier run's lines)."""
        self.path = path
        if cursor is None:
            try:
                st = os.stat(path)
                cursor = (st.st_dev, st.st_ino, st.st_size)
            except FileNotFoundError:
                pass
        self._cursor = cursor
        self._fd: int | None = None
        self._ident: tuple[int, int] | None = None
        self._partial = b""
        self.offset = 0  # bytes of the open file consumed (the partial line included)
        self.rotations = 0
        self.truncations = 0

    def position(self) -> tuple[int, int, int] | None:
        """(dev, ino, offset of the first byte not yet given out as a line), to resume at."""
        if self._ident is None:
            return self._cursor
        return (*self._ident, self.offset - len(self._partial))

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def _open(self) -> None:
        self._fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC)
        fst = os.fstat(self._fd)  # the file we opened, should it have changed since stat
        self._ident = (fst.st_dev, fst.st_ino)
        self._partial = b""
        if self._cursor is not None and self._cursor[:2] == self._ident and self._cursor[2] <= fst.st_size:
            self.offset = self._cursor[2]
        else:
            self.offset = 0  # a new file (or rotated, or truncated, while we were away)
        self._cursor = None

    def _drain(self, final: bool) -> list[bytes]:
        assert self._fd is not None
        data = os.pread(self._fd, READ_CHUNK, self.offset)
        self.offset += len(data)
        if not data and not final:
            return []
        lines = (self._partial + data).split(b"\n")
        self._partial = lines.pop()
        if final and self._partial:
            lines.append(self._partial)
            self._partial = b""
        elif len(self._partial) >= MAX_LINE:
            lines.append(self._partial)
            self._partial = b""
        return lines

    def read_lines(self) -> list[bytes]:
        """The complete lines written since the last call (without their newlines)."""
        try:
            st: os.stat_result | None = os.stat(self.path)
        except FileNotFoundError:
            st = None
        lines: list[bytes] = []
        if self._fd is not None:
            replaced = st is None or (st.st_dev, st.st_ino) != self._ident
            if not replaced and st is not None and st.st_size < self.offset:
                self.truncations += 1  # copytruncate, or `> file`: start over
                self.offset, self._partial = 0, b""
            lines = self._drain(final=False)
            if replaced:
                # rotated away: the old file's rest (its last line may lack a newline) first
                while True:
                    more = self._drain(final=True)
                    if not more:
                        break
                    lines += more
                self.rotations += 1
                self.close()
                self._ident = None
        if self._fd is None and st is not None:
            self._open()
            lines += self._drain(final=False)
        return lines


class LogWatcher:
    """Every watched file of one node; `poll_events()` turns their new lines into LOG events."""

    def __init__(self, node: str, watched: Sequence[WatchedPattern], cursor_path: str | None = None) -> None:
        """cursor_path: where `checkpoint` saves how far each file was read, and where a
        restarted observer finds it."""
        self.node = node
        self.cursor_path = cursor_path
        by_path: dict[str, list[tuple[str, str]]] = {}
        for w in watched:
            by_path.setdefault(w.path, []).append((w.pattern, w.name))
        cursor = load_cursor(cursor_path) if cursor_path else {}
        self._saved = cursor
        self.files = [(FileTail(path, cursor.get(path)), LineMatcher(entries)) for path, entries in by_path.items()]
        self.lines = 0
        self.events = 0

    def poll_events(self) -> list[Event]:
        """LOG events for the lines written since the last poll, stamped with the monotonic
        clock at the poll (one ns apart, in file order)."""
        ts = time.monotonic_ns()
        events: list[Event] = []
        node, new = self.node, tuple.__new__
        for tail, matcher in self.files:
            lines = tail.read_lines()
            if not lines:
                continue
            self.lines += len(lines)
            for name in matcher.names(b"\n".join(lines).decode("utf-8", "replace")):
                events.append(new(Event, (node, Kind.LOG, ts, log_event_id(name), name)))
                ts += 1
        self.events += len(events)
        return events

    def cursor(self) -> dict[str, tuple[int, int, int]]:
        return {tail.path: pos for tail, _ in self.files if (pos := tail.position()) is not None}

    def checkpoint(self) -> None:
        """Save the cursor (atomically) if it moved. The observer calls it once the events
        read so far are handed to the sender."""
        cursor = self.cursor()
        if self.cursor_path is None or cursor == self._saved:
            return
        doc = {"version": CURSOR_VERSION, "files": {p: list(pos) for p, pos in cursor.items()}}
        atomic_write(self.cursor_path, orjson.dumps(doc))
        self._saved = cursor

    def close(self) -> None:
        for tail, _ in self.files:
            tail.close()


def load_cursor(path: str) -> dict[str, tuple[int, int, int]]:
    """A cursor `LogWatcher.checkpoint` wrote; empty when there is none (or it is torn:
    then the files are read from their ends, as on a first start)."""
    try:
        with open(path, "rb") as f:
            doc = orjson.loads(f.read())
        files = doc["files"] if doc.get("version") == CURSOR_VERSION else {}
        return {str(p): (int(d), int(i), int(o)) for p, (d, i, o) in files.items()}
    except (OSError, orjson.JSONDecodeError, AttributeError, KeyError, TypeError, ValueError):
        return {}
