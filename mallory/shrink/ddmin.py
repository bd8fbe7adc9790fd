"""Delta debugging (Zeller and Hildebrandt's ddmin), pure: no I/O, any oracle.

`ddmin(items, fails)` returns a sub-sequence of `items` (order kept) for which `fails`
still holds and from which no single item can be removed without losing it (1-minimal),
provided `fails(items)` holds and `fails` is deterministic. Real replays are not: the
caller decides how a noisy oracle becomes a yes/no (replays and a fraction), and the
result is then minimal with respect to those verdicts.

Each distinct candidate is asked once: ddmin revisits candidates, and each question to a
live oracle costs a fresh cluster.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

T = TypeVar("T")


def _chunks(items: Sequence[T], n: int) -> list[list[T]]:
    """`items` cut into n contiguous chunks whose sizes differ by at most one."""
    size, extra = divmod(len(items), n)
    out, start = [], 0
    for i in range(n):
        end = start + size + (1 if i < extra else 0)
        out.append(list(items[start:end]))
        start = end
    return out


def ddmin(items: Sequence[T], fails: Callable[[list[T]], bool], subsets: bool = True) -> list[T]:
    """The 1-minimal failing sub-sequence ddmin finds from `items` (assumed failing).

    With `subsets=False` only complements are tried (each round removes one chunk): still
    1-minimal, and cheaper when the failure needs several items together, as a bug that
    needs a sequence of faults does: a single chunk of such a schedule rarely fails alone,
    and each question is a replay on a fresh cluster."""
    asked: dict[tuple[int, ...], bool] = {}

    def test(candidate: list[int]) -> bool:  # positions in `items`: equal items stay apart
        key = tuple(candidate)
        if key not in asked:
            asked[key] = fails([items[i] for i in candidate])
        return asked[key]

    current = list(range(len(items)))
    n = 2
    while len(current) >= 2:
        n = min(n, len(current))
        chunks = _chunks(current, n)
        for chunk in chunks if subsets else ():
            if test(chunk):
                current, n = chunk, 2
                break
        else:
            for i in range(len(chunks)):
                complement = [x for j, c in enumerate(chunks) if j != i for x in c]
                if test(complement):
                    current, n = complement, max(n - 1, 2)
                    break
            else:
                if n >= len(current):
                    break
                n = min(len(current), 2 * n)
    return [items[i] for i in current]
