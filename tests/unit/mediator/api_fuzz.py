"""Requests to the mediator's HTTP API, well-formed and not, as bytes on the wire: the
Hypothesis strategies, a raw client that sends them as they are, and the judgement of each
exchange. Shared by the fuzz test (test_api_fuzz.py) and the bench (bench/bench_api_fuzz.py).

A request is drawn in layers, each mostly right so the next one is reached: the request
line (a route, an unknown path, a method the API does not serve, a broken line), the
headers (the token right, wrong, missing; JSON or EDN; junk headers), the body (shaped for
its route with values of the right or a wrong type, unknown fields, raw bytes, deep
nesting) and its framing (exact, cut short, no length, chunked, an oversized or malformed
length, a GET with a body). Some requests are followed on the same connection by a plain
GET /status: a body the server did not read must never be taken for that request.

The judgement: every request gets a status line; no 5xx; a rejection is a 4xx whose body
is a map with a non-empty "error"; and a rejected request leaves the mediator's state as
it was (`StateProbe`).
"""

from __future__ import annotations

import json
import socket
import struct
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import orjson
from hypothesis import strategies as st

from mallory.history.edn import Keyword, dumps, loads
from mallory.learner.learner import Learner
from mallory.mediator.advisor import Advisor
from mallory.mediator.api import MAX_BODY, TOKEN_HEADER, ApiServer
from mallory.mediator.service import Mediator

NODES = {"n1": "10.9.1.2", "n2": "10.9.2.2", "n3": "10.9.3.2"}
TOKEN = "fuzz-token"
UNKNOWN_PATHS = ["/", "/nope", "/status/", "/firewall", "/firewall/drop/x", "/STATUS", "/advisor", "//status",
                 "/status%00", "/../status", "/test/start?x=1#y", "*"]
#: every field a route reads, so shaped bodies reach the checks behind the first one
FIELDS = ["name", "process", "type", "f", "ops", "links", "partition", "ms", "copies", "start_ns", "end_ns",
          "wait_ms", "abstraction", "actions", "value"]


def served_routes() -> list[tuple[str, str]]:
    """The (method, path) pairs the API serves, from a throwaway server."""
    server = ApiServer(("127.0.0.1", 0), TOKEN, None)  # type: ignore[arg-type]  # routes are not called
    server.server_close()
    return sorted(server.routes)


def fuzz_mediator(record_dir: Path) -> Mediator:
    """A started mediator on loopback without a firewall, with an advisor (so /advisor/* do
    more than refuse), whose windows never wait: a valid /window may ask for a minute."""
    m = Mediator(NODES, token=TOKEN, api_address=("127.0.0.1", 0), batch_address=("127.0.0.1", 0),
                 record_dir=record_dir, batch_interval=0.02)
    window = m.windows.window
    m.windows.window = lambda start, end, wait_s, *rest: window(start, end, 0.0, *rest)
    m.advisor = Advisor(m.windows, Learner.create(policy="random", seed=1), wait_s=0.0)
    return m.start()


@dataclass(frozen=True)
class Request:
    """What the client sends: `head` (request line and headers, CRLF-terminated), then
    `body`; `half_close`: shut the sending side after it (a client that stops short);
    `follow_up`: then send a plain GET /status on the same connection."""

    head: bytes
    body: bytes = b""
    half_close: bool = False
    follow_up: bool = False

    def describe(self) -> str:
        return f"{self.head[:200]!r} + {len(self.body)} body bytes{' (half-closed)' if self.half_close else ''}"


@dataclass
class Answer:
    status: int | None  # None: no status line came back
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""
    problem: str = ""  # why there is no answer (connection reset, timeout, unparsable)


# -- strategies -------------------------------------------------------------------------------
# Every strategy that does not depend on what was drawn is built once, here: Hypothesis
# caches few of them (none over a list), and building and validating one per draw cost
# about as much as the draw itself. (A strategy's label is its structure, not its
# identity, so what is drawn is the same.)


@cache
def one_in(n: int) -> st.SearchStrategy[bool]:
    """True about once in `n` draws. (Hypothesis favours the simplest value, index 0 or the
    integer 0, well beyond its share: the rare case must not be that one.)"""
    return st.sampled_from([False] * (n - 1) + [True])


_links = st.lists(
    st.one_of(
        st.sampled_from(["n1->n2", "n2->n1", "n1->n3", "n3->n2", "n1->n1", "n1->n9", "n1=>n2", " n2 -> n3 ", "->", ""]),
        st.lists(st.sampled_from(["n1", "n2", "n3", "n9", ""]), min_size=2, max_size=2),
    ),
    max_size=5,
)
_scalars = st.one_of(
    st.none(), st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.sampled_from([0, -1, 1, 2**63 - 1, 2**63, 2**64, 60_000, 60_001, 16, 17]),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=40), st.text(min_size=60, max_size=300),
)
_values = st.recursive(_scalars, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                         st.dictionaries(st.text(max_size=8), inner, max_size=4)),
                       max_leaves=12)
_client_op = st.fixed_dictionaries(
    {"process": st.one_of(st.integers(0, 10), _scalars), "type": st.sampled_from(["invoke", "ok", "fail", "info", "maybe"]),
     "f": st.one_of(st.sampled_from(["read", "write", "cas"]), _scalars)})
#: plausible values per field, so a body passes one check and meets the next
_PLAUSIBLE: dict[str, st.SearchStrategy] = {
    "name": st.one_of(st.sampled_from(["t1", "x" * 128, "x" * 129, ""]), st.text(max_size=20)),
    "process": st.integers(-2, 2**64),
    "type": st.sampled_from(["invoke", "ok", "fail", "info", "maybe"]),
    "f": st.sampled_from(["read", "write", "", "x" * 65]),
    "ops": st.lists(st.one_of(_client_op, _scalars), max_size=4),
    "links": _links,
    "partition": st.lists(st.lists(st.sampled_from(["n1", "n2", "n3", "n9"]), max_size=3), max_size=3),
    "ms": st.one_of(st.integers(-1, 70_000), st.floats(-1, 70_000)),
    "copies": st.integers(-1, 20),
    "start_ns": st.integers(-(2**64), 2**64),
    "end_ns": st.integers(-(2**64), 2**64),
    "wait_ms": st.one_of(st.integers(-1, 70_000), st.floats(-1, 70_000)),
    "abstraction": st.sampled_from(["event-history", "code-history", "nope", ""]),
    "actions": st.lists(st.sampled_from(["kill:one", "partition:majority", "", "kill:one", "x" * 129]), max_size=4),
    "value": _values,
}


_good_links = st.lists(st.sampled_from(["n1->n2", "n2->n1", "n1->n3", "n3->n1", "n2->n3", "n3->n2"]),
                       min_size=1, max_size=3)
_good_op = st.fixed_dictionaries({"process": st.integers(0, 2**63 - 1), "f": st.sampled_from(["read", "write"]),
                                  "type": st.sampled_from(["invoke", "ok", "fail", "info"])})
#: a body each route takes, so requests also reach what happens after the checks
_GOOD: dict[str, st.SearchStrategy] = {
    "/test/start": st.fixed_dictionaries({"name": st.text(min_size=1, max_size=20)}),
    "/test/end": st.just({}),
    "/client": _good_op,
    "/client/batch": st.fixed_dictionaries({"ops": st.lists(_good_op, min_size=1, max_size=5)}),
    "/firewall/drop": st.one_of(st.fixed_dictionaries({"links": _good_links}),
                                st.just({"partition": [["n1"], ["n2", "n3"]]})),
    "/firewall/heal": st.one_of(st.just({}), st.fixed_dictionaries({"links": _good_links})),
    "/firewall/delay": st.fixed_dictionaries({"links": _good_links, "ms": st.integers(0, 100)}),
    "/firewall/duplicate": st.fixed_dictionaries({"links": _good_links, "copies": st.integers(0, 3)}),
    "/window": st.fixed_dictionaries({"start_ns": st.integers(0, 2**62), "end_ns": st.integers(2**62, 2**63),
                                      "wait_ms": st.just(0)}),
    "/advisor/catalogue": st.fixed_dictionaries({"actions": st.lists(
        st.sampled_from(["kill:one", "partition:majority", "pause:one", "noop"]), min_size=1, unique=True)}),
    "/advisor/next": st.just({}),
    "/nemesis": st.fixed_dictionaries({"f": st.sampled_from(["start-partition", "stop-partition", "kill"])}),
}
_no_body = st.just({})
_field_names = st.lists(st.sampled_from(FIELDS), max_size=4, unique=True)
_field_values = {name: st.one_of(plausible, _values) for name, plausible in _PLAUSIBLE.items()}
_unknown_fields = st.dictionaries(st.text(max_size=10), _values, max_size=2)


@st.composite
def bodies(draw: st.DrawFn) -> dict[str, Any]:
    """A body shaped like a route's: known fields with plausible or arbitrary values, and
    sometimes unknown fields."""
    body: dict[str, Any] = {}
    for name in draw(_field_names):
        body[name] = draw(_field_values[name])
    if draw(st.booleans()):
        body.update(draw(_unknown_fields))
    return body


_bodies = bodies()


def _edn_key(name: str) -> Any:
    keyword = name.replace("_", "-")
    return Keyword(keyword) if keyword and keyword[0].isalpha() and keyword.isascii() and " " not in keyword else name


def to_edn(value: Any) -> bytes | None:
    """`value` as the EDN the Jepsen bridge would send (keys as keywords); None when EDN
    cannot say it."""
    def convert(v: Any) -> Any:
        if isinstance(v, dict):
            return {_edn_key(k): convert(x) for k, x in v.items()}
        if isinstance(v, list):
            return [convert(x) for x in v]
        return v

    try:
        return dumps(convert(value)).encode()
    except (TypeError, ValueError):
        return None


_payload_kinds = st.sampled_from(["json", "json", "edn", "edn", "good json", "good edn", "raw", "empty", "deep", "huge"])
_edn_types = st.sampled_from(["application/edn", "application/EDN; charset=utf-8"])
_raw_types = st.sampled_from([None, "application/json", "application/edn", "text/plain"])
_empty_types = st.sampled_from([None, "application/json", "application/edn"])
_huge_offsets = st.sampled_from([-1, 0, 1])


@st.composite
def payloads(draw: st.DrawFn, path: str) -> tuple[bytes, str | None]:
    """(body bytes, Content-Type) of a request to `path`."""
    kind = draw(_payload_kinds)
    if kind in ("json", "edn", "good json", "good edn"):
        body = draw(_GOOD.get(path, _no_body) if kind.startswith("good") else _bodies)
        data = to_edn(body) if kind.endswith("edn") else None
        if data is None:  # JSON asked for, or EDN cannot say every value
            data = json.dumps(body).encode()  # not orjson: it refuses integers beyond 64 bits
            ctype = "application/json"
        else:
            ctype = draw(_edn_types)
        if draw(one_in(10)):  # a cut encoding
            data = data[: draw(st.integers(0, max(0, len(data) - 1)))]
        return data, ctype
    if kind == "raw":
        return draw(st.binary(max_size=200)), draw(_raw_types)
    if kind == "empty":
        return b"", draw(_empty_types)
    if kind == "deep":
        depth = draw(st.integers(60, 3000))
        if draw(st.booleans()):
            return b'{"name": ' + b"[" * depth + b"]" * depth + b"}", "application/json"
        return b"{:name " + b"{:a " * depth + b"1" + b"}" * depth + b"}", "application/edn"
    # huge: a real body at or just over the limit (a JSON string field padding it out)
    size = MAX_BODY + draw(_huge_offsets)
    head = b'{"pad": "'
    return head + b"a" * (size - len(head) - 2) + b'"}', "application/json"


_payloads = cache(payloads)
_twists = st.sampled_from(["none"] * 17 + ["method", "path", "swap"])
_unserved_methods = st.sampled_from(["PUT", "DELETE", "HEAD", "PATCH", "OPTIONS", "CONNECT", "get", "GETS"])
_unknown_paths = st.sampled_from(UNKNOWN_PATHS)
_versions = st.sampled_from([b"HTTP/1.0", b"HTTP/2.0", b"HTTP/1.1.1", b"HTTX/1.1", b"HTTP/9", b""])
_broken_lines = st.sampled_from([b"", b"GET", b"GET  /status HTTP/1.1 x", b"\x00\xff", b"GET /" + b"a" * 70_000 + b" HTTP/1.1"])
_tokens = st.sampled_from(["right"] * 15 + ["missing", "wrong", "empty", "long", "latin1"])
_TOKEN_VALUES = {"right": TOKEN.encode(), "wrong": b"fuzz-tokem", "empty": b"", "long": b"t" * 70_000,
                 "latin1": "fuzz-tokén".encode("latin-1")}
_junk_counts = st.sampled_from([0, 0, 0, 1, 2])
_junk_headers = st.sampled_from([(b"X-Junk", b"1"), (b"Expect", b"100-continue"), (b"Connection", b"close"),
                                 (b"Broken header line", b""), (b"X-Many", b"x" * 9000)])
_framings = st.sampled_from(["exact"] * 10 + ["short", "none", "chunked", "declared-huge", "bad-length", "two-lengths"])
_bad_lengths = st.sampled_from([b"-1", b"12abc", b"\xb2", b" ", b"0x10", b"1e3"])


def requests(routes: list[tuple[str, str]]) -> st.SearchStrategy[Request]:
    """One request to a server serving `routes` ((method, path) pairs)."""
    return _requests(st.sampled_from(routes))


@st.composite
def _requests(draw: st.DrawFn, routes: st.SearchStrategy[tuple[str, str]]) -> Request:
    method, path = draw(routes)
    twist = draw(_twists)
    if twist == "method":
        method = draw(_unserved_methods)
    elif twist == "path":
        path = draw(_unknown_paths)
    elif twist == "swap":
        method = "GET" if method == "POST" else "POST"
    version = b"HTTP/1.1"
    if draw(one_in(30)):
        version = draw(_versions)
    line = method.encode() + b" " + path.encode() + (b" " + version if version else b"")
    if draw(one_in(50)):  # a broken request line
        line = draw(_broken_lines)

    headers: list[tuple[bytes, bytes]] = []
    token = draw(_tokens)
    if token != "missing":
        headers.append((TOKEN_HEADER.encode(), _TOKEN_VALUES[token]))
    body, ctype = draw(_payloads(path)) if method == "POST" or draw(one_in(10)) else (b"", None)
    if ctype is not None:
        headers.append((b"Content-Type", ctype.encode()))
    if draw(one_in(5)):
        headers.append((b"Accept", b"application/edn"))
    for _ in range(draw(_junk_counts)):
        headers.append(draw(_junk_headers))
    if draw(one_in(100)):
        headers += [(b"X-H%d" % i, b"1") for i in range(120)]  # beyond the parser's 100

    framing = draw(_framings)
    half_close = False
    if framing == "exact":
        headers.append((b"Content-Length", str(len(body)).encode()))
    elif framing == "short" and body:
        headers.append((b"Content-Length", str(len(body)).encode()))
        body = body[: draw(st.integers(0, len(body) - 1))]
        half_close = True
    elif framing == "chunked":
        headers.append((b"Transfer-Encoding", b"chunked"))
        body = b"%x\r\n" % len(body) + body + b"\r\n0\r\n\r\n" if body else b"0\r\n\r\n"
    elif framing == "declared-huge":
        headers.append((b"Content-Length", str(MAX_BODY + draw(st.integers(1, 2**40))).encode()))
        body = b""
    elif framing == "bad-length":
        headers.append((b"Content-Length", draw(_bad_lengths)))
    elif framing == "two-lengths":
        headers += [(b"Content-Length", str(len(body)).encode()), (b"Content-Length", b"0")]
    head = line + b"\r\n" + b"".join(k + (b": " + v if k != b"Broken header line" else b"") + b"\r\n"
                                     for k, v in headers) + b"\r\n"
    # A body sent without a length is, by HTTP's rules, the next request: no follow-up then.
    unframed = framing == "none" and bool(body)
    return Request(head, body, half_close, follow_up=not (half_close or unframed) and draw(one_in(4)))


# -- the client -------------------------------------------------------------------------------

STATUS_REQUEST = f"GET /status HTTP/1.1\r\nHost: x\r\n{TOKEN_HEADER}: {TOKEN}\r\n\r\n".encode()


def _read_answer(sock: socket.socket, buffered: bytearray) -> Answer:
    """One answer: status line, headers, Content-Length body (an interim 1xx is skipped).
    Bytes past it stay buffered."""
    answer = _read_one(sock, buffered)
    while answer.status is not None and 100 <= answer.status < 200:
        answer = _read_one(sock, buffered)
    return answer


def _read_one(sock: socket.socket, buffered: bytearray) -> Answer:
    while b"\r\n\r\n" not in buffered:
        chunk = sock.recv(65536)
        if not chunk:
            return Answer(None, problem="connection closed without an answer" + (f" ({bytes(buffered[:80])!r})"
                                                                                  if buffered else ""))
        buffered += chunk
    head, _, rest = bytes(buffered).partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ", 2)
    if len(parts) < 2 or not parts[0].startswith("HTTP/") or not parts[1].isdigit():
        return Answer(None, problem=f"not a status line: {lines[0][:80]!r}")
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    length = int(headers.get("content-length", "0"))
    body = bytearray(rest)
    while len(body) < length:
        chunk = sock.recv(65536)
        if not chunk:
            return Answer(int(parts[1]), headers, bytes(body), "body cut short")
        body += chunk
    buffered[:] = body[length:]
    return Answer(int(parts[1]), headers, bytes(body[:length]))


def exchange(address: tuple[str, int], request: Request, timeout: float = 10.0) -> tuple[Answer, Answer | None]:
    """Send `request` on a new connection; its answer, and the follow-up's when asked for
    and the server kept the connection open (else None)."""
    sock = socket.create_connection(address, timeout=timeout)
    # Close with a reset: no TIME_WAIT on our side, so a million requests do not run out of ports.
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    try:
        try:
            sock.sendall(request.head + request.body)
            if request.half_close:
                sock.shutdown(socket.SHUT_WR)
        except (BrokenPipeError, ConnectionResetError, TimeoutError):
            pass  # the server answered before taking it all (and closed): read what it said
        buffered = bytearray()
        try:
            answer = _read_answer(sock, buffered)
        except TimeoutError:
            return Answer(None, problem=f"no answer within {timeout:g} s"), None
        except ConnectionResetError:
            return Answer(None, problem="connection reset without an answer"), None
        if not request.follow_up or answer.status is None or answer.headers.get("connection") == "close":
            return answer, None
        try:
            sock.sendall(STATUS_REQUEST)
            return answer, _read_answer(sock, buffered)
        except (OSError, TimeoutError) as exc:
            return answer, Answer(None, problem=f"follow-up: {type(exc).__name__}")
    finally:
        sock.close()


# -- the judgement -----------------------------------------------------------------------------


class StateProbe:
    """What a request may change in a mediator, as one comparable value: the test, the
    rules, the firewall's changes, the events it emitted, the windows served and the
    advisor's catalogue and learner. (Counters of rejections and traffic are not state.)
    Wraps `mediator.emit` to count emitted events."""

    def __init__(self, mediator: Mediator) -> None:
        self.m = mediator
        self.emitted = 0
        emit = mediator.emit

        def counting_emit(*args: Any) -> None:
            self.emitted += 1
            emit(*args)

        mediator.emit = counting_emit  # type: ignore[method-assign]

    def snapshot(self) -> tuple:
        m, advisor = self.m, self.m.advisor
        learner = None if advisor is None else (tuple(advisor.actions), advisor.requests, advisor.late,
                                                len(advisor.learner.store), advisor._last_ns)
        return (m.test, m.tests_run, m.firewall.rule_changes, orjson.dumps(m.firewall.table.to_json()), self.emitted,
                m.windows.served, learner)


def reason_of(answer: Answer) -> str | None:
    """The "error" of a rejection's body (JSON or EDN by its Content-Type), None if absent."""
    try:
        if "edn" in answer.headers.get("content-type", ""):
            payload = loads(answer.body.decode())
        else:
            payload = orjson.loads(answer.body)
    except Exception:
        return None
    reason = payload.get("error") if isinstance(payload, dict) else None
    return reason if isinstance(reason, str) and reason.strip() else None


def judge(answer: Answer, follow_up: Answer | None, before: tuple, after: tuple) -> list[str]:
    """What is wrong with one exchange (empty: nothing)."""
    if answer.status is None:
        return [f"no answer: {answer.problem}"]
    problems = []
    if answer.status >= 500:
        problems.append(f"{answer.status}: {answer.body[:200]!r}")
    elif answer.status >= 400:
        if reason_of(answer) is None:
            problems.append(f"{answer.status} without a reason: {answer.body[:200]!r}")
        if before != after:
            problems.append(f"{answer.status} changed the state: {before} -> {after}")
    if follow_up is not None and follow_up.status != 200:
        problems.append(f"the next request on the connection got {follow_up.status} {follow_up.problem}"
                        f"{follow_up.body[:120]!r}")
    return problems
