"""The mediator's HTTP API (stdlib ThreadingHTTPServer, JSON in and out).

Every request carries the shared token in the `X-Mallory-Token` header. Requests are
checked before anything changes: a malformed one gets a 4xx and {"error": reason}, is
counted (`api_rejected`), and the mediator keeps running.

    GET  /status                       test, nodes, rules, counters (everything below)
    GET  /metrics                      counters only (windows served/incomplete/truncated, entries
                                       late/dropped/retained: "windows"; the process's memory and
                                       its tables' sizes: "memory", mediator/memory.py)
    POST /test/start   {"name": "t1"}
    POST /test/end     {}               heals every rule (no fault outlives a test)
    POST /client       {"process": 3, "type": "invoke"|"ok"|"fail"|"info", "f": "write"}
    POST /client/batch {"ops": [CLIENT_OP, ...]}   1..1000 ops as for /client, all checked first
    POST /firewall/drop       {"links": LINKS} or {"partition": [["n1"], ["n2", "n3"]]}
    POST /firewall/heal       {"links": LINKS} or {} for every link
    POST /firewall/delay      {"links": LINKS, "ms": 50}
    POST /firewall/duplicate  {"links": LINKS, "copies": 1}
    POST /window       {"start_ns": T0, "end_ns": T1, "wait_ms": 1000, "abstraction": "event-history"}
                       the timeline's summary of [T0, T1) once complete (or "complete": false;
                       "truncated": true too when the mediator's bounded buffer dropped part of it);
                       with "trace": [TYPE, ...] (at most MAX_TRACE_TYPES) and optionally
                       "trace_from_ns": T (<= T0), also the [node, type] of those events in
                       [T, T1), in causal order (windows.trace_of)
    POST /advisor/catalogue {"actions": ["partition:majority", "kill:one", ...]}   (Jepsen-driven mode)
    POST /advisor/next      {}   the learner's next fault, judged on the window since the last ask
    POST /nemesis      {"f": "start-partition", "value": ...}   a fault the harness enacted: a FAULT event
    GET  /scenario     the scenario's run so far: ended, passed, state, the states it went
                       through, reason, the path's lines, per link and message type what
                       became of the messages (409 for a mediator started without --scenario)
    GET  /filters      the filter sets (name -> the roles it names), the one in force
                       ("active", null for none) with its "roles" and its account so far
                       ("current": per link and message type what became of the messages),
                       "activations" (409 for a mediator started without --filter-sets)
    POST /filters      {"set": "NAME", "roles": {"leader": "n1", ...}} puts a filter set in
                       force (ending the one in force), {"set": null} none; answers the set now
                       in force, its roles, and "ended": the ended set's account (null if
                       none was) with "released", the messages its sets held, now delivered.
                       400 for a body of the wrong shape; 422 for an unknown set or role, a
                       role the set does not name, a node not of the cluster; 409 as GET.
                       A refused request changes nothing. Roles: mallory/scenario/roles.py

LINKS is a list of "n1->n2" strings or ["n1", "n2"] pairs (directed). Firewall answers
say which links changed, how many held packets the change released or dropped, for a
heal how many packets each healed rule acted on (`affected`), and `applied_us`, the time
the change took to take effect. /status lists the rules with their `affected` so far.

EDN instead of JSON (the Clojure Jepsen bridge): send `Content-Type: application/edn`
and/or `Accept: application/edn`; same routes, same checks (see edn_api.py).

Whatever a client sends, the answer is a status line and a JSON (or EDN) body; every
rejection is a 4xx with {"error": reason} (reasons are clipped to MAX_REASON characters),
and 5xx means a bug of ours. That includes what the stdlib's HTTP parser refuses: a bad
request line (400), an unknown method (405 here, not 501), an unsupported HTTP version
(400, not 505), too long a line or too many headers (414, 431). A body is at most MAX_BODY
bytes, with a Content-Length (411 without one: chunked bodies are refused) that the bytes
sent must reach (400 when the client stops short). A connection waits at most
`request_timeout` seconds for each read (408 while a body is awaited): a slow client holds
its own thread, never the server. A connection whose request body was not read in full is
closed after the answer, so its leftover bytes are never taken for a next request.
Checks run in this order: headers, token (401), route (404; the query and a fragment are
ignored), body, then the route's own fields. A GET's body needs a Content-Length: bytes sent
without one are, as HTTP/1.1 says, the start of the next request.
"""

from __future__ import annotations

import hmac
import reprlib
import socket
import sys
import threading
import time
import traceback
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any, Protocol

import orjson

from mallory.errors import MalloryError
from mallory.mediator import edn_api
from mallory.mediator.windows import Window

if TYPE_CHECKING:  # the advisor's learner brings numpy, datasketch and scipy: only --advisor loads it
    from mallory.mediator.advisor import Advisor

TOKEN_HEADER = "X-Mallory-Token"
MAX_BODY = 1 << 20
MAX_REASON = 300  # characters of a rejection's reason (it may quote what was sent)
REQUEST_TIMEOUT_S = 10.0  # per read of a connection
LINGER_S = 1.0  # at most this long, a closing connection drains what the client still sends
CLIENT_TYPES = ("invoke", "ok", "fail", "info")
MAX_CLIENT_BATCH = 1000
MAX_PROCESS = (1 << 63) - 1  # client process ids: the recording's ids are 64-bit (Java longs)
MAX_TEST_NAME = 128
MAX_TRACE_TYPES = 1000
#: The stdlib parser's own rejections and what they mean here: the request is at fault.
_PARSER_STATUS = {HTTPStatus.NOT_IMPLEMENTED: HTTPStatus.METHOD_NOT_ALLOWED,
                  HTTPStatus.HTTP_VERSION_NOT_SUPPORTED: HTTPStatus.BAD_REQUEST}


Link = tuple[str, str]


class Gateway(Protocol):
    """What the API serves (the mediator, service.Mediator, implements it). Every call gets
    arguments the API has already checked; a MalloryError it raises is the caller's
    mistake (422 with its message), anything else a bug (500)."""

    advisor: Advisor | None  # Jepsen-driven mode's learner, or None (409 on /advisor/*)

    def status(self) -> dict: ...
    def metrics(self) -> dict: ...
    def test_start(self, name: str) -> dict: ...
    def test_end(self) -> dict: ...
    def client_op(self, process: int, kind: str, f: str) -> dict: ...
    def fault_reported(self, f: str) -> dict: ...

    def scenario(self) -> dict | None:
        """The scenario's run so far; None when the mediator runs none."""
        ...

    def filter_sets(self) -> dict | None:
        """The filter sets' state; None when the mediator has none."""
        ...

    def switch_filters(self, name: str | None, roles: dict[str, str]) -> dict:
        """Put a filter set in force (None: none); MalloryError for an unknown one."""
        ...

    def partition_links(self, groups: list[list[str]]) -> list[Link]:
        """The directed links between nodes of different groups."""
        ...

    def drop(self, links: list[Link]) -> dict: ...
    def heal(self, links: list[Link] | None) -> dict: ...
    def delay(self, links: list[Link], delay_ns: int) -> dict: ...
    def duplicate(self, links: list[Link], copies: int) -> dict: ...

    def window(self, start_ns: int, end_ns: int, wait_s: float, abstraction: str,
               trace: frozenset[str] = frozenset(), trace_from_ns: int | None = None) -> Window:
        """The timeline's summary of [start_ns, end_ns), with the trace of the `trace` types
        from trace_from_ns; ValueError for a bad span or abstraction."""
        ...


class BadRequest(Exception):
    def __init__(self, reason: str, status: HTTPStatus = HTTPStatus.BAD_REQUEST) -> None:
        super().__init__(reason)
        self.reason = reason
        self.status = status


# A body may nest up to orjson's 1024 levels, deeper than repr() can recurse in a handler's
# thread (RecursionError, a 500): quote at most 4 levels and a few items of each.
_BRIEF = reprlib.Repr()
_BRIEF.maxlevel, _BRIEF.maxstring, _BRIEF.maxother = 4, 80, 80


def _brief(value: object) -> str:
    """A value as a reason quotes it: its repr to 4 levels, clipped to 80 characters."""
    text = _BRIEF.repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _field(body: dict, name: str, kind: type, required: bool = True) -> Any:
    if name not in body:
        if required:
            raise BadRequest(f"missing field {name!r}")
        return None
    value = body[name]
    if kind is int and (type(value) is not int):
        raise BadRequest(f"field {name!r} must be an integer, got {_brief(value)}")
    if kind is not int and not isinstance(value, kind):
        raise BadRequest(f"field {name!r} must be {kind.__name__}, got {_brief(value)}")
    return value


def parse_links(value: object) -> list[Link]:
    if type(value) is not list or not value:
        raise BadRequest("'links' must be a non-empty list of \"a->b\" strings or [a, b] pairs")
    links = []
    for item in value:
        if type(item) is str and item.count("->") == 1:
            src, dst = item.split("->")
        elif type(item) is list and len(item) == 2 and all(type(x) is str for x in item):
            src, dst = item
        else:
            raise BadRequest(f"bad link {_brief(item)}: use \"a->b\" or [a, b]")
        links.append((src.strip(), dst.strip()))
    return links


def _client_op(body: dict) -> tuple[int, str, str]:
    """(process, type, f) of one relayed client op, checked."""
    process = _field(body, "process", int)
    kind = _field(body, "type", str)
    f = _field(body, "f", str)
    if not 0 <= process <= MAX_PROCESS:
        raise BadRequest(f"'process' must be non-negative and below 2^63, got {_brief(process)}")
    if kind not in CLIENT_TYPES:
        raise BadRequest(f"'type' must be one of {list(CLIENT_TYPES)}, got {_brief(kind)}")
    if not f or len(f) > 64:
        raise BadRequest("'f' must be a non-empty string of at most 64 characters")
    return process, kind, f


def _test_name(body: dict) -> str:
    name = _field(body, "name", str)
    if not 0 < len(name) <= MAX_TEST_NAME:
        raise BadRequest(f"'name' must be a string of 1..{MAX_TEST_NAME} characters")
    return name


class _Handler(BaseHTTPRequestHandler):
    server: "ApiServer"
    protocol_version = "HTTP/1.1"
    # An answer always has a status line, even to a request line the parser cannot read
    # (the stdlib's default, HTTP/0.9, answers with a bare body).
    default_request_version = "HTTP/1.0"
    # Headers and body go out as two writes; with Nagle on, a keep-alive client (the Jepsen
    # bridge) waits out its delayed ACK (~40 ms) for the body of every answer.
    disable_nagle_algorithm = True
    _edn = False  # set per request: answer in EDN (see edn_api)
    _body_read = True  # set per request: the request's body (if any) was read in full

    def setup(self) -> None:
        self.timeout = self.server.request_timeout  # the socket's, for every read
        super().setup()

    def log_message(self, format: str, *args: Any) -> None:  # quiet: the mediator has metrics
        pass

    def do_GET(self) -> None:
        self._dispatch("GET")

    def do_POST(self) -> None:
        self._dispatch("POST")

    def parse_request(self) -> bool:
        if not self.raw_requestline.strip():  # the stdlib would close without a word
            self.command, self.requestline, self.request_version = None, "", self.default_request_version
            self.send_error(HTTPStatus.BAD_REQUEST, "empty request line")
            return False
        return super().parse_request()

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        """The stdlib parser's rejections, answered like the API's own (see the module
        docstring); the connection is closed, as the parser wants."""
        status = _PARSER_STATUS.get(HTTPStatus(code), HTTPStatus(code))
        reason = message or HTTPStatus(code).phrase
        if code == HTTPStatus.NOT_IMPLEMENTED:
            reason = f"method {_brief(self.command)} is not served; use GET or POST"
        self._edn, self._body_read = False, True  # headers may be unread: JSON, and the connection closes
        self.close_connection = True
        self._reject(status, reason)

    def _dispatch(self, method: str) -> None:
        api = self.server
        edn_body = edn_api.is_edn(self.headers.get("Content-Type"))
        self._edn = edn_body or edn_api.is_edn(self.headers.get("Accept"))
        # Where the next request starts is known once a POST's body is read (a GET has none).
        self._body_read = method != "POST" and not self._declares_body()
        try:
            if self.headers.defects:  # the parser dropped every header after a broken line
                self._body_read = False  # and so where this request ends
                raise BadRequest("malformed header section (a line without a colon?)")
            token = self.headers.get(TOKEN_HEADER, "")
            if not hmac.compare_digest(token.encode(), api.token.encode()):
                raise BadRequest(f"missing or wrong {TOKEN_HEADER} header", HTTPStatus.UNAUTHORIZED)
            # The route first: a request to no route is a 404 whatever its body holds (its body is
            # then left unread, and the connection closed by _reply).
            route = api.routes.get((method, self.path.split("?")[0].split("#")[0]))
            if route is None:
                known = sorted({p for _, p in api.routes})
                raise BadRequest(f"no {method} {self.path[:80]}; paths: {', '.join(known)}", HTTPStatus.NOT_FOUND)
            body = self._body(edn_body) if method == "POST" else {}
            result = route(body)
        except BadRequest as exc:
            self._reject(exc.status, exc.reason)
            return
        except MalloryError as exc:
            self._reject(HTTPStatus.UNPROCESSABLE_ENTITY, str(exc))
            return
        except Exception as exc:  # a bug must not take the API down; say what it was
            api.count_bug(exc)
            self._reply(HTTPStatus.INTERNAL_SERVER_ERROR, {"error": f"{type(exc).__name__}: {exc}"[:MAX_REASON]})
            return
        self._reply(HTTPStatus.OK, result)

    def _reject(self, status: HTTPStatus, reason: str) -> None:
        reason = reason if len(reason) <= MAX_REASON else reason[: MAX_REASON - 3] + "..."
        self.server.count_rejected(reason)
        self._reply(status, {"error": reason})

    def _declares_body(self) -> bool:
        return self.headers.get("Content-Length", "0").strip() != "0" or "Transfer-Encoding" in self.headers

    def _body(self, edn: bool) -> dict:
        if "Transfer-Encoding" in self.headers:
            raise BadRequest("chunked bodies are not taken: send a Content-Length", HTTPStatus.LENGTH_REQUIRED)
        lengths = self.headers.get_all("Content-Length") or []
        if not lengths:
            raise BadRequest("a POST needs a Content-Length", HTTPStatus.LENGTH_REQUIRED)
        if len(lengths) > 1 or not (lengths[0].isascii() and lengths[0].strip().isdigit()):
            raise BadRequest(f"Content-Length must be one number of decimal digits, got {_brief(lengths)}")
        length = int(lengths[0])
        if length > MAX_BODY:
            raise BadRequest(f"body larger than {MAX_BODY} bytes", HTTPStatus.REQUEST_ENTITY_TOO_LARGE)
        try:
            raw = self.rfile.read(length)
        except TimeoutError:
            raise BadRequest(f"body not received within {self.timeout:g} s", HTTPStatus.REQUEST_TIMEOUT) from None
        if len(raw) < length:
            raise BadRequest(f"body ended after {len(raw)} of its {length} bytes")
        self._body_read = True
        if not raw.strip():
            return {}
        if edn:
            try:
                return edn_api.parse_body(raw)
            except edn_api.EdnBodyError as exc:
                raise BadRequest(str(exc)) from None
        try:
            body = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            raise BadRequest(f"body is not JSON: {exc}") from None
        if type(body) is not dict:
            raise BadRequest(f"body must be a JSON object, got {type(body).__name__}")
        return body

    def _reply(self, status: HTTPStatus, payload: object) -> None:
        data = edn_api.render(payload) if self._edn else orjson.dumps(payload)
        if not self._body_read:  # what is left of it must not be read as the next request
            self.close_connection = True
        try:
            self.send_response(status)
            self.send_header("Content-Type", edn_api.EDN_TYPE if self._edn else "application/json")
            self.send_header("Content-Length", str(len(data)))
            if self.close_connection:
                self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.write(data)
        except OSError:  # the client went away: nobody to answer
            self.close_connection = True


class ApiServer(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128  # listen backlog: clients connecting while others hang on are queued, not refused

    def __init__(self, address: tuple[str, int], token: str, mediator: Gateway) -> None:
        if not token:
            raise MalloryError("the mediator API needs a non-empty token (--token-file FILE or $MALLORY_TOKEN)")
        super().__init__(address, _Handler)
        self.token = token
        self.mediator = mediator
        #: seconds each read of a connection may wait (a slow client holds only its thread)
        self.request_timeout = REQUEST_TIMEOUT_S
        self.rejected = 0
        self.reasons: list[str] = []
        #: requests that met a bug of ours (answered 500) or broke their handler
        self.bugs = 0
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        m = mediator
        self.routes = {
            ("GET", "/status"): lambda body: m.status(),
            ("GET", "/metrics"): lambda body: m.metrics(),
            ("POST", "/test/start"): lambda body: m.test_start(_test_name(body)),
            ("POST", "/test/end"): lambda body: m.test_end(),
            ("POST", "/client"): self._client,
            ("POST", "/client/batch"): self._client_batch,
            ("POST", "/firewall/drop"): self._drop,
            ("POST", "/firewall/heal"): self._heal,
            ("POST", "/firewall/delay"): self._delay,
            ("POST", "/firewall/duplicate"): self._duplicate,
            ("POST", "/window"): self._window,
            ("POST", "/advisor/catalogue"): self._catalogue,
            ("POST", "/advisor/next"): lambda body: self._advisor().next_fault(),
            ("POST", "/nemesis"): self._nemesis,
            ("GET", "/scenario"): self._scenario,
            ("GET", "/filters"): lambda body: self._filter_sets(),
            ("POST", "/filters"): self._switch_filters,
        }

    def count_rejected(self, reason: str) -> None:
        with self._lock:
            self.rejected += 1
            self.reasons = (self.reasons + [reason])[-20:]

    def count_bug(self, exc: BaseException) -> None:
        with self._lock:
            self.bugs += 1
        traceback.print_exception(exc, file=sys.stderr)

    def shutdown_request(self, request: Any) -> None:
        """Close a connection after its answer, draining what the client still sends (for
        at most LINGER_S): closing a socket with unread input makes the kernel reset the
        connection, and the reset can destroy the answer before the client has read it
        (say, a 413 to a client still sending its body)."""
        try:
            request.shutdown(socket.SHUT_WR)
            request.settimeout(LINGER_S)
            deadline = time.monotonic() + LINGER_S
            while time.monotonic() < deadline and request.recv(65536):
                pass
        except OSError:
            pass
        self.close_request(request)

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A handler broke outside the routes: a client that vanished mid-exchange is no
        news; anything else is a bug, counted and printed."""
        exc = sys.exception()
        if not isinstance(exc, OSError):
            self.count_bug(exc)

    def start(self) -> "ApiServer":
        self._thread = threading.Thread(target=self.serve_forever, kwargs={"poll_interval": 0.05}, name="mediator-api", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._thread is not None:
            self.shutdown()
            self._thread.join(2.0)
        self.server_close()

    # -- request checking ---------------------------------------------------------------

    def _client(self, body: dict) -> dict:
        return self.mediator.client_op(*_client_op(body))

    def _client_batch(self, body: dict) -> dict:
        """A batch of relayed client ops, in order: every op is checked before any counts."""
        ops = _field(body, "ops", list)
        if not 0 < len(ops) <= MAX_CLIENT_BATCH:
            raise BadRequest(f"'ops' must hold 1..{MAX_CLIENT_BATCH} client ops, got {len(ops)}")
        checked = []
        for i, op in enumerate(ops):
            if type(op) is not dict:
                raise BadRequest(f"ops[{i}] must be an object, got {_brief(op)}")
            try:
                checked.append(_client_op(op))
            except BadRequest as exc:
                raise BadRequest(f"ops[{i}]: {exc.reason}") from None
        for op in checked:
            self.mediator.client_op(*op)
        return {"ok": True, "ops": len(checked)}

    def _drop(self, body: dict) -> dict:
        if "partition" in body:
            groups = body["partition"]
            if type(groups) is not list or not all(
                type(g) is list and all(type(n) is str for n in g) for g in groups
            ):
                raise BadRequest("'partition' must be a list of lists of node names")
            links = self.mediator.partition_links(groups)
        else:
            links = parse_links(body.get("links"))
        return self.mediator.drop(links)

    def _heal(self, body: dict) -> dict:
        return self.mediator.heal(parse_links(body["links"]) if "links" in body else None)

    def _delay(self, body: dict) -> dict:
        links = parse_links(body.get("links"))
        ms = body.get("ms")
        if type(ms) not in (int, float) or not 0 <= ms <= 60_000:
            raise BadRequest(f"'ms' must be a number of milliseconds in [0, 60000], got {_brief(ms)}")
        return self.mediator.delay(links, int(ms * 1_000_000))

    def _window(self, body: dict) -> dict:
        start = _field(body, "start_ns", int)
        end = _field(body, "end_ns", int)
        wait_ms = body.get("wait_ms", 1000)
        if type(wait_ms) not in (int, float) or not 0 <= wait_ms <= 60_000:
            raise BadRequest(f"'wait_ms' must be in [0, 60000], got {_brief(wait_ms)}")
        abstraction = body.get("abstraction", "event-history")
        if type(abstraction) is not str:
            raise BadRequest("'abstraction' must be a string")
        trace = body.get("trace", [])
        if type(trace) is not list or len(trace) > MAX_TRACE_TYPES or not all(type(t) is str for t in trace):
            raise BadRequest(f"'trace' must be a list of at most {MAX_TRACE_TYPES} event types")
        trace_from = _field(body, "trace_from_ns", int, required=False)
        try:
            return self.mediator.window(start, end, wait_ms / 1000, abstraction, frozenset(trace), trace_from).to_json()
        except ValueError as exc:
            raise BadRequest(str(exc)) from None

    def _advisor(self) -> Advisor:
        advisor = self.mediator.advisor
        if advisor is None:
            raise BadRequest("this mediator has no advisor: start it with --advisor", HTTPStatus.CONFLICT)
        return advisor

    def _catalogue(self, body: dict) -> dict:
        actions = _field(body, "actions", list)
        return self._advisor().set_catalogue(actions)

    def _nemesis(self, body: dict) -> dict:
        f = _field(body, "f", str)
        if not f or len(f) > 64:
            raise BadRequest("'f' must be a non-empty string of at most 64 characters")
        return self.mediator.fault_reported(f)

    def _scenario(self, body: dict) -> dict:
        report = self.mediator.scenario()
        if report is None:
            raise BadRequest("this mediator runs no scenario: start it with --scenario", HTTPStatus.CONFLICT)
        return report

    def _filter_sets(self) -> dict:
        found = self.mediator.filter_sets()
        if found is None:
            raise BadRequest("this mediator has no filter sets: start it with --filter-sets", HTTPStatus.CONFLICT)
        return found

    def _switch_filters(self, body: dict) -> dict:
        self._filter_sets()  # 409 first: a mediator without filter sets has nothing to switch
        if "set" not in body:
            raise BadRequest("missing field 'set' (a filter set's name, or null for none)")
        name = body["set"]
        if name is not None and (type(name) is not str or not 0 < len(name) <= 64):
            raise BadRequest(f"'set' must be a filter set's name (1..64 characters) or null, got {_brief(name)}")
        roles = body.get("roles", {})
        if type(roles) is not dict or not all(type(k) is str and type(v) is str for k, v in roles.items()):
            raise BadRequest(f"'roles' must be an object from role names to node names, got {_brief(roles)}")
        if extra := sorted(set(body) - {"set", "roles"}):
            raise BadRequest(f"unknown field {extra[0]!r} (fields: set, roles)")
        return self.mediator.switch_filters(name, roles)

    def _duplicate(self, body: dict) -> dict:
        links = parse_links(body.get("links"))
        copies = _field(body, "copies", int, required=False)
        return self.mediator.duplicate(links, 1 if copies is None else copies)
