"""The mediator: firewall + batch ingest + timeline + API + recording, wired together.

The mediator has an event stream of its own, node "mediator": relayed client operations
(CLIENT_INVOKE / CLIENT_COMPLETE, id = the client process, data = "f:type") and the faults
it enacts (FAULT, data = the rule kind). It goes into the timeline like an observer's, with
a clock pair at start and a batch every `batch_interval`.

With a scenario or filter sets (`layer`) the mediator also runs the message layer
(message_layer.py): the declared peer ports' connections are relayed message by message and
the scenario's engine decides each message and steps on the timeline's events (its run is
`scenario()`), or the filter set a campaign put in force does (`switch_filters`, each switch
a FAULT event; `filter_sets()`).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from mallory.errors import MalloryError
from mallory.mediator.api import ApiServer, Link
from mallory.mediator.filter_sets import FilterSetDriver
from mallory.mediator.firewall import Firewall, install_queue_rules, remove_queue_rules
from mallory.mediator.ingest import Ingest
from mallory.mediator.memory import process_memory, return_free_memory
from mallory.mediator.message_layer import LayerConfig, MessageLayer
from mallory.mediator.receiver import BatchServer
from mallory.mediator.windows import Window, WindowService
from mallory.timeline.builder import TimelineBuilder
from mallory.timeline.event import Batch, ClockPair, Event, Kind

if TYPE_CHECKING:  # the advisor's learner brings numpy, datasketch and scipy: only --advisor loads it
    from mallory.mediator.advisor import Advisor

MEDIATOR_NODE = "mediator"
RECORDING_NAME = "events.jsonl"


def recording_path(record_dir: Path) -> Path:
    """events.jsonl, or events.N.jsonl after a restart: each mediator incarnation numbers
    the batches it ingests from 0, so each writes a self-contained stream of its own."""
    path = record_dir / RECORDING_NAME
    n = 0
    while path.exists():
        n += 1
        path = record_dir / f"events.{n}.jsonl"
    return path


class Mediator:
    #: How often the own-stream ticker returns freed memory (tens of ms each time).
    TRIM_INTERVAL_S = 60.0

    def __init__(
        self,
        node_addresses: Mapping[str, str],
        *,
        token: str,
        api_address: tuple[str, int],
        batch_address: tuple[str, int],
        record_dir: Path | None = None,
        queue_num: int | None = None,
        fail_open: bool = True,
        skew_ns: int = 100_000_000,
        batch_interval: float = 0.1,
        layer: LayerConfig | None = None,
    ) -> None:
        self.node_addresses = dict(node_addresses)
        self.nodes = sorted(node_addresses)
        self.queue_num = queue_num
        self.fail_open = fail_open
        self.batch_interval = batch_interval
        self.firewall = Firewall(self.node_addresses)
        self.recording_path = recording_path(record_dir) if record_dir is not None else None
        self._recording = None
        if self.recording_path is not None:
            self.recording_path.parent.mkdir(parents=True, exist_ok=True)
            self._recording = open(self.recording_path, "ab")
        self.builder = TimelineBuilder(skew_ns=skew_ns, nodes=[*self.nodes, MEDIATOR_NODE])
        self.ingest = Ingest(self.builder, self.firewall.seen, self._recording)
        self.windows = WindowService(self.ingest.frontier_ns, lost_until=self.ingest.lost_until_ns)
        #: Jepsen-driven mode's learner (see advisor.py); None unless the command enables it
        self.advisor: Advisor | None = None
        self.ingest.subscribers.append(self.windows.on_commit)
        self.layer = MessageLayer(layer, self.node_addresses, self.firewall) if layer is not None else None
        if self.layer is not None:
            self.ingest.relink = self.layer.join.relink
            self.ingest.subscribers.append(self.layer.driver.on_entries)
        self.api = ApiServer(api_address, token, self)  # first: it checks the token before binding
        try:
            self.receiver = BatchServer(*batch_address, self.ingest)
        except BaseException:
            self.api.server_close()
            raise
        self.test: dict[str, object] | None = None
        self.tests_run = 0
        self._own: list[Event] = []
        self._own_seq = 0
        self._own_lock = threading.Lock()
        self._stop = threading.Event()
        #: what ended the mediator's own event stream (`_tick`), None while it runs
        self.stream_error: BaseException | None = None
        #: malloc_trim calls by `_tick` that returned memory to the system
        self.trims = 0
        #: how long the last of those calls took (ms): the whole process pauses for its collection
        self.free_ms: float | None = None
        self._ticker = threading.Thread(target=self._tick, name="mediator-stream", daemon=True)
        self.started_ns = time.monotonic_ns()
        self._rules_installed = False

    def start(self) -> "Mediator":
        if self.queue_num is not None:
            install_queue_rules(self.node_addresses, self.queue_num)
            self._rules_installed = True
            self.firewall.start(self.queue_num, fail_open=self.fail_open)
        if self.layer is not None:
            self.layer.start()
        self.ingest.on_clock(ClockPair(MEDIATOR_NODE, time.monotonic_ns(), time.time_ns()))
        self.receiver.start()
        self.api.start()
        self._ticker.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self.api.stop()
        self.receiver.close()
        if self.layer is not None:
            self.layer.stop()
        if self._rules_installed:
            remove_queue_rules()  # first: no new packet is queued to a firewall about to go
        self.firewall.stop()
        if self._ticker.is_alive():
            self._ticker.join(2.0)
        if self._recording is not None:
            self._recording.close()

    # -- the mediator's own event stream -----------------------------------------------------

    def emit(self, kind: Kind, ident: int, data: str) -> None:
        with self._own_lock:
            self._own.append(Event(MEDIATOR_NODE, kind, time.monotonic_ns(), ident, data))

    def _flush_own(self) -> None:
        with self._own_lock:
            events, self._own = self._own, []
            batch = Batch(MEDIATOR_NODE, self._own_seq, time.monotonic_ns(), events)
            self._own_seq += 1
        self.ingest.on_batch(batch)

    def _tick(self) -> None:
        """Flush the own events every batch interval, and every `TRIM_INTERVAL_S` give freed
        memory back (memory.return_free_memory): without it an event burst's high-water
        mark stays resident for the rest of a 24-hour campaign. Whatever ends it (the
        recording's disk full, a subscriber's bug) is kept in `stream_error` for the command
        to exit on: with nothing flushing them, every client op and fault after it would stay
        in `_own`."""
        try:
            trimmed_ns = time.monotonic_ns()
            while not self._stop.wait(self.batch_interval):
                self._flush_own()
                if time.monotonic_ns() - trimmed_ns >= self.TRIM_INTERVAL_S * 1e9:
                    trimmed_ns = time.monotonic_ns()
                    self.trims += bool(return_free_memory())
                    self.free_ms = round((time.monotonic_ns() - trimmed_ns) / 1e6, 1)
        except BaseException as exc:
            self.stream_error = exc
            raise

    # -- what the API does ---------------------------------------------------------------

    def test_start(self, name: str) -> dict:
        if self.test is not None:
            self.test_end()
        self.firewall.heal(None)
        self._filters_off()
        self.test = {"name": name, "started_ns": time.time_ns()}
        self.tests_run += 1
        self.emit(Kind.LOG, 0, f"test-start:{name}"[:64])
        return {"test": self.test}

    def test_end(self) -> dict:
        healed = self.firewall.heal(None)
        if healed["links"]:
            self.emit(Kind.FAULT, 0, "heal")
        self._filters_off()
        ended, self.test = self.test, None
        self.emit(Kind.LOG, 0, "test-end")
        result = {"test": ended, "healed": healed}
        if self.advisor is not None:
            result["advisor"] = self.advisor.end_test()
        return result

    def client_op(self, process: int, kind: str, f: str) -> dict:
        self.emit(Kind.CLIENT_INVOKE if kind == "invoke" else Kind.CLIENT_COMPLETE, process, f"{f}:{kind}")
        return {"ok": True}

    def fault_reported(self, f: str) -> dict:
        """A fault an external nemesis (Jepsen) enacted: it enters the timeline as a FAULT."""
        self.emit(Kind.FAULT, 0, f)
        return {"ok": True}

    # Each firewall change is a FAULT event in the mediator's own stream.

    def partition_links(self, groups: list[list[str]]) -> list[Link]:
        return self.firewall.table.partition_links(groups)

    def drop(self, links: list[Link]) -> dict:
        return self._fault("drop", lambda: self.firewall.drop(links))

    def heal(self, links: list[Link] | None) -> dict:
        return self._fault("heal", lambda: self.firewall.heal(links))

    def delay(self, links: list[Link], delay_ns: int) -> dict:
        return self._fault("delay", lambda: self.firewall.delay(links, delay_ns))

    def duplicate(self, links: list[Link], copies: int) -> dict:
        return self._fault("duplicate", lambda: self.firewall.duplicate(links, copies))

    def _fault(self, kind: str, change: Callable[[], dict]) -> dict:
        report = change()
        self.emit(Kind.FAULT, 0, kind)
        return report

    def scenario(self) -> dict | None:
        """The scenario's run so far (ScenarioDriver.report), None without one."""
        return self.layer.driver.report() if self.layer is not None and self.layer.config.scenario else None

    def _filter_driver(self) -> FilterSetDriver | None:
        driver = self.layer.driver if self.layer is not None else None
        return driver if isinstance(driver, FilterSetDriver) else None

    def filter_sets(self) -> dict | None:
        """The filter sets, the one in force and its account (FilterSetDriver.report), None
        for a mediator without filter sets."""
        driver = self._filter_driver()
        return driver.report() if driver is not None else None

    def switch_filters(self, name: str | None, roles: dict[str, str]) -> dict:
        """Put the filter set `name` in force with `roles` bound (None: none); a FAULT event
        "filters:<name>" or "filters-off". MalloryError, nothing changed, for a mediator
        without filter sets or a request FilterSetDriver.switch refuses."""
        driver = self._filter_driver()
        if driver is None:
            raise MalloryError("this mediator has no filter sets: start it with --filter-sets")
        answer = driver.switch(name, roles)
        self.emit(Kind.FAULT, 0, f"filters:{name}" if name is not None else "filters-off")
        return answer

    def _filters_off(self) -> None:
        """No filter set outlives a test."""
        driver = self._filter_driver()
        if driver is not None and driver.active is not None:
            self.switch_filters(None, {})

    def window(self, start_ns: int, end_ns: int, wait_s: float, abstraction: str = "event-history",
               trace: frozenset[str] = frozenset(), trace_from_ns: int | None = None) -> Window:
        return self.windows.window(start_ns, end_ns, wait_s, abstraction, trace, trace_from_ns)

    def metrics(self) -> dict:
        return {
            "firewall": self.firewall.stats(),
            "ingest": self.ingest.stats(),
            "windows": self.windows.stats(),
            "receiver": self.receiver.metrics(),
            "api_rejected": self.api.rejected,
            "api_bugs": self.api.bugs,
            "advisor": self.advisor.stats() if self.advisor is not None else None,
            "message_layer": self.layer.stats() if self.layer is not None else None,
            "api_reasons": list(self.api.reasons),
            "uptime_s": round((time.monotonic_ns() - self.started_ns) / 1e9, 3),
            "memory": self.memory(),
        }

    def memory(self) -> dict:
        """The process's memory (memory.py) and, under "held", the sizes of the tables that
        grow with the traffic up to their bounds: a soak reads which one moved."""
        return {**process_memory(), "trims": self.trims, "free_ms": self.free_ms,
                "held": {"seen_packets": len(self.firewall.seen), **self.ingest.held()}}

    def status(self) -> dict:
        return {
            "test": self.test,
            "tests_run": self.tests_run,
            "nodes": self.node_addresses,
            "firewall_running": self.queue_num is not None and self.firewall.error is None,
            "recording": str(self.recording_path) if self.recording_path else None,
            **self.metrics(),
        }
