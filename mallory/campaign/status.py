"""The live status of a campaign: a screen in the spirit of AFL's, or plain log lines.

On a terminal the screen is redrawn in place after every step; otherwise (CI, a log file)
one line is printed per step and per schedule, so the output stays readable when piped.
"""

from __future__ import annotations

import sys
import time
from typing import IO

from mallory.campaign.progress import Progress


def _dur(seconds: float | None) -> str:
    if seconds is None:
        return "none yet"
    s = int(seconds)
    return f"{s // 86400}d {s // 3600 % 24:02d}h {s // 60 % 60:02d}m {s % 60:02d}s"


class StatusScreen:
    def __init__(self, title: str, out: IO[str] | None = None, plain: bool | None = None) -> None:
        self.title = title
        self.out = out or sys.stdout
        self.plain = (not self.out.isatty()) if plain is None else plain
        self._last_steps = -1
        self._last_schedules = -1

    def update(self, p: Progress, lost: int = 0) -> None:
        if self.plain:
            self._line(p, lost)
        else:
            self._screen(p, lost)

    def _line(self, p: Progress, lost: int) -> None:
        if p.steps_done == self._last_steps and p.schedules_done == self._last_schedules:
            return
        self._last_steps, self._last_schedules = p.steps_done, p.schedules_done
        p50 = p.feedback_percentile(0.5)
        print(
            f"[{_dur(p.elapsed_s())}] schedules {p.schedules_done} steps {p.steps_done} "
            f"states {p.states} pairs {p.pairs_covered} bugs {p.bugs} late {p.late_steps} fault {p.current_fault} "
            f"feedback p50 {p50 if p50 is not None else '-'} ms",
            file=self.out,
            flush=True,
        )

    def _screen(self, p: Progress, lost: int) -> None:
        hours = max(p.elapsed_s() / 3600, 1e-9)
        p50, p99 = p.feedback_percentile(0.5), p.feedback_percentile(0.99)
        rows = [
            f" mallory :: {self.title}",
            "",
            f"        run time : {_dur(p.elapsed_s())}",
            f"  last new state : {_dur(p.last_new_state_s)}",
            f"  distinct states: {p.states}   ({p.states / hours:.1f}/h)",
            f"   pairs covered : {p.pairs_covered}   last new {_dur(p.last_new_pair_s)}",
            f"       schedules : {p.schedules_done}   steps {p.steps_done}   late {p.late_steps}",
            f"   current fault : {p.current_fault}",
            f"  feedback (ms)  : p50 {p50 if p50 is not None else '-'}   p99 {p99 if p99 is not None else '-'}",
            f"   observer loss : {lost} events",
            f"      bugs found : {p.bugs}   last {_dur(p.last_bug_s)}",
            "",
            f" {time.strftime('%H:%M:%S')}  (Ctrl-C ends the campaign after the current step)",
        ]
        self.out.write("\x1b[H\x1b[2J" + "\n".join(rows) + "\n")
        self.out.flush()
