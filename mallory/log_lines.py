"""Lines of a node's log: the named patterns that pick them out, and the normaliser that
makes one message of its many occurrences.

Two readers of node logs share both: the log oracle (`mallory.oracles.logs`: a matching
line is a finding, signed by its normalised message) and the observer's log events
(`mallory.observer.log_events`: a matching line is a LOG event, named by its pattern or
its normalised message). Both read their patterns from a SUT spec's tables the same way
(`spec_tables`, `spec_regex`). Pure: no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from functools import cached_property

from mallory.errors import MalloryError


@dataclass(frozen=True)
class LogPattern:
    """A regular expression searched in each line of a log, and what a match is called.

    pattern: a Python regex, searched (not matched) in each line; flags go inline, e.g.
             `(?i)` for case-insensitive. `regex` is it compiled.
    name:    what a matching line is called; "" (log events only) means "by the line's
             normalised message".
    file:    the log it watches, for log events: a path template (`{log_dir}/raft.log`),
             "" for the node's own output. The log oracle scans the lines it is given.
    """

    pattern: str
    name: str = ""
    file: str = ""

    @cached_property
    def regex(self) -> re.Pattern[str]:
        """`pattern` compiled (once); raises re.error when it is not a valid regex."""
        return re.compile(self.pattern)


#: A timestamp as logs write it: ISO 8601 date and time (any fraction, zone), or a bare time.
TIME = r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(?:[.,]\d+)?(?:Z|[+-]\d{2}:?\d{2})?|\d{2}:\d{2}:\d{2}(?:[.,]\d+)?"

# One pass, first alternative wins at each position: a quoted value hides the numbers in
# it, a time or an address is not read as numbers, a hex id needs both a letter and a
# digit (so "deadbeef" is a word, "a023d910" an id).
_VARIABLE = re.compile(
    "|".join(
        [
            r'(?P<q>"(?:[^"\\\n]|\\.)*"|(?<!\w)\'(?:[^\'\\\n]|\\.)*\'(?!\w))',
            rf"(?P<time>{TIME})",
            r"(?P<addr>\b\d{1,3}(?:\.\d{1,3}){3}(?::\d+)?\b|\[[0-9A-Fa-f:.]*:[0-9A-Fa-f:.]*\](?::\d+)?)",
            r"(?P<uuid>\b[0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{12}\b)",
            r"(?P<hex>\b0[xX][0-9A-Fa-f]+\b|\b(?=[0-9A-Fa-f]*[A-Fa-f])(?=[0-9A-Fa-f]*\d)[0-9A-Fa-f]{6,}\b)",
            r"(?P<n>\d+(?:\.\d+)?)",
        ]
    )
)
_PLACEHOLDER = {"q": "<q>", "time": "<time>", "addr": "<addr>", "uuid": "<hex>", "hex": "<hex>", "n": "<n>"}
_SPACE = re.compile(r"\s+")


def normalise(message: str, limit: int | None = None) -> str:
    """`message` with what varies between occurrences replaced by placeholders and its
    whitespace collapsed, cut to `limit` characters when given. Idempotent.

    Placeholders: <q> a quoted value, <time> a timestamp, <addr> an IPv4 or [IPv6] address
    (and port), <hex> a uuid, 0x number or hex id, <n> a number.
    """
    out = _VARIABLE.sub(lambda m: _PLACEHOLDER[m.lastgroup], message)  # type: ignore[index]
    return _SPACE.sub(" ", out).strip()[:limit].rstrip()


def spec_tables(raw: object, source: str, table: str, fields: Sequence[str],
                shape: str) -> Iterator[tuple[int, str, dict]]:
    """The entries of a spec's `[[table]]` list as (index, where, entry), each a table of
    known `fields` only; `where` ("SOURCE: table[i]") starts an entry's error messages, and
    `shape` says what an entry must hold. One-line MalloryError otherwise."""
    if not isinstance(raw, list):
        raise MalloryError(f"{source}: {table}: must be a list of tables ([[{table}]])")
    for i, entry in enumerate(raw):
        where = f"{source}: {table}[{i}]"
        if not isinstance(entry, dict):
            raise MalloryError(f"{where}: must be a table with {shape}")
        unknown = set(entry) - set(fields)
        if unknown:
            raise MalloryError(f"{where}.{sorted(unknown)[0]}: unknown field (known: {', '.join(fields)})")
        yield i, where, entry


def spec_regex(entry: dict, where: str) -> re.Pattern:
    """An entry's required `pattern`: a non-empty string that compiles."""
    pattern = entry.get("pattern")
    if not isinstance(pattern, str) or not pattern:
        raise MalloryError(f"{where}.pattern: required: a non-empty regex string")
    try:
        return re.compile(pattern)
    except re.error as exc:
        raise MalloryError(f"{where}.pattern: not a valid regex: {exc}") from None
