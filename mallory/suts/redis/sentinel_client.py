"""A Redis client that finds the master through Sentinel and follows failovers.

It asks the sentinels in turn for SENTINEL get-master-addr-by-name and speaks to that
master through a `RedisClient` (the same ops and the same ok/fail/info rules). After a
reply that says the node is no master any more (READONLY) it forgets the connection, and
the next op asks the sentinels again; a lost connection ends in an `info`, after which the
runner opens a fresh client, which asks again too. An op that finds no master is a `fail`:
nothing was sent.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import redis

from mallory.harness.client import Completion, fail
from mallory.suts.redis.client import RedisClient, admin_connection


class NoMaster(Exception):
    """No sentinel named a master this client can reach."""


class SentinelRedisClient:
    #: the workloads it runs (through a RedisClient of the master)
    WORKLOADS = RedisClient.WORKLOADS

    def __init__(
        self,
        sentinels: Sequence[tuple[str, int]],
        master_name: str,
        workload: str,
        *,
        to_client_address: Mapping[str, str] | None = None,
        independent: bool = False,
        key_base: int = 0,
        timeout: float = 1.0,
    ) -> None:
        self.sentinels = list(sentinels)
        self.master_name = master_name
        self.workload = workload
        #: a master's announced address -> the address this client reaches it at
        self.to_client_address = dict(to_client_address or {})
        self.independent = independent
        self.key_base = key_base
        self.timeout = timeout
        self.master: tuple[str, int] | None = None
        self._inner: RedisClient | None = None

    def find_master(self) -> tuple[str, int]:
        """(host, port) of the master, from the first sentinel that names one."""
        problems = []
        for host, port in self.sentinels:
            conn = admin_connection(host, port, self.timeout)
            try:
                reply = conn.execute_command("SENTINEL", "GET-MASTER-ADDR-BY-NAME", self.master_name)
            except (redis.RedisError, OSError) as exc:
                problems.append(f"{host}:{port}: {exc}")
                continue
            finally:
                conn.close()
            if isinstance(reply, (list, tuple)) and len(reply) == 2:
                address = str(reply[0])
                return self.to_client_address.get(address, address), int(reply[1])
            problems.append(f"{host}:{port}: no master named {self.master_name!r}")
        raise NoMaster("; ".join(problems) or "no sentinels")

    def open(self) -> None:
        host, port = self.find_master()
        inner = RedisClient(host, port, self.workload, independent=self.independent,
                            key_base=self.key_base, timeout=self.timeout)
        inner.open()
        self.master, self._inner = (host, port), inner

    def close(self) -> None:
        if self._inner is not None:
            self._inner.close()
            self._inner = None

    def invoke(self, op: Mapping[str, Any]) -> Completion:
        if self._inner is None:
            try:
                self.open()
            except (NoMaster, redis.RedisError, OSError) as exc:
                return fail(op["value"], "no-master", str(exc))
        assert self._inner is not None
        completion = self._inner.invoke(op)
        if completion.type != "ok" and _says_not_master(completion.error):
            self.close()  # the next op asks the sentinels where the master went
        return completion


def _says_not_master(error: Any) -> bool:
    text = str(error)
    return "ReadOnlyError" in text or "READONLY" in text or "not-connected" in text
