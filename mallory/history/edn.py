"""A small EDN reader and writer: exactly what Jepsen histories use.

Supported (see shared/conformance/FORMATS.md 1.2): `;` comments, commas as whitespace,
keywords (`:foo`, `:op-index`, `:G2-item`), bare symbols, `nil`/`true`/`false`, integers
of any size, floats, strings with escapes, characters, vectors, lists, maps and sets, and
the `#_` discard. Tagged literals (`#inst` ...) are read as their tagged value.

Keywords and symbols are `str` subclasses, so `Keyword("x") == "x"`: an elle-cli JSON
history (key `"x"`) and its EDN twin (key `:x`) compare equal, while the writer still
knows to print `:x`. Vectors and lists become Python lists, maps dicts, sets frozensets;
an unhashable map key or set element (a vector) becomes a tuple.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator
from typing import Any

from mallory.errors import MalloryError


class Keyword(str):
    """An EDN keyword, e.g. `:invoke`. Its str value is the name without the colon."""

    __slots__ = ()

    def __repr__(self) -> str:
        return ":" + str.__str__(self)


class Symbol(str):
    """An EDN symbol, e.g. `clojure.lang.RestFn` in a Java stack trace."""

    __slots__ = ()

    def __repr__(self) -> str:
        return str.__str__(self)


class EdnError(MalloryError):
    """Malformed EDN; the message names the source and line."""


# One token, after any whitespace, commas and comments; `eof` when only those remain.
_TOKEN = re.compile(
    r"""
    (?:[\s,]+|;[^\n]*)*
    (?:
        (?P<atom>[^\s,\[\](){}";\#\\][^\s,\[\](){}";]*)
      | (?P<open>\#\{|[\[({])
      | (?P<close>[\])}])
      | (?P<string>"(?:[^"\\]|\\.)*")
      | (?P<discard>\#_)
      | (?P<tag>\#[A-Za-z][^\s,\[\](){}"]*)
      | (?P<char>\\(?:newline|space|tab|return|u[0-9a-fA-F]{4}|.))
      | (?P<eof>\Z)
    )
    """,
    re.VERBOSE | re.DOTALL,
)
_INT = re.compile(r"[+-]?\d+N?\Z")
_FLOAT = re.compile(r"[+-]?\d+(\.\d*)?([eE][+-]?\d+)?M?\Z")
_CHARS = {"newline": "\n", "space": " ", "tab": "\t", "return": "\r"}
_STRING_ESCAPES = re.compile(r'\\(u[0-9a-fA-F]{4}|.)', re.DOTALL)
_ESCAPED = {"n": "\n", "t": "\t", "r": "\r", '"': '"', "\\": "\\", "b": "\b", "f": "\f"}
_CLOSER = {"[": "]", "(": ")", "{": "}", "#{": "}"}


def _unescape(match: re.Match[str]) -> str:
    code = match.group(1)
    if code[0] == "u" and len(code) == 5:
        return chr(int(code[1:], 16))
    return _ESCAPED.get(code, code)


_KEYWORDS: dict[str, Keyword] = {}


def _atom(text: str) -> Any:
    first = text[0]
    if first == ":":
        kw = _KEYWORDS.get(text)
        if kw is None:
            if len(text) == 1:
                raise ValueError("empty keyword")
            kw = Keyword(text[1:])
            if len(_KEYWORDS) < 100_000:
                _KEYWORDS[text] = kw
        return kw
    if first.isdigit() or (first in "+-" and len(text) > 1 and text[1].isdigit()):
        if _INT.match(text):
            return int(text.rstrip("N"))
    elif text == "nil":
        return None
    elif text == "true":
        return True
    elif text == "false":
        return False
    if _FLOAT.match(text):
        return float(text.rstrip("M"))
    if "/" in text and text[0].isdigit():
        raise ValueError(f"ratios are not supported: {text}")
    return Symbol(text)


def _hashable(value: Any) -> Any:
    if isinstance(value, list):
        return tuple(_hashable(v) for v in value)
    if isinstance(value, dict):
        return tuple(sorted(((_hashable(k), _hashable(v)) for k, v in value.items()), key=repr))
    return value


def _line_of(text: str, pos: int) -> int:
    return text.count("\n", 0, pos) + 1


def iter_forms(text: str, source: str = "<edn>", child_lines: list[int] | None = None) -> Iterator[tuple[int, Any]]:
    """Yield (line, form) for every top-level form in `text`.

    When `child_lines` is a list, the line of every element of a top-level collection is
    appended to it, in order (Knossos histories are one vector of op maps).
    """
    stack: list[tuple[str, list[Any], int, int]] = []  # (opener, items, start pos, start line)
    discard = 0  # pending #_ markers, applying to the next complete form
    tags = 0  # pending #tag markers (value read as the tagged form itself)
    pos = 0
    match = _TOKEN.match
    counted_pos, counted_line = 0, 1  # line numbers counted incrementally: forms come in order

    def line_at(p: int) -> int:
        nonlocal counted_pos, counted_line
        if p >= counted_pos:
            counted_line += text.count("\n", counted_pos, p)
            counted_pos = p
            return counted_line
        return _line_of(text, p)

    while True:
        m = match(text, pos)
        if m is None:
            raise EdnError(f"{source}:{_line_of(text, pos)}: unreadable EDN near {text[pos:pos + 20]!r}")
        kind = m.lastgroup
        pos = m.end()
        if kind == "atom":
            try:
                value = _atom(m.group(kind))
            except ValueError as exc:
                raise EdnError(f"{source}:{_line_of(text, m.start(kind))}: {exc}") from None
            form_line = 0  # computed on demand: only top-level forms and their children need it
            form_start = m.start(kind)
        elif kind == "open":
            start = m.start(kind)
            stack.append((m.group(kind), [], start, line_at(start)))
            continue
        elif kind == "close":
            start = m.start(kind)
            closer = m.group(kind)
            if not stack:
                raise EdnError(f"{source}:{_line_of(text, start)}: unexpected {closer!r}")
            opener, items, ostart, form_line = stack.pop()
            if _CLOSER[opener] != closer:
                raise EdnError(
                    f"{source}:{_line_of(text, start)}: {closer!r} closes {opener!r} "
                    f"opened on line {_line_of(text, ostart)}"
                )
            if opener == "{":
                if len(items) % 2:
                    raise EdnError(f"{source}:{_line_of(text, ostart)}: map with an odd number of forms")
                value = {}
                for i in range(0, len(items), 2):
                    key = items[i]
                    try:
                        value[key] = items[i + 1]
                    except TypeError:
                        value[_hashable(key)] = items[i + 1]
            elif opener == "#{":
                value = frozenset(_hashable(v) for v in items)
            else:
                value = items
            form_start = ostart
        elif kind == "string":
            raw = m.group(kind)[1:-1]
            value = _STRING_ESCAPES.sub(_unescape, raw) if "\\" in raw else raw
            form_line = 0
            form_start = m.start(kind)
        elif kind == "eof":
            break
        elif kind == "discard":
            discard += 1
            continue
        elif kind == "tag":
            tags += 1
            continue
        else:  # char
            body = m.group(kind)[1:]
            value = _CHARS.get(body) or (chr(int(body[1:], 16)) if len(body) == 5 and body[0] == "u" else body)
            form_line = 0
            form_start = m.start(kind)
        # A complete form: consume pending tags, then pending discards.
        if tags:
            tags -= 1
        if discard:
            discard -= 1
            continue
        if stack:
            stack[-1][1].append(value)
            if child_lines is not None and len(stack) == 1 and stack[0][0] in "[(":
                child_lines.append(form_line or line_at(form_start))
        else:
            yield form_line or line_at(form_start), value
    if stack:
        opener, _, ostart, _ = stack[-1]
        raise EdnError(f"{source}:{_line_of(text, ostart)}: {opener!r} is never closed")


def read_all(text: str, source: str = "<edn>") -> list[Any]:
    """Every top-level form of `text`."""
    return [form for _, form in iter_forms(text, source)]


def loads(text: str, source: str = "<edn>") -> Any:
    """Exactly one EDN form."""
    forms = read_all(text, source)
    if len(forms) != 1:
        raise EdnError(f"{source}: expected one EDN form, found {len(forms)}")
    return forms[0]


_NEEDS_ESCAPE = re.compile(r'["\\\x00-\x1f\x7f]')
_ESCAPES = {'"': '\\"', "\\": "\\\\", "\n": "\\n", "\t": "\\t", "\r": "\\r", "\b": "\\b", "\f": "\\f"}


def _escape_char(match: re.Match[str]) -> str:
    ch = match.group(0)
    return _ESCAPES.get(ch, f"\\u{ord(ch):04x}")


def dumps(value: Any) -> str:
    """`value` as EDN text: None -> nil, bool, int, float, `Keyword` -> :name, `Symbol`,
    str -> "string" (every control character escaped), list/tuple -> [vector],
    dict -> {map}, set -> #{set}. Raises TypeError for what EDN cannot express here.
    The one EDN writer of the project: the harness writes history.edn with it."""
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
    elif isinstance(value, Symbol):
        out.append(str.__str__(value))
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
        for i, text in enumerate(sorted(dumps(item) for item in value)):
            if i:
                out.append(" ")
            out.append(text)
        out.append("}")
    else:
        raise TypeError(f"cannot write {type(value).__name__} as EDN")
