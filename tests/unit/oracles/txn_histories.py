"""Building small transactional histories for tests, in Elle's shorthand.

`"ax1ry12"` is `[[:append :x 1] [:r :y [1 2]]]`, `"wx1ry_"` is `[[:w :x 1] [:r :y nil]]`
(for list-append `_` is an empty read). Keys are one letter, values single digits.
"""

from __future__ import annotations

from typing import Any

from mallory.history.edn import Keyword
from mallory.history.ops import Op


def mops(text: str, register: bool = False) -> list[list[Any]]:
    out: list[list[Any]] = []
    i = 0
    while i < len(text):
        f, k = text[i], Keyword(text[i + 1])
        j = i + 2
        while j < len(text) and (text[j].isdigit() or text[j] == "_"):
            j += 1
        raw = text[i + 2:j]
        if f == "a":
            out.append([Keyword("append"), k, int(raw)])
        elif f == "w":
            out.append([Keyword("w"), k, int(raw)])
        elif register:
            out.append([Keyword("r"), k, None if raw == "_" else int(raw)])
        else:
            out.append([Keyword("r"), k, [] if raw == "_" else [int(c) for c in raw]])
        i = j
    return out


def _invoke_value(ms: list[list[Any]]) -> list[list[Any]]:
    return [[m[0], m[1], None] if m[0] == "r" else list(m) for m in ms]


class HistoryBuilder:
    """Append invokes and completions in the order they happened."""

    def __init__(self, register: bool = False) -> None:
        self.ops: list[Op] = []
        self.register = register
        self.pending: dict[int, list[list[Any]]] = {}

    def invoke(self, process: int, text: str) -> HistoryBuilder:
        ms = mops(text, self.register)
        self.pending[process] = ms
        self.ops.append(Op(len(self.ops), process, Keyword("invoke"), Keyword("txn"), _invoke_value(ms)))
        return self

    def complete(self, process: int, typ: str = "ok") -> HistoryBuilder:
        ms = self.pending.pop(process)
        value = ms if typ == "ok" else _invoke_value(ms)
        self.ops.append(Op(len(self.ops), process, Keyword(typ), Keyword("txn"), value))
        return self

    def txn(self, process: int, text: str, typ: str = "ok") -> HistoryBuilder:
        return self.invoke(process, text).complete(process, typ)


def concurrent(*texts: str, register: bool = False, types: dict[int, str] | None = None) -> list[Op]:
    """All transactions invoked before any completes (no real-time order), one process each."""
    b = HistoryBuilder(register)
    for p, t in enumerate(texts):
        b.invoke(p, t)
    for p in range(len(texts)):
        b.complete(p, (types or {}).get(p, "ok"))
    return b.ops
