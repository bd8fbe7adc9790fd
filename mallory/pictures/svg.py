"""What the pictures share: the <svg> element, text, numbers and axis ticks."""

from __future__ import annotations

import math
from html import escape


def num(value: float) -> str:
    """A coordinate: one decimal at most, no trailing zeros."""
    return f"{value:.1f}".rstrip("0").rstrip(".")


def text(x: float, y: float, words: str, **attrs: str) -> str:
    """A <text> element; attribute names use _ for - (font_size -> font-size)."""
    extra = "".join(f' {k.replace("_", "-")}="{escape(v)}"' for k, v in attrs.items())
    return f'<text x="{num(x)}" y="{num(y)}"{extra}>{escape(words)}</text>'


def document(kind: str, width: float, height: float, body: list[str], title: str) -> str:
    """An <svg> element of class `kind`, to inline in HTML or write as a file: it
    declares its namespace and refers to nothing outside itself."""
    return "\n".join([
        f'<svg xmlns="http://www.w3.org/2000/svg" class="{kind}" width="{num(width)}" height="{num(height)}" '
        f'viewBox="0 0 {num(width)} {num(height)}" font-family="sans-serif" font-size="11">',
        f"<title>{escape(title)}</title>",
        *body,
        "</svg>",
    ])


def nice_ticks(low: float, high: float, target: int = 6) -> list[float]:
    """Round values (1, 2 or 5 times a power of ten apart) from `low` to `high`, about
    `target` of them."""
    if high <= low:
        return [low]
    raw = (high - low) / target
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 5, 10) if m * power >= raw)
    first = math.ceil(low / step) * step
    return [round(first + k * step, 10) for k in range(int((high - first) / step + 1e-9) + 1)]
