"""The mediator's HTTP API under malformed input (see api_fuzz.py for what is sent and how
it is judged): Hypothesis-driven requests to every route of a real Mediator on loopback,
no firewall; then the body limit and slow clients, by example. `bench/bench_api_fuzz.py`
runs the same requests at volume."""

from __future__ import annotations

import socket
import threading
import time

import pytest
from hypothesis import HealthCheck, given, settings

from mallory.mediator.api import MAX_BODY, TOKEN_HEADER
from mallory.mediator.service import Mediator
from tests.unit.mediator.api_fuzz import (
    STATUS_REQUEST,
    TOKEN,
    Request,
    StateProbe,
    exchange,
    fuzz_mediator,
    judge,
    reason_of,
    requests,
    served_routes,
)

ROUTES = served_routes()


@pytest.fixture(scope="module")
def target(tmp_path_factory):
    m = fuzz_mediator(tmp_path_factory.mktemp("fuzz"))
    m.api.request_timeout = 2.0
    probe = StateProbe(m)
    yield m, probe
    m.stop()


def address(m: Mediator) -> tuple[str, int]:
    return m.api.server_address[:2]


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(request=requests(ROUTES))
def test_every_request_gets_a_4xx_with_a_reason_or_an_answer_and_rejections_change_nothing(target, request):
    m, probe = target
    before = probe.snapshot()
    answer, follow_up = exchange(address(m), request, timeout=5.0)
    problems = judge(answer, follow_up, before, probe.snapshot())
    assert not problems, (request.describe(), problems)


def test_after_the_fuzz_the_mediator_still_serves_and_met_no_bug(target):
    m, _ = target
    answer, _ = exchange(address(m), Request(STATUS_REQUEST))
    assert answer.status == 200
    assert m.api.bugs == 0
    assert all(t.is_alive() for t in (m.api._thread, m._ticker))


@pytest.fixture
def mediator(tmp_path):
    m = fuzz_mediator(tmp_path)
    yield m
    m.stop()


def post(body: bytes) -> Request:
    head = (f"POST /test/end HTTP/1.1\r\n{TOKEN_HEADER}: {TOKEN}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n").encode()
    return Request(head, body, follow_up=True)


def padded(size: int) -> bytes:
    return b'{"pad": "' + b"a" * (size - 11) + b'"}'


def test_the_body_limit_holds_and_the_connection_is_not_misread(mediator):
    at_limit, over = padded(MAX_BODY), padded(MAX_BODY + 1)
    assert len(at_limit) == MAX_BODY and len(over) == MAX_BODY + 1
    answer, follow_up = exchange(address(mediator), post(at_limit))
    assert answer.status == 200 and follow_up is not None and follow_up.status == 200
    answer, follow_up = exchange(address(mediator), post(over))
    assert answer.status == 413 and "larger than" in reason_of(answer)
    assert answer.headers["connection"] == "close" and follow_up is None  # its unread body is not a request


def slow_client(m: Mediator, sent: bytes) -> socket.socket:
    sock = socket.create_connection(address(m), timeout=5)
    sock.sendall(sent)
    return sock


def still_open(sock: socket.socket) -> bool:
    sock.setblocking(False)
    try:
        return sock.recv(1, socket.MSG_PEEK) != b""
    except BlockingIOError:
        return True
    finally:
        sock.setblocking(True)


def test_slow_clients_hold_only_their_own_connection_until_the_timeout(mediator):
    mediator.api.request_timeout = 2.0
    partial_head = b"POST /test/end HTTP/1.1\r\n" + f"{TOKEN_HEADER}: {TOKEN}\r\n".encode()
    partial_body = partial_head + b"Content-Length: 100\r\n\r\n" + b'{"pa'
    slow = [slow_client(mediator, b"GE") for _ in range(10)] + [slow_client(mediator, partial_head) for _ in range(10)]
    slow += [slow_client(mediator, partial_body) for _ in range(10)]
    t0 = time.monotonic()
    served = [exchange(address(mediator), Request(STATUS_REQUEST))[0].status for _ in range(20)]
    assert served == [200] * 20
    assert time.monotonic() - t0 < 2.0 and all(map(still_open, slow)), "others were served while the slow ones waited"
    answers: list[bytes] = []

    def read_all(sock: socket.socket) -> None:
        data = b""
        while chunk := sock.recv(4096):
            data += chunk
        answers.append(data)

    readers = [threading.Thread(target=read_all, args=(s,)) for s in slow]
    for r in readers:
        r.start()
    for r in readers:
        r.join(10)
    assert len(answers) == 30, "the server let go of every slow client after its timeout"
    timed_out = [a for a in answers if a.startswith(b"HTTP/1.1 408")]
    assert len(timed_out) == 10 and all(b"body not received within 2 s" in a for a in timed_out)
    assert answers.count(b"") == 20  # no request yet: the connection is simply closed
    for s in slow:
        s.close()
    assert mediator.api.bugs == 0
