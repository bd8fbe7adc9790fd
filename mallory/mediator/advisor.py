"""Jepsen-driven mode: an external harness asks the mediator for its next fault.

A Jepsen test keeps its own generator, client and checker; its nemesis generator asks
`POST /advisor/next` whenever it would emit a fault. The window the learner judges is the
stretch of the timeline since the previous request (the first request looks back one
default window), so windows are aligned to the harness's own pace. The answer is the next
action from the catalogue the harness declared (`POST /advisor/catalogue`), chosen by the
same learner `mallory fuzz` uses. A window the timeline cannot complete in time is reported
late and teaches nothing, as in the campaign loop; so does one the mediator kept only part
of (asks spaced further apart than its bounded buffer holds: `"truncated": true`). `end_test`
ends the learner's schedule and checkpoints it when the mediator was given a directory, so
learning carries across tests.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path

from mallory.errors import MalloryError
from mallory.files import atomic_write
from mallory.learner.learner import Learner
from mallory.mediator.windows import WindowService

MAX_ACTIONS = 256


class Advisor:
    def __init__(
        self,
        windows: WindowService,
        learner: Learner,
        *,
        checkpoint: Path | None = None,
        first_window_s: float = 2.5,
        wait_s: float = 1.0,
        abstraction: str = "event-history",
        now_ns: Callable[[], int] = time.time_ns,
    ) -> None:
        self.windows = windows
        self.learner = learner
        self.checkpoint = checkpoint
        self.first_window_ns = int(first_window_s * 1e9)
        self.wait_s = wait_s
        self.abstraction = abstraction
        self.now_ns = now_ns
        self.actions: list[str] = []
        self.requests = 0
        self.late = 0
        self._last_ns: int | None = None
        self._lock = threading.Lock()

    def set_catalogue(self, actions: list[str]) -> dict:
        if not actions or len(actions) > MAX_ACTIONS or not all(isinstance(a, str) and 0 < len(a) <= 128 for a in actions):
            raise MalloryError(f"a catalogue is 1..{MAX_ACTIONS} action names of 1..128 characters")
        if len(set(actions)) != len(actions):
            raise MalloryError("the catalogue names an action twice")
        with self._lock:
            self.actions = list(actions)
        return {"actions": self.actions}

    def next_fault(self) -> dict:
        with self._lock:
            if not self.actions:
                raise MalloryError("no catalogue yet: POST /advisor/catalogue first")
            end = self.now_ns()
            start = self._last_ns if self._last_ns is not None else end - self.first_window_ns
            if end <= start:
                end = start + 1
            window = self.windows.window(start, end, self.wait_s, self.abstraction)
            self._last_ns = end
            self.requests += 1
            answer: dict = {"window_ns": [start, end], "events": window.events, "late": not window.complete}
            if window.truncated:  # asks further apart than the mediator keeps entries (windows.py)
                answer["truncated"] = True
            observed = self.learner.observe_window(window.summary if window.complete else None, window.pairs)
            if observed is not None:
                match, reward = observed
                answer.update(state=match.state_id, new=match.is_new, reward=reward)
            else:
                self.late += 1
                answer.update(state=None, new=None, reward=None)
            answer["action"] = self.learner.next_action(self.actions)
            answer["states"] = len(self.learner.store)
            answer["pairs_covered"] = len(self.learner.coverage)
            return answer

    def end_test(self) -> dict:
        with self._lock:
            self.learner.end_schedule()
            self._last_ns = None
            if self.checkpoint is not None:
                atomic_write(self.checkpoint, self.learner.to_checkpoint())
            return {"states": len(self.learner.store), "requests": self.requests, "late": self.late}

    def stats(self) -> dict:
        return {"requests": self.requests, "late": self.late, "states": len(self.learner.store),
                "actions": len(self.actions), "policy": self.learner.policy.name}
