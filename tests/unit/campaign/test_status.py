"""The status screen: redrawn on a timer with the phase (bring-up, a schedule's reset and
checks...), log records inside it; plain lines per step and phase, and a line at least every
heartbeat while a phase lasts."""

from __future__ import annotations

import io
import logging
import time

from mallory.campaign.progress import Progress
from mallory.campaign.status import StatusScreen
from mallory.polling import wait_until


def test_plain_lines_per_phase_and_step_and_a_heartbeat_while_a_phase_lasts():
    out = io.StringIO()
    with StatusScreen("t", out=out, plain=True, redraw_s=0.01, heartbeat_s=0.05) as screen:
        screen.phase("bring-up")
        wait_until(lambda: out.getvalue().count("bring-up") >= 3, 5, "heartbeats")
        progress = Progress(steps_done=1, current_fault="kill:one")
        screen.update(progress)
        screen.update(progress)  # nothing new: no line
        progress.phase = "resetting"
        screen.update(progress)
    lines = out.getvalue().splitlines()
    assert "[starting] bring-up (0 s)" in lines
    step = [line for line in lines if "steps 1 " in line]
    assert len(step) == 1 and "fault kill:one" in step[0]
    assert lines[-1].endswith("] resetting (0 s)")


def test_the_screen_redraws_on_its_own_and_shows_log_records_instead_of_scrolling(capsys):
    out = io.StringIO()
    root = logging.getLogger()
    before = list(root.handlers)
    terminal = logging.StreamHandler()  # stands in for the CLI's stderr handler
    root.addHandler(terminal)
    try:
        with StatusScreen("redis-sentinel x3", out=out, plain=False, redraw_s=0.01) as screen:
            screen.phase("bring-up: cluster")
            assert terminal not in root.handlers
            logging.getLogger("mallory.test").warning("waiting for n1 to be ready")
            frames = out.getvalue().count("\x1b[H")
            wait_until(lambda: out.getvalue().count("\x1b[H") >= frames + 3, 5, "redraws")
            screen.update(Progress(steps_done=4, phase="checking"))
            time.sleep(0.05)
        last = out.getvalue().rsplit("\x1b[H\x1b[2J", 1)[1]
        assert "phase : checking" in last and "schedules : 0   steps 4" in last
        assert "waiting for n1 to be ready" in last
        assert terminal in root.handlers, "the terminal's handler is back"
        assert "waiting for n1" not in capsys.readouterr().err
    finally:
        root.removeHandler(terminal)
    assert root.handlers == before
