"""`mallory mediator` input errors: exit 254 with a message naming the input, no traceback."""

import socket

import pytest

from mallory.cli import main


def mediator(capsys, *args):
    code = main(["mediator", *args])
    return code, capsys.readouterr().err


LOCAL = ["--batch", "127.0.0.1:0"]


@pytest.mark.parametrize(
    "args, message",
    [
        ([], "no nodes"),
        (["--node", "n1"], "--node 'n1': expected NAME=ADDR"),
        (["--node", "n1=10.9.1.300", "--api", "127.0.0.1:0", "--token", "t", "--no-firewall"], "bad node address"),
        (["--node", "n1=10.9.1.2", "--token", "t", "--no-firewall"], "--api HOST:PORT is needed"),
        (["--node", "n1=10.9.1.2", "--api", "nowhere", "--token", "t"], "--api 'nowhere': expected HOST:PORT"),
        (["--node", "n1=10.9.1.2", "--api", "127.0.0.1:0", "--token", "", "--no-firewall"], "non-empty token"),
        (["--run", "no-such-run-xyz", "--token", "t"], "no-such-run-xyz"),
    ],
)
def test_bad_input(capsys, args, message):
    code, err = mediator(capsys, *args, *LOCAL)
    assert code == 254 and message in err, err


def test_busy_port(capsys):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        code, err = mediator(capsys, "--node", "n1=10.9.1.2", "--api", f"127.0.0.1:{port}", "--token", "t",
                             "--no-firewall", *LOCAL)
    assert code == 254 and "cannot listen" in err, err
