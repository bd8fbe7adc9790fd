"""From noisy replays to a yes/no: a candidate keeps the bug if it reappears in at least
`min_fraction` of `replays` replays.

Faults on real systems are not deterministic (which node leads when a fault lands, how
the scheduler interleaves a race), so one replay proves little either way. Replays stop
early once the verdict is settled (enough hits, or too few left to get enough), and every
answered replay is journaled and reused.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from mallory.campaign.loop import ScriptedStep
from mallory.shrink.journal import Journal

#: replay(candidate) -> (did the bug's signature reappear, the replay's directory or None)
Replay = Callable[[list[ScriptedStep]], tuple[bool, str | None]]


@dataclass
class Verdict:
    hits: int
    replays: int
    needed: int
    journaled: int  # how many of the replays came from the journal

    @property
    def fails(self) -> bool:
        return self.hits >= self.needed


class FractionOracle:
    def __init__(
        self,
        replay: Replay,
        journal: Journal,
        replays: int,
        min_fraction: float,
        on_verdict: Callable[[list[ScriptedStep], Verdict], None] = lambda c, v: None,
    ) -> None:
        if replays < 1:
            raise ValueError("replays must be at least 1")
        if not 0.0 < min_fraction <= 1.0:
            raise ValueError("min_fraction must be in (0, 1]")
        self.replay = replay
        self.journal = journal
        self.replays = replays
        self.needed = max(1, math.ceil(min_fraction * replays - 1e-9))
        self.on_verdict = on_verdict
        self.asked = 0  # live replays run by this oracle (not from the journal)

    def verdict(self, candidate: list[ScriptedStep]) -> Verdict:
        known = self.recorded(candidate)
        hits, done = known.hits, known.replays
        while done < self.replays and self.needed > hits and hits + (self.replays - done) >= self.needed:
            hit, directory = self.replay(candidate)
            self.asked += 1
            self.journal.record(candidate, hit, directory)
            hits += hit
            done += 1
        verdict = Verdict(hits, done, self.needed, known.replays)
        self.on_verdict(candidate, verdict)
        return verdict

    def recorded(self, candidate: list[ScriptedStep]) -> Verdict:
        """The verdict the journal already holds, replaying nothing."""
        known = [a["hit"] for a in self.journal.answers(candidate)][: self.replays]
        return Verdict(sum(known), len(known), self.needed, len(known))

    def __call__(self, candidate: list[ScriptedStep]) -> bool:
        return self.verdict(candidate).fails
