"""The shrink's journal: one JSON line per replay, appended and flushed as it ends.

A line is `{"candidate": [[action, draw, window_s], ...], "hit": bool, "dir": path}`. An
interrupted shrink (Ctrl-C, a crash) started again over the same journal asks no
replay it already has: every answered replay is kept, a replay cut short is not
written, and is simply run again; a line torn by a kill is cut off when the journal is
opened, before anything is appended after it.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import orjson

from mallory.campaign.loop import ScriptedStep
from mallory.errors import MalloryError
from mallory.files import cut_torn_tail

CandidateKey = tuple[tuple[str, int, float | None], ...]


def candidate_key(steps: Sequence[ScriptedStep]) -> CandidateKey:
    return tuple((s.action, s.draw, s.window_s) for s in steps)


class Journal:
    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.replays: dict[CandidateKey, list[dict[str, Any]]] = {}
        if self.path.exists():
            cut_torn_tail(self.path)  # the line a killed shrink was writing: that replay is lost
            self._load()

    def _load(self) -> None:
        for number, line in enumerate(self.path.read_bytes().splitlines(), 1):
            try:
                entry = orjson.loads(line)
                key = tuple((str(a), int(d), None if w is None else float(w)) for a, d, w in entry["candidate"])
                hit = bool(entry["hit"])
            except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
                raise MalloryError(f"{self.path}:{number}: not a shrink journal line") from None
            self.replays.setdefault(key, []).append({"hit": hit, "dir": entry.get("dir")})

    def __len__(self) -> int:
        """How many replays the journal holds, over all candidates."""
        return sum(map(len, self.replays.values()))

    def answers(self, steps: Sequence[ScriptedStep]) -> list[dict[str, Any]]:
        """The replays already answered for this candidate, in order."""
        return list(self.replays.get(candidate_key(steps), []))

    def record(self, steps: Sequence[ScriptedStep], hit: bool, directory: str | None) -> None:
        key = candidate_key(steps)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        line = orjson.dumps({"candidate": [list(k) for k in key], "hit": hit, "dir": directory})
        with open(self.path, "ab") as f:
            f.write(line + b"\n")
            f.flush()
        self.replays.setdefault(key, []).append({"hit": hit, "dir": directory})
