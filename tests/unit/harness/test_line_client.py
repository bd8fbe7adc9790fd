"""The line client's mapping of replies to completions, against a fake line server (a
scripted socket server in a thread) on loopback addresses: redirects are followed, an
unreachable leader is a fail and the next op goes back to the client's own node, UNKNOWN
and timeouts are info."""

from __future__ import annotations

import socket
import threading
from typing import Callable

import pytest

from mallory.harness.line_client import LineClient
from mallory.history.edn import Keyword
from tests.live.example_sut.example_cluster import free_port


class FakeLineServer:
    """Answers each request line with answer(line) (None: never answer); records requests."""

    def __init__(self, host: str, port: int, answer: Callable[[str], str | None]) -> None:
        self.requests: list[str] = []
        self.answer = answer
        self.sock = socket.create_server((host, port))
        self.sock.settimeout(0.1)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            threading.Thread(target=self._talk, args=(conn,), daemon=True).start()

    def _talk(self, conn: socket.socket) -> None:
        with conn, conn.makefile("rw") as f:
            for line in f:
                self.requests.append(line.strip())
                reply = self.answer(line.strip())
                if reply is not None:
                    f.write(reply + "\n")
                    f.flush()

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
        self.sock.close()


@pytest.fixture
def port() -> int:
    return free_port()


def test_replies_become_completions(port: int) -> None:
    replies = {"GET 0": "OK 3", "PUT 0 4": "OK", "CAS 0 1 2": "FAIL mismatch", "CAS 0 4 5": "UNKNOWN stepped-down",
               "GET 1": "OK nil", "PUT 1 9": "ERR bad-request"}
    server = FakeLineServer("127.0.0.1", port, replies.get)
    client = LineClient("127.0.0.1", port, "register", timeout=0.5)
    try:
        client.open()
        assert client.invoke({"f": "read", "value": None}).value == 3
        assert client.invoke({"f": "write", "value": 4}).type == "ok"
        done = client.invoke({"f": "cas", "value": [1, 2]})
        assert (done.type, done.error) == ("fail", [Keyword("cas-mismatch"), "mismatch"])
        assert client.invoke({"f": "cas", "value": [4, 5]}).type == "info"
        independent = LineClient("127.0.0.1", port, "register", independent=True, timeout=0.5)
        independent.open()
        assert independent.invoke({"f": "read", "value": [1, None]}).value == [1, None]
        assert independent.invoke({"f": "write", "value": [1, 9]}).type == "fail"
        independent.close()
        done = client.invoke({"f": "read", "value": None})  # GET 0 again: fine
        assert done.type == "ok"
    finally:
        client.close()
        server.close()


def test_redirects_and_timeouts(port: int) -> None:
    follower = FakeLineServer("127.0.0.2", port, lambda line: "ERR not-leader 127.0.0.3")
    leader = FakeLineServer("127.0.0.3", port, lambda line: None if line == "GET 0" else "OK")
    client = LineClient("127.0.0.2", port, "register", timeout=0.3)
    try:
        client.open()
        assert client.invoke({"f": "write", "value": 1}).type == "ok"  # followed the hint
        assert leader.requests == ["PUT 0 1"] and follower.requests == ["PUT 0 1"]
        done = client.invoke({"f": "read", "value": None})
        assert (done.type, done.error) == ("info", Keyword("timeout"))  # sent, never answered
        leader.close()  # the hinted leader is gone: a fail (nothing applied) ...
        client.open()
        done = client.invoke({"f": "write", "value": 2})
        assert done.type == "fail" and done.error[0] == Keyword("not-leader")
        assert client.invoke({"f": "write", "value": 3}).type == "fail"  # ... and the next op asks its own node again
        assert follower.requests[-2:] == ["PUT 0 2", "PUT 0 3"]
    finally:
        client.close()
        follower.close()


def test_not_leader_without_a_hint_is_a_fail(port: int) -> None:
    server = FakeLineServer("127.0.0.1", port, lambda line: "ERR not-leader -")
    client = LineClient("127.0.0.1", port, "register", timeout=0.5)
    try:
        client.open()
        done = client.invoke({"f": "write", "value": 1})
        assert (done.type, done.error) == ("fail", Keyword("not-leader"))
    finally:
        client.close()
        server.close()
