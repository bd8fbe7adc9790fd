"""`mallory mediator` input errors: exit 254 with a message naming the input, no traceback;
and its token, which comes from a file or the environment, never from argv."""

import socket

import pytest

from mallory.cli import main
from mallory.commands.mediator import read_token


def mediator(capsys, *args):
    code = main(["mediator", *args])
    return code, capsys.readouterr().err


LOCAL = ["--batch", "127.0.0.1:0"]


@pytest.fixture(autouse=True)
def token_env(monkeypatch):
    monkeypatch.setenv("MALLORY_TOKEN", "t")


@pytest.mark.parametrize(
    "args, message",
    [
        ([], "no nodes"),
        (["--node", "n1"], "--node 'n1': expected NAME=ADDR"),
        (["--node", "n1=10.9.1.300", "--api", "127.0.0.1:0", "--no-firewall"], "bad node address"),
        (["--node", "n1=10.9.1.2", "--no-firewall"], "--api HOST:PORT is needed"),
        (["--node", "n1=10.9.1.2", "--api", "nowhere"], "--api 'nowhere': expected HOST:PORT"),
        (["--run", "no-such-run-xyz"], "no-such-run-xyz"),
        (["--node", "n1=10.9.1.2", "--api", "127.0.0.1:0", "--scenario", "s.py"],
         "the message layer needs --messages FILE"),
        (["--node", "n1=10.9.1.2", "--api", "127.0.0.1:0", "--messages", "m.json"],
         "and --scenario FILE or --filter-sets FILE"),
        (["--node", "n1=10.9.1.2", "--api", "127.0.0.1:0", "--scenario", "s.py", "--filter-sets", "f.py",
          "--messages", "m.json"], "give --scenario FILE or --filter-sets FILE, not both"),
        (["--node", "n1=10.9.1.2", "--api", "127.0.0.1:0", "--filter-sets", "/nonexistent.py", "--messages", "m.json"],
         "filter sets /nonexistent.py: cannot read it"),
        (["--node", "n1=10.9.1.2", "--api", "127.0.0.1:0", "--scenario", "/nonexistent.py", "--messages", "m.json"],
         "scenario /nonexistent.py: cannot read it"),
        (["--node", "n1=10.9.1.2", "--api", "127.0.0.1:0", "--token-file", "/nonexistent/token"],
         "--token-file /nonexistent/token: No such file or directory"),
    ],
)
def test_bad_input(capsys, args, message):
    code, err = mediator(capsys, *args, *LOCAL)
    assert code == 254 and message in err, err


def test_an_empty_token_is_refused(capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("MALLORY_TOKEN", "")
    args = ["--node", "n1=10.9.1.2", "--api", "127.0.0.1:0", "--no-firewall", *LOCAL]
    code, err = mediator(capsys, *args)
    assert code == 254 and "non-empty token (--token-file FILE or $MALLORY_TOKEN)" in err, err
    empty = tmp_path / "token"
    empty.write_text("\n")
    empty.chmod(0o600)
    code, err = mediator(capsys, *args, "--token-file", str(empty))
    assert code == 254 and "non-empty token" in err, err


def test_the_token_comes_from_a_file_or_the_environment_never_argv(capsys, monkeypatch, tmp_path):
    code, err = mediator(capsys, "--token", "s3cret")
    assert code == 254 and "use --token-file FILE (mode 0600) or $MALLORY_TOKEN" in err and "s3cret" not in err
    path = tmp_path / "token"
    path.write_text("s3cret\n")
    path.chmod(0o600)
    assert read_token(path) == "s3cret" and capsys.readouterr().err == ""
    path.chmod(0o644)
    assert read_token(path) == "s3cret"
    assert "readable by others (mode 644); chmod 600 it" in capsys.readouterr().err
    monkeypatch.setenv("MALLORY_TOKEN", "from-env")
    assert read_token(None) == "from-env"


def test_busy_port(capsys):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        code, err = mediator(capsys, "--node", "n1=10.9.1.2", "--api", f"127.0.0.1:{port}", "--no-firewall", *LOCAL)
    assert code == 254 and "cannot listen" in err, err


def test_a_start_that_fails_otherwise_still_undoes_what_started(capsys, monkeypatch):
    """A MalloryError from start (the message layer's rules refused, say) stops the
    mediator before the one-line error: its firewall rules and threads do not stay."""
    from mallory.errors import MalloryError
    from mallory.mediator import service

    stopped = []

    def failing_start(self):
        raise MalloryError("message layer: `iptables ... TPROXY ...` failed: No chain/target/match by that name")

    monkeypatch.setattr(service.Mediator, "start", failing_start)
    monkeypatch.setattr(service.Mediator, "stop", lambda self: stopped.append(True))
    code, err = mediator(capsys, "--node", "n1=10.9.1.2", "--api", "127.0.0.1:0", "--no-firewall", *LOCAL)
    assert code == 254 and "TPROXY" in err and stopped == [True], err
