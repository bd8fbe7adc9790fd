"""An adapter driven by a declarative TOML spec (see `mallory.harness.spec`).

The spec's `[client] kind` names a client protocol; which kinds exist is the caller's to say
(`clients`: kind -> factory). The harness itself knows only the line protocol; the SUT
registry (mallory/suts/registry.py) adds the ones built-in SUTs bring, such as redis.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Mapping, Protocol, Sequence

from mallory.cluster.backend import ClusterBackend
from mallory.errors import MalloryError
from mallory.harness import readiness
from mallory.harness.adapter import ProcessAdapter, UnsupportedOperation
from mallory.harness.client import Client, key_options
from mallory.harness.line_client import LineClient
from mallory.harness.spec import NodeContext, SutSpec, expand
from mallory.harness.workload import Workload
from mallory.observer.messages import PeerMessages, peer_messages


class ClientFactory(Protocol):
    """A client kind: its constructor (host, port, workload name, *, independent, key_base,
    timeout) -> Client, which raises ValueError for a workload not in WORKLOADS."""

    #: the workloads its clients run
    WORKLOADS: tuple[str, ...]

    def __call__(self, host: str, port: int, workload: str, **options: Any) -> Client: ...


LINE_CLIENTS: Mapping[str, ClientFactory] = {"line": LineClient}


class SpecAdapter(ProcessAdapter):
    def __init__(self, spec: SutSpec, backend: ClusterBackend, clients: Mapping[str, ClientFactory] = LINE_CLIENTS) -> None:
        """`clients`: the client kinds this adapter can make; a spec naming another kind is
        refused here, before any node starts."""
        super().__init__(backend)
        if spec.client is not None and spec.client.kind not in clients:
            raise MalloryError(
                f"{spec.source}: client.kind {spec.client.kind!r} is not a known client (known: {', '.join(sorted(clients))})"
            )
        self.spec = spec
        self.clients = dict(clients)
        self.name = spec.name
        self.stop_signal = spec.stop_signal
        self.stop_timeout = spec.stop_timeout
        self.ready_timeout = spec.ready.timeout
        self.ready_interval = spec.ready.interval
        self._log_pattern = re.compile(spec.ready.pattern) if spec.ready.probe == "log" else None
        self._log_offsets: dict[str, dict[Path, int]] = {}
        self.log_events = spec.log_events
        self.leader_line = spec.leader_line
        self.log_bugs = spec.log_bugs
        if spec.round_s is not None:
            self.round_s = spec.round_s

    def context(self, node: str) -> NodeContext:
        peer_port = self.spec.ports.get("peer", self.spec.ports["client"])
        nodes = list(self.backend.nodes)
        return NodeContext(
            node=node,
            index=nodes.index(node) + 1,
            address=self.backend.node_address(node),
            ports=self.spec.ports,
            peers=",".join(f"{self.backend.node_address(n)}:{peer_port}" for n in nodes if n != node),
            nodes=",".join(nodes),
            data_dir=str(self.backend.data_dir(node)),
            log_dir=str(self.backend.log_dir(node)),
        )

    def log_template_values(self, node: str) -> dict[str, object]:
        return self.context(node).values()

    def peer_messages(self) -> PeerMessages | None:
        """The spec's [messages], on the spec's ports (FramesMessages)."""
        if self.spec.messages is None:
            return None
        return peer_messages(self.spec.messages, self.spec.ports, self.spec.source)

    def command(self, node: str) -> Sequence[str]:
        ctx = self.context(node)
        return [expand(arg, ctx) for arg in self.spec.command]

    def env(self, node: str) -> dict[str, str]:
        ctx = self.context(node)
        return {k: expand(v, ctx) for k, v in self.spec.env.items()}

    def extra_log_paths(self, node: str) -> list[Path]:
        ctx = self.context(node)
        return [Path(expand(f, ctx)) for f in self.spec.log_files]

    def _starting(self, node: str) -> None:
        # A restarted node's log still holds the last run's "ready" line: only look past it.
        self._log_offsets[node] = {p: p.stat().st_size for p in self.log_paths(node) if p.exists()}

    def probe(self, node: str) -> bool:
        ready = self.spec.ready
        if ready.probe == "tcp":
            return readiness.tcp_open(self.backend.client_address(node), self.spec.ports[ready.port])
        if ready.probe == "command":
            ctx = self.context(node)
            return readiness.command_succeeds(self.backend, node, [expand(a, ctx) for a in ready.command])
        assert self._log_pattern is not None
        return readiness.log_matches(self._log_pattern, self.log_paths(node), self._log_offsets.get(node, {}))

    def client(self, node: str, workload: Workload) -> Client:
        client = self.spec.client
        if client is None:
            raise UnsupportedOperation(f"{self.name}: the spec ({self.spec.source}) has no [client] section")
        port = self.spec.ports[client.port]
        return self.clients[client.kind](
            self.backend.client_address(node),
            port,
            workload.name,
            **key_options(workload),
            timeout=client.timeout,
        )
