"""The message layer as the mediator runs it: the decider (a scenario's driver, or the
switch of a campaign's filter sets), the proxy, the capture of its legs and the rules that
divert the declared peer ports, put together in the order that leaves no connection without
a listener (issue 19, parts 2 and 3; see proxy.py, legs.py, divert.py, scenario_driver.py,
filter_sets.py).

Start: the capture's queue is bound, the proxy listens, then the rules go in (so nothing is
diverted to a socket not yet there or queued to a queue nobody reads). Stop: the proxy
first, which resets both legs of every proxied connection while the rules still bring the
nodes' last packets of them to the gateway (without the rules they would be forwarded to
the other node, whose end of that 4-tuple has other sequence numbers: a desynchronised
connection that hangs instead of ending); then the rules (new connections are forwarded
plainly again), then the capture (last: the resets pass it). The layer must be installed
before the SUT opens its peer connections: a connection opened before is not the proxy's,
and its packets would be taken for new ones (the mediator starts before the SUT, in
`mallory scenario run` and in a campaign). Nothing here is made for a mediator given
neither a scenario nor filter sets.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from mallory.instrument.catalogue import Catalogue
from mallory.mediator.divert import Diversion
from mallory.mediator.filter_sets import FilterSetDriver
from mallory.mediator.firewall import Firewall
from mallory.mediator.legs import LegCapture, LegJoin
from mallory.mediator.proxy import MessageProxy, Relay
from mallory.mediator.scenario_driver import MessageDriver, ScenarioDriver
from mallory.observer.framing import stream_factory
from mallory.observer.messages import PeerMessages
from mallory.scenario.engine import Scenario
from mallory.scenario.events import ScenarioError
from mallory.scenario.filters import FilterSet

#: the proxy's listening port in the gateway (diverted connections arrive there)
PROXY_PORT = 7102


@dataclass(frozen=True)
class LayerConfig:
    """What the mediator needs for a message layer: what decides the messages (a scenario,
    or the named filter sets a campaign switches: exactly one of the two), the SUT's
    messages on this cluster, its annotation catalogue (code events' names), the proxy's
    port and the capture's NFQUEUE number."""

    declared: PeerMessages
    catalogue: Catalogue
    capture_queue: int
    proxy_port: int = PROXY_PORT
    scenario: Scenario | None = None
    filter_sets: Mapping[str, FilterSet] | None = None

    def __post_init__(self) -> None:
        if (self.scenario is None) == (self.filter_sets is None):
            raise ScenarioError("a message layer is given a scenario or filter sets, one of the two")

    def driver(self, nodes: list[str]) -> MessageDriver:
        """The decider of a cluster of `nodes`."""
        if self.scenario is not None:
            return ScenarioDriver(self.scenario, nodes, self.catalogue)
        assert self.filter_sets is not None
        return FilterSetDriver(self.filter_sets, nodes, self.catalogue)


class MessageLayer:
    def __init__(self, config: LayerConfig, node_addresses: Mapping[str, str], firewall: Firewall) -> None:
        self.config = config
        self.driver = config.driver(sorted(node_addresses))
        self.join = LegJoin()
        self.relay = Relay(node_addresses, stream_factory(config.declared.format), self.driver,
                           on_written=self.join.written)
        self.proxy = MessageProxy(self.relay, config.proxy_port)
        self.driver.release = self.proxy.deliver
        self.capture = LegCapture(self.join, node_addresses, lambda: firewall.table.rules, firewall.seen)
        self.diversion = Diversion(node_addresses, config.declared.ports, config.proxy_port, config.capture_queue)
        self._started: list[Any] = []

    def start(self) -> None:
        try:
            self.capture.start(self.config.capture_queue)
            self._started.append(self.capture)
            self.proxy.start()
            self._started.append(self.proxy)
            self.diversion.install()
            self._started.append(self.diversion)
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        """Undo `start`, in the order the module docstring gives; again, nothing more."""
        if self.proxy in self._started:
            self.proxy.stop()
        if self.diversion in self._started:
            self.diversion.remove()
        if self.capture in self._started:
            self.capture.stop()
        self._started.clear()

    @property
    def error(self) -> BaseException | None:
        return self.proxy.error or self.capture.error

    def stats(self) -> dict[str, Any]:
        return {"proxy": dict(self.relay.counts), "connections": len(self.relay.connections),
                "pending": len(self.relay.pending), "legs": {**self.join.stats(), **self.capture.counts}}
