"""A scenario's engine (mallory/scenario/engine.py) driven by the gateway: the message layer's
messages (mallory/mediator/proxy.py, as its `Decider`) and the timeline's other events.

Per message from the proxy: the engine steps on its SEND and the decision becomes the
proxy's `Outcome`: the messages it lists are delivered now, those `Delay`ed later; a
message the decision neither delivers nor delays is dropped (its bytes let go) unless a
filter stored it in a set, where it waits for a `DeliverAllFromSet`. When the proxy has
handed a message to its receiver, the engine steps on its RECV (so a scenario's RECV means
"the gateway delivered it", not "the receiver's program read it"). Without the scenario's
DUPLICATES a message is delivered at most once, however often decisions name it.

The timeline's events reach the engine through the ingest (`on_entries`, an ingest
subscriber: mallory/mediator/ingest.py), once committed, so a little after they happened
(the observers' batch interval and the clock-skew bound): code events named by the SUT's
annotation catalogue (unknown ids are left out: no scenario can name them), log events by
their `[[log_events]]` name, the mediator's client and fault events. Packet SEND/RECV
events are not a scenario's: its messages come from the proxy. Messages those events
release (a filter on a code event delivering a held set) go to the proxy through
`release` (its thread-safe `deliver`).

Once the run has ended (its machine reached a final verdict), what it still held in sets
is delivered (counted `released`), every later message is delivered at once, uncounted,
and no more events are stepped: the SUT runs on undisturbed until the command tears it
down.

`MessageDriver` is what this shares with the campaign's filter sets
(mallory/mediator/filter_sets.py), whose engine comes and goes; `ScenarioDriver` runs one
scenario from the start.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from mallory.instrument.catalogue import Catalogue
from mallory.mediator.proxy import Delivery, Outcome
from mallory.scenario.engine import Engine, Scenario
from mallory.scenario.events import (
    CLIENT_TYPES,
    Message,
    ScenarioError,
    ScenarioEvent,
    client,
    code,
    fault,
    log,
    receive,
    send,
)
from mallory.scenario.filters import Decision
from mallory.scenario.machine import START
from mallory.timeline.builder import Committed
from mallory.timeline.event import Event, Kind

logger = logging.getLogger(__name__)


class MessageDriver:
    """What a decider of the message layer shares, whatever puts its engine there: the
    proxy's calls, the timeline's events and the per-message bookkeeping (see the module
    docstring). `engine` None, or one whose run has ended, leaves every message undisturbed
    (`_undisturbed`).

    Threads: `on_message`, `on_delivered` and `on_lost` come from the proxy's thread (the
    `Decider` contract); `on_entries` from the ingest, one call at a time under its lock
    (an observer's receiver thread, or the mediator's ticker); reports and a subclass's
    engine switch from the API's threads. One lock covers the engine, `counts` and the
    bookkeeping, so the engine (pure, not thread-safe) steps one event at a time, and a
    message arriving while the engine is swapped is decided wholly by the old one or wholly
    by the new. Whoever installs or removes an engine does it under the lock, first
    releasing what the old one held (`_release_held`) and resetting `counts` and `_sent`.
    Nothing is called while the lock is held but the engine: `release` (the proxy's
    `deliver`, which only queues) is called after it is let go.

    A message is tracked from its arrival until it is let go (its id in an outcome's
    `forget`, so the proxy lets its bytes go too): when it is delivered, with no delivery
    outstanding and in no set of the engine in force; at once when dropped; or when the
    proxy lost it (`on_lost`). What an engine holds in its sets is delivered when its run
    ends or it is replaced, so a held message is never lost by the driver, and without
    DUPLICATES never delivered twice."""

    def __init__(self, nodes: Sequence[str], catalogue: Catalogue | None = None, own_node: str = "mediator",
                 duplicates: bool = False) -> None:
        self.nodes = frozenset(nodes)
        self.catalogue = catalogue or Catalogue()
        self.own_node = own_node
        self.duplicates = duplicates
        self.engine: Engine | None = None
        #: the proxy's `deliver`, for messages released by events other than messages
        self.release: Callable[[Outcome], None] | None = None
        #: per (sender, receiver, message type): how many messages were sent, delivered, ...
        #: while an engine ran (not after its end: the SUT's undisturbed traffic until the
        #: tear-down is not the run's)
        self.counts: dict[tuple[str, str, str], Counter[str]] = {}
        #: events the scenario could not take (a timeline event's bad name, an action that
        #: raised): counted, and the run goes on (`_step`)
        self.errors = 0
        self._outstanding: Counter[str] = Counter()  # deliveries ordered, not yet made
        self._delivered: set[str] = set()  # delivered and not yet let go
        #: messages counted `sent` by the engine in force, not yet let go: only their
        #: deliveries are its to count (not those of messages an earlier one released)
        self._sent: set[str] = set()
        self._lock = threading.Lock()

    def _undisturbed(self) -> bool:
        """No engine in force, or its run has ended (its sets were emptied then: `_step`):
        a message is delivered at once, nothing is counted and no event is stepped. Read
        under the lock; `on_entries` also reads it before, only to skip work early."""
        return self.engine is None or self.engine.ended

    # -- the proxy's Decider ------------------------------------------------------------

    def on_message(self, message: Message) -> Outcome:
        with self._lock:
            if self._undisturbed():
                self._outstanding[message.id] += 1
                return Outcome((Delivery(message.id),))
            self._count(message, "sent")
            self._sent.add(message.id)
            outcome = self._step(send(message))
            if not self._outstanding[message.id]:
                if self._in_a_set(message.id):
                    self._count(message, "held")
                else:
                    self._count(message, "dropped")
                    outcome = Outcome(outcome.deliver, (*outcome.forget, self._let_go(message.id)))
            return outcome

    def on_delivered(self, message: Message) -> Outcome:
        with self._lock:
            seen_sent = not self._undisturbed() and message.id in self._sent
            if seen_sent:
                self._count(message, "delivered")
            self._outstanding[message.id] -= 1
            self._delivered.add(message.id)
            outcome = self._step(receive(message)) if seen_sent else Outcome()
            if self._outstanding[message.id] <= 0 and not self._in_a_set(message.id):
                outcome = Outcome(outcome.deliver, (*outcome.forget, self._let_go(message.id)))
            return outcome

    def on_lost(self, message_id: str) -> None:
        with self._lock:
            self._let_go(message_id)

    # -- the timeline's events ------------------------------------------------------------

    def on_entries(self, entries: Iterable[Committed]) -> None:
        """An ingest subscriber: each committed event a scenario can see is stepped (none
        while no engine runs: the ingest's path costs nothing more then)."""
        for entry in entries:
            if self._undisturbed():
                return
            event = self.scenario_event(entry.event)
            if event is None:
                continue
            with self._lock:
                if self._undisturbed():
                    return
                outcome = self._step(event)
            if (outcome.deliver or outcome.forget) and self.release is not None:
                self.release(outcome)

    def scenario_event(self, event: Event) -> ScenarioEvent | None:
        """The scenario's view of a timeline event, None for what a scenario does not see."""
        kind, data = event.kind, event.data
        try:
            if kind in (Kind.FUNC, Kind.BLOCK) and event.node in self.nodes:
                found = self.catalogue.get(event.id)
                return None if found is None else code(event.node, found.name, kind)
            if kind is Kind.LOG and event.node in self.nodes and data:
                return log(event.node, data)
            if event.node == self.own_node and kind in (Kind.CLIENT_INVOKE, Kind.CLIENT_COMPLETE):
                f, _, type_ = data.partition(":")
                return client(f, type_) if f and type_ in CLIENT_TYPES else None
            if event.node == self.own_node and kind is Kind.FAULT and data:
                return fault(data)
        except ScenarioError:
            self.errors += 1
        return None

    # -- inside --------------------------------------------------------------------------

    def _step(self, event: ScenarioEvent) -> Outcome:
        """The engine in force steps on `event`: the outcome of its decision, and, when the
        event ended the run, of every message the run still held (the SUT runs on
        undisturbed from now: a message left in a set would be a drop nobody asked for).
        When the scenario raises (an action that cannot be done, a node function of the
        scenario file's) the error is counted and the event goes on as if no filter had
        handled it: a SEND's message is delivered. The proxy's thread, the ingest's, the
        bookkeeping: none may be stopped by a scenario's error."""
        assert self.engine is not None
        try:
            decision = self.engine.step(event)
        except Exception as exc:
            self.errors += 1
            logger.warning("message layer: the scenario failed on %s: %s: %s", event, type(exc).__name__, exc)
            decision = Decision((event.message,) if event.kind is Kind.SEND and event.message else (), None)
        outcome = self._outcome(decision)
        if self.engine.ended:
            held = self._release_held()
            outcome = Outcome((*outcome.deliver, *held.deliver), (*outcome.forget, *held.forget))
        return outcome

    def _release_held(self) -> Outcome:
        """Deliveries of every message the engine in force holds in its message sets, now
        let out of them (so each is let go once delivered), each counted `released`."""
        if self.engine is None:
            return Outcome()
        held = [m for found in self.engine.ctx.sets.values() for m in found.values()]
        for found in self.engine.ctx.sets.values():
            found.clear()
        outcome = self._outcome(Decision(tuple(held), None))
        ordered = {d.message_id for d in outcome.deliver}
        for message in {m.id: m for m in held}.values():
            if message.id in ordered:
                self._count(message, "released")
        return outcome

    def _outcome(self, decision: Decision) -> Outcome:
        """The proxy's outcome of `decision`: its messages delivered (now or later). Without
        DUPLICATES one delivered or ordered already is not, and one delivered already that
        is in no set any more (let out of one by DeliverAllFromSet) is let go: nothing can
        name it again, so the proxy need not keep its bytes."""
        deliver: list[Delivery] = []
        forget: list[str] = []
        for message, delay_ns, delayed in (*((m, 0, False) for m in decision.deliver),
                                           *((m, ns, True) for m, ns in decision.delayed)):
            if self.duplicates or not (message.id in self._delivered or self._outstanding[message.id]
                                       or message.id in forget):
                deliver.append(Delivery(message.id, delay_ns))
                self._outstanding[message.id] += 1
                if delayed:
                    self._count(message, "delayed")
            elif message.id in self._delivered and not self._outstanding[message.id] \
                    and not self._in_a_set(message.id):
                forget.append(self._let_go(message.id))
        return Outcome(tuple(deliver), tuple(forget))

    def _let_go(self, message_id: str) -> str:
        """Forget `message_id` (the caller tells the proxy to let its bytes go, unless the
        proxy lost it): no delivery of it is outstanding and none will be ordered again."""
        self._outstanding.pop(message_id, None)
        self._delivered.discard(message_id)
        self._sent.discard(message_id)
        return message_id

    def _in_a_set(self, message_id: str) -> bool:
        return self.engine is not None and any(message_id in held for held in self.engine.ctx.sets.values())

    def _messages(self) -> dict[str, dict[str, dict[str, int]]]:
        """The counts, per link and message type."""
        messages: dict[str, dict[str, dict[str, int]]] = {}
        for (src, dst, type_), counter in sorted(self.counts.items()):
            messages.setdefault(f"{src}->{dst}", {})[type_] = dict(counter)
        return messages

    def _count(self, message: Message, what: str) -> None:
        self.counts.setdefault((message.src, message.dst, message.type), Counter())[what] += 1


class ScenarioDriver(MessageDriver):
    """One scenario run on the gateway (see the module docstring)."""

    def __init__(self, scenario: Scenario, nodes: Sequence[str], catalogue: Catalogue | None = None,
                 own_node: str = "mediator") -> None:
        super().__init__(nodes, catalogue, own_node, scenario.duplicates)
        self.scenario = scenario
        self.engine = scenario.engine(nodes)

    def report(self) -> dict[str, Any]:
        """The run so far: whether it ended, the verdict (final once ended, else what a
        timeout now would give), the states it went through, the events stepped, and per
        link and message type what became of the messages while the run went on."""
        with self._lock:
            engine = self.engine
            assert engine is not None
            verdict = engine.verdict()
            return {
                "scenario": self.scenario.name,
                "ended": engine.ended,
                "passed": verdict.passed,
                "state": verdict.state,
                "states": [START, *(t.target for t in verdict.path)],
                "reason": verdict.reason,
                "lines": verdict.lines(),
                "events": engine.events,
                "refused_events": self.errors,
                "messages": self._messages(),
            }
