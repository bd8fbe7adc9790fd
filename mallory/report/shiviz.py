"""ShiViz's log format (pure): https://bestchai.bitbucket.io/shiviz/ opens the file as is.

A ShiViz input file is: the parser regular expression on the first line, the
multiple-executions delimiter on the second (empty: one execution), then the log. Each
event is two lines, matching ShiViz's default expression

    (?<event>.*)\\n(?<host>\\S*) (?<clock>{.*})

a line of text describing the event, then `host {"host": n, ...}`: the host's name and the
event's vector clock as JSON, in which the host's own component counts its events from 1.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import orjson

from mallory.report.vclock import vector_clocks
from mallory.timeline.builder import Committed

#: ShiViz's default parser expression (JavaScript syntax: named groups are `(?<name>...)`).
SHIVIZ_REGEX = r"(?<event>.*)\n(?<host>\S*) (?<clock>{.*})"


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _host(node: str) -> str:
    return "".join(c if not c.isspace() else "_" for c in node) or "_"


def shiviz_log(entries: Sequence[Committed], name: Callable[[Committed], str]) -> str:
    """The entries (in a causal order) as a ShiViz input file."""
    lines = [SHIVIZ_REGEX, ""]
    for entry, clock in zip(entries, vector_clocks(entries)):
        e = entry.event
        lines.append(_one_line(f"{e.kind.name} {name(entry)} @{entry.real_ns} ({e.node}#{entry.index} L{entry.lamport})"))
        lines.append(f"{_host(e.node)} {orjson.dumps({_host(n): c for n, c in clock.items()}).decode()}")
    return "\n".join(lines) + "\n"
