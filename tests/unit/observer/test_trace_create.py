"""`mallory trace --create`: the ring of a program run by hand, made when there is none and
removed when trace ends; one that exists (a cluster node's) is read and left alone."""

from __future__ import annotations

import os
import threading

from mallory.cli import main
from mallory.errors import ExitCode
from mallory.observer.ring import create_ring, shm_path
from mallory.polling import wait_until


def test_trace_creates_the_ring_it_reads_and_removes_it(shm_name, capsys):
    codes = []
    trace = threading.Thread(target=lambda: codes.append(
        main(["trace", "--shm", shm_name, "--create", "--ring-capacity", "256", "--duration", "1"])))
    trace.start()
    wait_until(lambda: os.path.exists(shm_path(shm_name)), 10, "the ring")
    trace.join(30)
    assert codes == [ExitCode.OK]
    assert not os.path.exists(shm_path(shm_name))
    assert f"start the program with MALLORY_SHM={shm_name}" in capsys.readouterr().err


def test_an_existing_ring_is_left_alone_and_a_missing_one_is_not_made_unasked(shm_name, capsys):
    assert main(["trace", "--shm", shm_name, "--duration", "0.05"]) == ExitCode.BAD_INPUT
    assert "give --create" in capsys.readouterr().err and not os.path.exists(shm_path(shm_name))
    create_ring(shm_name, 256)
    assert main(["trace", "--shm", shm_name, "--create", "--duration", "0.05"]) == ExitCode.OK
    assert os.path.exists(shm_path(shm_name))
