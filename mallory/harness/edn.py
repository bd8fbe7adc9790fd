"""A small EDN encoder: just what Jepsen's history.edn needs.

Python values map onto EDN as: None -> nil, bool -> true/false, int, float, `Keyword` ->
:name, str -> "string" (with escapes), list/tuple -> [vector], dict -> {map},
set/frozenset -> #{set}. Only writing lives here; reading histories is the oracles' job.
"""

from __future__ import annotations

import math
import re
from typing import Any

_KEYWORD_NAME = re.compile(r"^[A-Za-z*+!\-_?<>=.][A-Za-z0-9*+!\-_?<>=.:/#']*$")

_ESCAPES = {'"': '\\"', "\\": "\\\\", "\n": "\\n", "\t": "\\t", "\r": "\\r", "\b": "\\b", "\f": "\\f"}
_NEEDS_ESCAPE = re.compile(r'["\\\x00-\x1f\x7f]')


class Keyword(str):
    """An EDN keyword (`:append`). A str subclass, so it compares equal to its name and
    serialises as a plain string in JSON, which is how elle-cli writes keywords."""

    __slots__ = ()

    def __new__(cls, name: str) -> "Keyword":
        if not _KEYWORD_NAME.match(name):
            raise ValueError(f"not a valid EDN keyword name: {name!r}")
        return super().__new__(cls, name)

    def __repr__(self) -> str:
        return f":{str.__str__(self)}"


def _escape_char(match: re.Match[str]) -> str:
    ch = match.group(0)
    return _ESCAPES.get(ch, f"\\u{ord(ch):04x}")


def dumps(value: Any) -> str:
    """The EDN text of `value`; raises TypeError for values EDN cannot express here."""
    parts: list[str] = []
    _write(value, parts)
    return "".join(parts)


def _write(value: Any, out: list[str]) -> None:
    if value is None:
        out.append("nil")
    elif value is True:
        out.append("true")
    elif value is False:
        out.append("false")
    elif isinstance(value, Keyword):
        out.append(":" + str.__str__(value))
    elif isinstance(value, str):
        out.append('"' + _NEEDS_ESCAPE.sub(_escape_char, value) + '"')
    elif isinstance(value, int):
        out.append(str(int(value)))
    elif isinstance(value, float):
        if not math.isfinite(value):
            raise TypeError(f"EDN has no literal for {value!r}")
        out.append(repr(value))
    elif isinstance(value, (list, tuple)):
        out.append("[")
        for i, item in enumerate(value):
            if i:
                out.append(" ")
            _write(item, out)
        out.append("]")
    elif isinstance(value, dict):
        out.append("{")
        for i, (k, v) in enumerate(value.items()):
            if i:
                out.append(", ")
            _write(k, out)
            out.append(" ")
            _write(v, out)
        out.append("}")
    elif isinstance(value, (set, frozenset)):
        out.append("#{")
        for i, item in enumerate(sorted(value, key=repr)):
            if i:
                out.append(" ")
            _write(item, out)
        out.append("}")
    else:
        raise TypeError(f"cannot write {type(value).__name__} as EDN: {value!r}")
