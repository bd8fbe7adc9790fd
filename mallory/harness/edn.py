"""A small EDN encoder: just what Jepsen's history.edn needs.

Python values map onto EDN as: None -> nil, bool -> true/false, int, float, `Keyword` ->
:name, str -> "string" (every control character escaped), list/tuple -> [vector],
dict -> {map}, set/frozenset -> #{set}. Only writing lives here, one op at a time as the
harness records it; reading histories is the oracles' job.
"""

from __future__ import annotations

import math
import re
from typing import Any

# One Keyword type for the whole project: the oracles' reader yields it, so a history the
# harness writes reads back equal to what it recorded. A str subclass: `Keyword("r") == "r"`,
# and JSON writes it as the plain string, as elle-cli does.
from mallory.oracles.edn import Keyword

__all__ = ["Keyword", "dumps"]

_ESCAPES = {'"': '\\"', "\\": "\\\\", "\n": "\\n", "\t": "\\t", "\r": "\\r", "\b": "\\b", "\f": "\\f"}
_NEEDS_ESCAPE = re.compile(r'["\\\x00-\x1f\x7f]')


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
        if all(type(item) is int for item in value):
            # The common bulk case (a list-append read): 50x faster than item by item.
            out.append("[" + " ".join(map(str, value)) + "]")
            return
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
