"""A small client for the mediator's HTTP API (see mallory/mediator/api.py).

Stdlib only (urllib), so the nemesis and the campaign can drive the gateway firewall from
the controller. Every call sends the token header and has a timeout; a refused request
(4xx/5xx) raises MalloryError carrying the server's own reason, an unreachable mediator
raises MalloryError naming the address.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from mallory.errors import MalloryError
from mallory.mediator.api import TOKEN_HEADER
from mallory.mediator.windows import Window

Link = tuple[str, str]


def link_strings(links: Iterable[Link]) -> list[str]:
    return [f"{src}->{dst}" for src, dst in links]


class MediatorClient:
    def __init__(self, host: str, port: int, token: str, timeout: float = 5.0) -> None:
        self.base = f"http://{host}:{port}"
        self.token = token
        self.timeout = timeout

    def _call(self, method: str, path: str, body: dict[str, Any] | None = None, timeout: float | None = None) -> dict[str, Any]:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.base + path, data=data, method=method)
        request.add_header(TOKEN_HEADER, self.token)
        if data is not None:
            request.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(request, timeout=self.timeout if timeout is None else timeout) as response:
                return json.loads(response.read() or b"{}")
        except urllib.error.HTTPError as exc:
            try:
                reason = json.loads(exc.read()).get("error", exc.reason)
            except ValueError:
                reason = exc.reason
            raise MalloryError(f"mediator {method} {path}: {exc.code} {reason}") from None
        except (urllib.error.URLError, OSError) as exc:
            raise MalloryError(f"mediator at {self.base} unreachable ({method} {path}): {exc}") from None

    # -- reading -------------------------------------------------------------------------

    def status(self) -> dict[str, Any]:
        return self._call("GET", "/status")

    def metrics(self) -> dict[str, Any]:
        return self._call("GET", "/metrics")

    def rules(self) -> list[dict[str, Any]]:
        """The firewall's active link rules (empty when every link forwards plainly)."""
        return list(self.metrics()["firewall"]["rules"])

    # -- the firewall ----------------------------------------------------------------------

    def drop(self, links: Sequence[Link]) -> dict[str, Any]:
        return self._call("POST", "/firewall/drop", {"links": link_strings(links)})

    def partition(self, groups: Sequence[Sequence[str]]) -> dict[str, Any]:
        return self._call("POST", "/firewall/drop", {"partition": [list(g) for g in groups]})

    def delay(self, links: Sequence[Link], ms: float) -> dict[str, Any]:
        return self._call("POST", "/firewall/delay", {"links": link_strings(links), "ms": ms})

    def duplicate(self, links: Sequence[Link], copies: int = 1) -> dict[str, Any]:
        return self._call("POST", "/firewall/duplicate", {"links": link_strings(links), "copies": copies})

    def heal(self, links: Sequence[Link] | None = None) -> dict[str, Any]:
        return self._call("POST", "/firewall/heal", {} if links is None else {"links": link_strings(links)})

    def fault_reported(self, f: str) -> dict[str, Any]:
        """Tell the mediator a fault was enacted (it becomes a FAULT event in the timeline)."""
        return self._call("POST", "/nemesis", {"f": f[:64]})

    def client_op(self, process: int, type: str, f: str) -> dict[str, Any]:
        """Relay a client operation (type "invoke", "ok", "fail" or "info"): a client event."""
        return self._call("POST", "/client", {"process": process, "type": type, "f": f})

    def scenario(self) -> dict[str, Any]:
        """The scenario's run so far (see GET /scenario in mallory/mediator/api.py)."""
        return self._call("GET", "/scenario")

    # -- filter sets ----------------------------------------------------------------------

    def filter_sets(self) -> dict[str, Any]:
        """The filter sets and the one in force (see GET /filters in mallory/mediator/api.py)."""
        return self._call("GET", "/filters")

    def switch_filters(self, name: str | None, roles: Mapping[str, str] | None = None) -> dict[str, Any]:
        """Put the filter set `name` in force with `roles` bound, or none (None)."""
        return self._call("POST", "/filters", {"set": name, "roles": dict(roles or {})})

    # -- tests -----------------------------------------------------------------------------

    def test_start(self, name: str) -> dict[str, Any]:
        return self._call("POST", "/test/start", {"name": name})

    def test_end(self) -> dict[str, Any]:
        return self._call("POST", "/test/end", {})

    # -- the timeline ----------------------------------------------------------------------

    def window(self, start_ns: int, end_ns: int, wait_s: float, abstraction: str = "event-history",
               trace: frozenset[str] = frozenset(), trace_from_ns: int | None = None) -> dict[str, Any]:
        """The timeline's summary of [start_ns, end_ns), waiting up to wait_s for it to
        complete; with `trace` types, their events since trace_from_ns too."""
        body: dict[str, Any] = {"start_ns": start_ns, "end_ns": end_ns, "wait_ms": round(wait_s * 1000),
                                "abstraction": abstraction}
        if trace:
            body["trace"] = sorted(trace)
            if trace_from_ns is not None:
                body["trace_from_ns"] = trace_from_ns
        return self._call("POST", "/window", body, timeout=max(self.timeout, wait_s + 5.0))


class TimelineWindows:
    """The campaign loop's window source: the mediator's live timeline over its API.

    The common time axis is real time (observers map their monotonic clocks onto it), and
    the controller runs on the same machine, so `now_ns` is this machine's real time.

    With `trace` types (a protocol model's), each window carries the trace of those events
    since the end of the last complete window served: the steps of a schedule leave gaps
    between their windows (the time feedback takes), and a late window's events come with
    the next complete one, so a model fed trace after trace sees every event once.
    `restart_trace` starts the next trace at its own window: a new execution (a schedule
    after its reset) must not begin with the previous one's tail.
    """

    def __init__(self, client: MediatorClient, abstraction: str = "event-history",
                 trace: frozenset[str] = frozenset()) -> None:
        self.client = client
        self.abstraction = abstraction
        self.trace = trace
        self._traced_until: int | None = None

    def now_ns(self) -> int:
        return time.time_ns()

    def restart_trace(self) -> None:
        self._traced_until = None

    def window(self, start_ns: int, end_ns: int, wait_s: float) -> Window:
        since = self._traced_until if self._traced_until is not None and self._traced_until <= start_ns else None
        window = Window.from_json(self.client.window(start_ns, end_ns, wait_s, self.abstraction, self.trace, since))
        if window.complete:
            self._traced_until = end_ns
        return window
