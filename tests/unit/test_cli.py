"""`mallory`'s exit codes, mapped in one place (mallory/cli.py `main`): a usage error and a
MalloryError are 254, an uncaught exception 255 with its traceback, as Jepsen's CLI; a
command's own answer (0, 1, 2) passes through."""

from __future__ import annotations

import argparse
import logging
import re
import subprocess
import sys

import pytest

import mallory.commands.synthesize as synthesize
from mallory.campaign.loop import ComponentDied
from mallory.cli import command_word, main
from mallory.commands import check, observe
from mallory.errors import ExitCode
from mallory.observer.keepalive import KEEPALIVE, Keepalive


def test_the_codes_are_jepsens():
    # Jepsen's, plus sysexits' EX_UNAVAILABLE for a campaign whose machinery died
    assert [int(code) for code in ExitCode] == [0, 1, 2, 69, 130, 254, 255]


def test_an_error_exits_with_its_class_code(monkeypatch, capsys):
    def dies(args):
        raise ComponentDied("the mediator (pid 1) was killed by SIGKILL")

    monkeypatch.setattr(check, "run", dies)
    assert main(["check", "/nonexistent"]) == ExitCode.UNAVAILABLE
    assert "error: the mediator" in capsys.readouterr().err


@pytest.mark.parametrize("argv", [
    ["fuzz", "--nodes", "three"],  # a value argparse cannot read
    ["check"],  # a missing argument
    ["no-such-command"],
    [],  # no command at all
])
def test_a_usage_error_is_bad_input_not_unknown(argv, capsys):
    assert main(argv) == ExitCode.BAD_INPUT
    assert "usage: mallory" in capsys.readouterr().err


def test_bad_input_is_254_with_the_message_and_no_traceback(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "mallory.cli", "check", str(tmp_path / "missing.edn")],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 254, proc.stderr
    assert "missing.edn" in proc.stderr and "Traceback" not in proc.stderr


def test_an_internal_error_is_255_with_its_traceback(tmp_path, monkeypatch, capsys):
    def broken(*args, **kwargs):
        raise RuntimeError("the synthetic stream broke")

    monkeypatch.setattr(synthesize, "synthetic_stream", broken)
    assert main(["synthesize", "--out", str(tmp_path / "events.jsonl")]) == ExitCode.INTERNAL_ERROR
    err = capsys.readouterr().err
    assert "Traceback" in err and "RuntimeError: the synthetic stream broke" in err
    assert "mallory synthesize: internal error" in err


def test_help_and_version_are_ok(capsys):
    assert main(["--help"]) == ExitCode.OK
    help_text = capsys.readouterr().out
    assert "exit codes" in help_text and "254" in help_text and "255" in help_text
    assert main(["--version"]) == ExitCode.OK



@pytest.mark.parametrize("argv, level", [([], logging.INFO), (["-v"], logging.DEBUG),
                                         (["--log-level", "warning"], logging.WARNING)])
def test_log_level_options_set_mallorys_loggers(argv, level, tmp_path):
    assert main([*argv, "synthesize", "--out", str(tmp_path / "e.jsonl"), "--events", "10"]) == ExitCode.OK
    assert logging.getLogger("mallory").level == logging.getLogger("nemesis").level == level


def test_progress_goes_to_stderr_with_the_time_and_results_to_stdout(tmp_path, capsys):
    assert main(["synthesize", "--out", str(tmp_path / "e.jsonl"), "--events", "10"]) == ExitCode.OK
    logging.getLogger("mallory.test").info("bringing up the cluster")
    logging.getLogger("mallory.test").debug("not shown at info")
    out, err = capsys.readouterr()
    assert out == "" and re.fullmatch(r"\d\d:\d\d:\d\d bringing up the cluster\n", err), err


@pytest.mark.parametrize("argv, word", [
    (["observe", "--run", "r1"], "observe"),
    (["--log-level", "debug", "observe"], "observe"),
    (["-v", "--log-level=warning", "fuzz", "--sut", "x"], "fuzz"),
    (["--help"], None),
    ([], None),
])
def test_the_command_word_skips_the_clis_own_options(argv, word):
    assert command_word(argv) == word


def test_a_command_imports_only_its_own_module():
    """An observer runs in every node: it must not carry numpy, scipy and datasketch, which
    the learner's commands import (~75 MB resident). A misspelt command still lists them all."""
    heavy = ("numpy", "scipy", "datasketch")
    code = ("import sys; from mallory.cli import main; main(['observe', '--help']); "
            f"print([m for m in {heavy!r} if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip().splitlines()[-1] == "[]"
    # Nor once it runs: what `observe` imports as it starts (the ring's reader, the log tail,
    # the message framing, a TOML spec's loader, a netns run's layout).
    runtime = ("mallory.commands.observe", "mallory.observer.ring", "mallory.observer.log_events",
               "mallory.observer.framing", "mallory.observer.messages", "mallory.harness.spec",
               "mallory.cluster.netns")
    code = f"import sys, {', '.join(runtime)}; print([m for m in {heavy!r} if m in sys.modules])"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
    # Nor OpenSSL (3.6 MB): the packet id's blake2b comes from CPython's own module.
    code = "import sys, mallory.commands.observe, mallory.observer.ring; print('_hashlib' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"
    code = "from mallory.cli import main; raise SystemExit(main(['obsrve']))"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == ExitCode.BAD_INPUT and "'fuzz'" in r.stderr and "'observe'" in r.stderr


def test_the_mediator_loads_the_learner_only_for_the_advisor():
    """The mediator holds a learner only in Jepsen-driven mode (--advisor); without it, it must
    not map datasketch and the scipy it pulls in (~3.5 MB resident, OpenBLAS's threads)."""
    code = ("import sys, mallory.commands.mediator, mallory.mediator.service, mallory.mediator.api; "
            "print([m for m in ('scipy', 'datasketch', 'mallory.learner') if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


@pytest.mark.parametrize("value", ["2,1", "2,1,0", "a,b,c", "2,1,3,4", "-2,1,3"])
def test_observe_rejects_a_malformed_keepalive(value, capsys):
    assert main(["observe", "--node", "n1", f"--keepalive={value}"]) == ExitCode.BAD_INPUT
    last = capsys.readouterr().err.strip().splitlines()[-1]  # argparse's usage, then the error
    assert last.startswith("mallory observe: error: argument --keepalive") and "IDLE,INTERVAL,PROBES" in last


def test_observe_takes_a_keepalive_and_defaults_to_the_shared_one():
    parser = argparse.ArgumentParser()
    observe.configure(parser)
    assert parser.parse_args(["--keepalive", "2,1,3"]).keepalive == Keepalive(2, 1, 3)
    assert parser.parse_args([]).keepalive == KEEPALIVE
