"""Redis with asynchronous replication: one primary, the other nodes its replicas.

A Python-class adapter (too stateful for a TOML spec): a replica's command line names the
current primary, readiness of a replica means its link to the primary is up, it can tell
which nodes are primaries (INFO replication) and it can promote a replica (REPLICAOF NO
ONE, then the others follow it). Persistence is off, as in a cache deployment: a killed
node comes back empty and resyncs from the primary.
"""

from __future__ import annotations

import redis

from mallory.cluster.backend import ClusterBackend
from mallory.errors import MalloryError
from mallory.harness.adapter import HasPrimaries, ProcessAdapter, Promotable
from mallory.harness.client import Client, key_options
from mallory.harness.workload import Workload
from mallory.suts.redis.client import RedisClient, admin_connection


class RedisReplicationAdapter(ProcessAdapter, HasPrimaries, Promotable):
    name = "redis-replication"
    stop_timeout = 5.0
    ready_timeout = 20.0

    def __init__(
        self,
        backend: ClusterBackend,
        port: int = 6379,
        primary: str | None = None,
        redis_server: str = "redis-server",
        client_timeout: float = 2.0,
    ) -> None:
        super().__init__(backend)
        self.port = port
        self.primary = primary or backend.nodes[0]
        self.redis_server = redis_server
        self.client_timeout = client_timeout

    def command(self, node: str) -> list[str]:
        argv = [
            self.redis_server,
            "--bind", self.backend.node_address(node),
            "--port", str(self.port),
            "--dir", str(self.backend.data_dir(node)),
            "--save", "",
            "--appendonly", "no",
            "--protected-mode", "no",
            "--daemonize", "no",
            "--logfile", "",
        ]  # fmt: skip
        if node != self.primary:
            argv += ["--replicaof", self.backend.node_address(self.primary), str(self.port)]
        return argv

    def _admin(self, node: str) -> redis.Redis:
        return admin_connection(self.backend.client_address(node), self.port)

    def _replication(self, node: str) -> dict | None:
        """INFO replication of a node, or None when it does not answer."""
        admin = self._admin(node)
        try:
            return admin.info("replication")
        except (redis.ConnectionError, redis.TimeoutError, OSError):
            return None
        finally:
            admin.close()

    def probe(self, node: str) -> bool:
        info = self._replication(node)
        if info is None:
            return False
        if node == self.primary:
            return info.get("role") == "master"
        return info.get("role") == "slave" and info.get("master_link_status") == "up"

    def primaries(self) -> list[str]:
        """Running nodes that answer and say they are masters (two means split brain)."""
        found = []
        for node in self.backend.nodes:
            if not self.is_running(node):
                continue
            info = self._replication(node)
            if info is not None and info.get("role") == "master":
                found.append(node)
        return found

    def promote(self, node: str) -> None:
        """Make `node` the primary and point every other running node at it. MalloryError
        when `node` does not take the command (paused, say): nothing changed."""
        admin = self._admin(node)
        try:
            admin.execute_command("REPLICAOF", "NO", "ONE")
        except (redis.ConnectionError, redis.TimeoutError, OSError) as exc:
            raise MalloryError(f"{self.name}: cannot make {node} primary: {exc}") from None
        finally:
            admin.close()
        self.primary = node
        address = self.backend.node_address(node)
        for other in self.backend.nodes:
            if other == node or not self.is_running(other):
                continue
            admin = self._admin(other)
            try:
                admin.execute_command("REPLICAOF", address, self.port)
            except (redis.ConnectionError, redis.TimeoutError, OSError):
                pass  # paused or partitioned: it follows the primary named on its next start
            finally:
                admin.close()

    def client(self, node: str, workload: Workload) -> Client:
        return RedisClient(
            self.backend.client_address(node),
            self.port,
            workload.name,
            **key_options(workload),
            timeout=self.client_timeout,
        )
