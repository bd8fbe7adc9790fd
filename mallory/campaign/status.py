"""The live status of a campaign: a screen in the spirit of AFL's, or plain log lines.

On a terminal the screen is redrawn in place every second (and after every step), so the
run time ticks and the phase shows while nothing else changes: bring-up, calibration, a
schedule's steps, its reset and checks, tear-down. Log records appear in the screen's last
lines instead of scrolling it away. Otherwise (CI, a log file) one line is printed per step,
per schedule and per phase, and one every 10 s while a phase lasts, so the output stays
readable when piped and never falls silent for long.
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from collections import deque
from typing import IO, Self

from mallory.campaign.progress import Progress

#: log records the screen keeps to show
SHOWN_MESSAGES = 6


def _dur(seconds: float | None) -> str:
    if seconds is None:
        return "none yet"
    s = int(seconds)
    return f"{s // 86400}d {s // 3600 % 24:02d}h {s // 60 % 60:02d}m {s % 60:02d}s"


class _Messages(logging.Handler):
    """The last log records, formatted, for the screen to show."""

    def __init__(self, formatter: logging.Formatter | None) -> None:
        super().__init__()
        self.lines: deque[str] = deque(maxlen=SHOWN_MESSAGES)
        if formatter is not None:
            self.setFormatter(formatter)

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(self.format(record).replace("\n", " "))


class StatusScreen:
    """Shows a campaign's progress while it is used as a context manager (which runs the
    redraw timer and, for the screen, takes over the root logger's handlers).

    `phase(name)` says what the command is doing; `update(progress)` is the loop's hook
    (Campaign's `on_update`), whose `progress.phase` is the phase from then on."""

    def __init__(self, title: str, out: IO[str] | None = None, plain: bool | None = None,
                 redraw_s: float = 1.0, heartbeat_s: float = 10.0) -> None:
        self.title = title
        self.out = out or sys.stdout
        self.plain = (not self.out.isatty()) if plain is None else plain
        self.redraw_s = redraw_s
        self.heartbeat_s = heartbeat_s
        self._progress: Progress | None = None
        self._phase = "starting"
        self._phase_since = time.monotonic()
        self._printed = time.monotonic()  # when the last plain line went out
        self._last_counts = (-1, -1)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._timer: threading.Thread | None = None
        self._messages: _Messages | None = None
        self._taken: list[logging.Handler] = []

    # -- what the command and the loop say ---------------------------------------------------

    def phase(self, name: str) -> None:
        with self._lock:
            self._set_phase(name)
            if not self.plain:
                self._screen()

    def update(self, p: Progress) -> None:
        with self._lock:
            self._progress = p
            if p.phase != self._phase:
                self._set_phase(p.phase)
            counts = (p.steps_done, p.schedules_done)
            if not self.plain:
                self._screen()
            elif counts != self._last_counts:
                self._last_counts = counts
                self._line()

    # -- the timer -----------------------------------------------------------------------------

    def __enter__(self) -> Self:
        if not self.plain:
            root = logging.getLogger()
            self._taken = list(root.handlers)
            self._messages = _Messages(self._taken[0].formatter if self._taken else None)
            for handler in self._taken:
                root.removeHandler(handler)
            root.addHandler(self._messages)
        self._timer = threading.Thread(target=self._tick, name="status-screen", daemon=True)
        self._timer.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._timer is not None:
            self._timer.join()
        if self._messages is not None:
            root = logging.getLogger()
            root.removeHandler(self._messages)
            for handler in self._taken:
                root.addHandler(handler)

    def _tick(self) -> None:
        while not self._stop.wait(self.redraw_s):
            with self._lock:
                if not self.plain:
                    self._screen()
                elif time.monotonic() - self._printed >= self.heartbeat_s:
                    self._phase_line()

    # -- drawing (under the lock) ------------------------------------------------------------

    def _set_phase(self, name: str) -> None:
        self._phase = name
        self._phase_since = time.monotonic()
        if self.plain:
            self._phase_line()

    def _phase_line(self) -> None:
        elapsed = _dur(self._progress.elapsed_s()) if self._progress else "starting"
        print(f"[{elapsed}] {self._phase} ({time.monotonic() - self._phase_since:.0f} s)", file=self.out, flush=True)
        self._printed = time.monotonic()

    def _line(self) -> None:
        p = self._progress
        assert p is not None
        p50 = p.feedback_percentile(0.5)
        print(
            f"[{_dur(p.elapsed_s())}] schedules {p.schedules_done} steps {p.steps_done} "
            f"states {p.states} pairs {p.pairs_covered} "
            + (f"model {p.model_states} mismatches {p.model_mismatches} " if p.model_states else "")
            + f"bugs {p.bugs} late {p.late_steps} fault {p.current_fault} "
            f"feedback p50 {p50 if p50 is not None else '-'} ms",
            file=self.out,
            flush=True,
        )
        self._printed = time.monotonic()

    def _screen(self) -> None:
        rows = [f" mallory :: {self.title}", ""]
        in_phase = f"{self._phase}   ({time.monotonic() - self._phase_since:.0f} s)"
        p = self._progress
        if p is None:
            rows.append(f"           phase : {in_phase}")
        else:
            hours = max(p.elapsed_s() / 3600, 1e-9)
            p50, p99 = p.feedback_percentile(0.5), p.feedback_percentile(0.99)
            rows += [
                f"        run time : {_dur(p.elapsed_s())}",
                f"           phase : {in_phase}",
                f"  last new state : {_dur(p.last_new_state_s)}",
                f"  distinct states: {p.states}   ({p.states / hours:.1f}/h)",
                f"   pairs covered : {p.pairs_covered}   last new {_dur(p.last_new_pair_s)}",
                *([f"    model states : {p.model_states}   transitions {p.model_transitions}   "
                   f"mismatches {p.model_mismatches}"] if p.model_states else []),
                f"       schedules : {p.schedules_done}   steps {p.steps_done}   late {p.late_steps}",
                f"   current fault : {p.current_fault}",
                f"  feedback (ms)  : p50 {p50 if p50 is not None else '-'}   p99 {p99 if p99 is not None else '-'}",
                f"      bugs found : {p.bugs}   last {_dur(p.last_bug_s)}",
            ]
        rows += ["", *(f" {line}" for line in (self._messages.lines if self._messages else ()))]
        rows += ["", f" {time.strftime('%H:%M:%S')}  (Ctrl-C ends the campaign after the current step)"]
        self.out.write("\x1b[H\x1b[2J" + "\n".join(rows) + "\n")
        self.out.flush()
