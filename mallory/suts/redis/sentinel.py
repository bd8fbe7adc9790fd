"""Redis with replication and Sentinel failover: the instrumented Redis of suts/redis.

Every node runs a redis-server (the "sut" process: kill and pause act on it, clock and disk
faults reach it) and a sentinel (the "sentinel" process, kept running and outside the
in-process faults: it is the failure detector that notices a killed or paused server, votes
and promotes a replica; network faults do reach it). Node 1 starts as master, the others as its
replicas; sentinel timeouts are small (down after 1 s, failover timeout 3 s) so a failover
completes within a few 2.5 s windows. Clients find the master through Sentinel
(SENTINEL get-master-addr-by-name) and look again after a connection loss or a READONLY
reply, so they follow failovers.

Who is master is Sentinel's word: a node restarted after a kill starts as a replica of the
master the sentinels agree on (or as master when that is itself). A node is ready when its
sentinel agrees with the others and the node plays its part (master, or a replica with its
link up to that master); while waiting, a node that disagrees is pointed at the agreed
master with REPLICAOF (what Sentinel itself does after 8 s), so a reset converges quickly.
AOF persistence is on (fsync every second, Redis' default for AOF).
"""

from __future__ import annotations

import os
import signal as signals
import time
from collections import Counter
from pathlib import Path

import redis

from mallory.cluster.backend import ClusterBackend, NodeProcess
from mallory.errors import MalloryError
from mallory.harness.adapter import HasPrimaries, ProcessAdapter
from mallory.harness.client import Client, key_options
from mallory.harness.workload import Workload
from mallory.suts.redis.build import ensure_redis_built
from mallory.suts.redis.client import admin_connection
from mallory.suts.redis.sentinel_client import SentinelRedisClient

MASTER_NAME = "mallory"
SENTINEL_PORT = 26379
REPAIR_INTERVAL_S = 1.0
#: Sentinel reads a master's INFO every 10 s by default, and only from INFO does it learn
#: the replicas it may promote: 1 s lets a failover right after a (re)start find them.
INFO_PERIOD_MS = 1000
_DOWN_FLAGS = {"s_down", "o_down", "disconnected"}


class RedisSentinelAdapter(ProcessAdapter, HasPrimaries):
    name = "redis-sentinel"
    process_name = "sut"
    stop_timeout = 5.0
    ready_timeout = 30.0
    ready_interval = 0.2

    def __init__(
        self,
        backend: ClusterBackend,
        port: int = 6379,
        sentinel_port: int = SENTINEL_PORT,
        build_dir: Path | None = None,
        asan: bool | None = None,
        down_after_ms: int = 1000,
        failover_timeout_ms: int = 3000,
        client_timeout: float = 1.0,
    ) -> None:
        super().__init__(backend)
        if asan is None:
            asan = os.environ.get("MALLORY_REDIS_ASAN") == "1"
        self.build_dir = build_dir or ensure_redis_built(asan=asan)
        self.port = port
        self.sentinel_port = sentinel_port
        self.down_after_ms = down_after_ms
        self.failover_timeout_ms = failover_timeout_ms
        self.client_timeout = client_timeout
        self.initial_master = backend.nodes[0]
        self._sentinels: dict[str, NodeProcess] = {}
        self._by_address = {backend.node_address(n): n for n in backend.nodes}
        self._last_repair: dict[str, float] = {}
        self._tuned: set[int] = set()  # sentinel pids told the shorter INFO period

    @property
    def redis_server(self) -> Path:
        return self.build_dir / "bin" / "redis-server"

    @property
    def redis_sentinel(self) -> Path:
        return self.build_dir / "bin" / "redis-sentinel"

    # -- configuration -------------------------------------------------------------------

    def _server_conf(self, node: str, master: str) -> str:
        data = self.backend.data_dir(node)
        lines = [
            f"bind {self.backend.node_address(node)}",
            f"port {self.port}",
            f'dir "{data}"',
            'save ""',
            "appendonly yes",
            "appendfsync everysec",
            "protected-mode no",
            "daemonize no",
            'logfile ""',
            "repl-timeout 5",
            "repl-ping-replica-period 1",
        ]
        if master != node:
            lines.append(f"replicaof {self.backend.node_address(master)} {self.port}")
        return "\n".join(lines) + "\n"

    def _sentinel_conf(self, node: str) -> str:
        master = self.backend.node_address(self.initial_master)
        return "\n".join([
            f"bind {self.backend.node_address(node)}",
            f"port {self.sentinel_port}",
            f'dir "{self.backend.data_dir(node)}"',
            "protected-mode no",
            "daemonize no",
            'logfile ""',
            "sentinel resolve-hostnames no",
            f"sentinel monitor {MASTER_NAME} {master} {self.port} {len(self.backend.nodes) // 2 + 1}",
            f"sentinel down-after-milliseconds {MASTER_NAME} {self.down_after_ms}",
            f"sentinel failover-timeout {MASTER_NAME} {self.failover_timeout_ms}",
            f"sentinel parallel-syncs {MASTER_NAME} 1",
        ]) + "\n"  # fmt: skip

    def _conf_path(self, node: str) -> Path:
        return self.backend.data_dir(node) / "redis.conf"

    def _starting(self, node: str) -> None:
        """The server's config, written right before each start: a replica of the master
        the sentinels agree on (the initial master on the first start)."""
        master = self.agreed_master() or self.initial_master
        self._conf_path(node).write_text(self._server_conf(node, master))

    def command(self, node: str) -> list[str]:
        return [str(self.redis_server), str(self._conf_path(node))]

    # -- processes -----------------------------------------------------------------------

    def start(self, node: str) -> NodeProcess:
        """Start the node's server, and its sentinel if that is not running."""
        proc = super().start(node)
        self._ensure_sentinel(node)
        return proc

    def _ensure_sentinel(self, node: str) -> None:
        """Start the node's sentinel unless it runs (one that died rejoins from the initial
        config and learns the current one from its peers' hello messages)."""
        sentinel = self._sentinels.get(node)
        if sentinel is None or not self.backend.is_running(sentinel):
            conf = self.backend.data_dir(node) / "sentinel.conf"
            conf.write_text(self._sentinel_conf(node))  # sentinel rewrites it with what it learns
            # Without the SUT's env, so without the clock/disk fault shim: a sentinel whose
            # clock jumps enters TILT mode for 30 s and fails nothing over, so the campaign's
            # clock faults would switch the failure detector off instead of testing Redis.
            # Sentinels here play the separate hosts they run on in production.
            self._sentinels[node] = self.backend.spawn(node, [str(self.redis_sentinel), str(conf)], name="sentinel")

    def sentinel_process(self, node: str) -> NodeProcess | None:
        return self._sentinels.get(node)

    def teardown(self, node: str) -> None:
        sentinel = self._sentinels.pop(node, None)
        if sentinel is not None and self.backend.is_running(sentinel):
            self.backend.signal(sentinel, signals.SIGKILL)
            if self.backend.wait(sentinel, 10.0) is None:
                raise MalloryError(f"{self.name}: {node}'s sentinel {sentinel.pid} survived SIGKILL for 10 s")
        super().teardown(node)

    def extra_log_paths(self, node: str) -> list[Path]:
        return [self.backend.log_dir(node) / "sentinel.log"]

    # -- roles ---------------------------------------------------------------------------

    def _connection(self, node: str, port: int) -> redis.Redis:
        return admin_connection(self.backend.client_address(node), port)

    def _ask(self, node: str, port: int, *command: object) -> object | None:
        """One command to a node's server or sentinel; None when it does not answer."""
        conn = self._connection(node, port)
        try:
            return conn.execute_command(*command)
        except (redis.RedisError, OSError):
            return None
        finally:
            conn.close()

    def sentinel_view(self, node: str) -> str | None:
        """The master node `node`'s sentinel names, None when it does not answer."""
        sentinel = self._sentinels.get(node)
        if sentinel is None or not self.backend.is_running(sentinel):
            return None
        reply = self._ask(node, self.sentinel_port, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", MASTER_NAME)
        if not isinstance(reply, (list, tuple)) or len(reply) != 2:
            return None
        return self._by_address.get(str(reply[0]))

    def _sentinel_table(self, node: str, what: str) -> list[dict[str, str]] | None:
        """SENTINEL REPLICAS / SENTINELS of the node's sentinel as dicts, None if no answer."""
        reply = self._ask(node, self.sentinel_port, "SENTINEL", what, MASTER_NAME)
        if not isinstance(reply, list):
            return None
        # redis-py parses these replies into dicts; a raw reply is a flat key/value list
        return [
            {str(k): str(v) for k, v in (item.items() if isinstance(item, dict) else zip(item[::2], item[1::2]))}
            for item in reply
            if isinstance(item, (dict, list))
        ]

    def sentinel_settled(self, node: str, master: str) -> bool:
        """The node's sentinel sees every other node's server as a healthy replica and
        every other sentinel, so it can vote and pick a replica in the next failover."""
        replicas = self._sentinel_table(node, "REPLICAS")
        sentinels = self._sentinel_table(node, "SENTINELS")
        if replicas is None or sentinels is None:
            return False
        healthy = {r.get("ip") for r in replicas if not _DOWN_FLAGS & set(r.get("flags", "").split(","))}
        peers = [s for s in sentinels if not _DOWN_FLAGS & set(s.get("flags", "").split(","))]
        wanted = {self.backend.node_address(n) for n in self.backend.nodes if n != master}
        return wanted <= healthy and len(peers) >= len(self.backend.nodes) - 1

    def _tune_sentinels(self) -> None:
        for node, sentinel in self._sentinels.items():
            if sentinel.pid not in self._tuned and self.backend.is_running(sentinel):
                if self._ask(node, self.sentinel_port, "SENTINEL", "DEBUG", "info-period", INFO_PERIOD_MS) is not None:
                    self._tuned.add(sentinel.pid)

    def agreed_master(self) -> str | None:
        """The master a majority of the sentinels name, None without such a majority."""
        views = Counter(v for v in (self.sentinel_view(n) for n in self.backend.nodes) if v is not None)
        if not views:
            return None
        master, votes = views.most_common(1)[0]
        return master if votes > len(self.backend.nodes) // 2 else None

    def replication(self, node: str) -> dict | None:
        """INFO replication of the node's server, None when it does not answer."""
        conn = self._connection(node, self.port)
        try:
            return conn.info("replication")
        except (redis.RedisError, OSError):
            return None
        finally:
            conn.close()

    def primaries(self) -> list[str]:
        """Running servers that say they are masters (two means split brain)."""
        found = []
        for node in self.backend.nodes:
            if self.is_running(node):
                info = self.replication(node)
                if info is not None and info.get("role") == "master":
                    found.append(node)
        return found

    def probe(self, node: str) -> bool:
        """Every sentinel answers, names the same master and knows the whole cluster, and
        the node plays its part."""
        views = {self.sentinel_view(n) for n in self.backend.nodes}
        if len(views) != 1 or None in views:
            return False
        master = views.pop()
        if not all(self.sentinel_settled(n, master) for n in self.backend.nodes):
            return False
        info = self.replication(node)
        if info is None:
            return False
        if node == master:
            return info.get("role") == "master"
        return (
            info.get("role") == "slave"
            and info.get("master_host") == self.backend.node_address(master)
            and info.get("master_link_status") == "up"
        )

    def _repair(self, node: str) -> None:
        """Point a node that disagrees with the sentinels at their master (at most once per
        REPAIR_INTERVAL_S), once that master really is one."""
        now = time.monotonic()
        if now - self._last_repair.get(node, 0.0) < REPAIR_INTERVAL_S:
            return
        self._last_repair[node] = now
        master = self.agreed_master()
        if master is None or master == node:
            return
        master_info = self.replication(master)
        info = self.replication(node)
        if master_info is None or master_info.get("role") != "master" or info is None:
            return
        if info.get("role") == "master" or info.get("master_host") != self.backend.node_address(master):
            self._ask(node, self.port, "REPLICAOF", self.backend.node_address(master), self.port)

    def wait_ready(self, node: str, timeout: float | None = None) -> None:
        """Block until the node is ready, repairing its role on the way; MalloryError if it
        dies or the timeout passes."""
        limit = self.ready_timeout if timeout is None else timeout
        deadline = time.monotonic() + limit
        while True:
            if not self.is_running(node):
                raise MalloryError(f"{self.name}: {node} exited before it was ready; see {self.log_paths(node)[0]}")
            for other in self.backend.nodes:
                self._ensure_sentinel(other)
            self._tune_sentinels()
            if self.probe(node):
                return
            if time.monotonic() >= deadline:
                views = {n: self.sentinel_view(n) for n in self.backend.nodes}
                info = self.replication(node) or {}
                raise MalloryError(
                    f"{self.name}: {node} not ready after {limit} s (sentinels name {views}; "
                    f"{node} is {info.get('role')}, master_host {info.get('master_host')}, "
                    f"link {info.get('master_link_status')})"
                )
            self._repair(node)
            time.sleep(self.ready_interval)

    # -- clients -------------------------------------------------------------------------

    def client(self, node: str, workload: Workload) -> Client:
        """A client that finds the master through the sentinels (whichever `node` says)."""
        return SentinelRedisClient(
            sentinels=[(self.backend.client_address(n), self.sentinel_port) for n in self.backend.nodes],
            master_name=MASTER_NAME,
            to_client_address={self.backend.node_address(n): self.backend.client_address(n) for n in self.backend.nodes},
            workload=workload.name,
            **key_options(workload),
            timeout=self.client_timeout,
        )
