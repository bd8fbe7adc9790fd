"""Histories from a correct in-memory serializable store are valid; a seeded lost write or
stale read is flagged.

The simulated store applies each transaction atomically at one point between its invoke
and its completion (so the history is strict-serializable), under a random interleaving
of concurrent clients. Some transactions fail (not applied) or end :info (applied or not,
and the process is retired, as in Jepsen).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mallory.history.edn import Keyword
from mallory.history.ops import Op
from mallory.oracles.elle import ElleOptions, check_elle

STRICT = ElleOptions(consistency_models=("strict-serializable",))
KEYS = [Keyword(k) for k in "xyz"]


@dataclass
class _Client:
    process: int
    phase: str = "idle"  # idle -> invoked -> executed -> idle
    txn: list[list[Any]] = field(default_factory=list)
    result: list[list[Any]] = field(default_factory=list)
    outcome: str = "ok"
    invoked_at: int = 0


@dataclass
class Store:
    """A serializable list-append store, with optional seeded bugs."""

    lose_a_write: bool = False
    stale_read: bool = False
    data: dict[Any, list[int]] = field(default_factory=dict)
    last_writer: dict[Any, int] = field(default_factory=dict)  # key -> txn that appended last
    acked_at: dict[int, int] = field(default_factory=dict)  # txn -> position of its :ok
    lost: bool = False
    staled: bool = False

    def execute(self, tid: int, txn: list[list[Any]], invoked_at: int, apply: bool,
                acked: bool) -> list[list[Any]]:
        """Apply `txn` (if `apply`) now; `acked`: the client will be told it committed."""
        out = []
        for f, k, v in txn:
            if f == "append":
                if apply and acked and self.lose_a_write and not self.lost:
                    self.lost = True  # acknowledged, never stored
                elif apply:
                    self.data.setdefault(k, []).append(v)
                    self.last_writer[k] = tid
                out.append([f, k, v])
            else:
                current = list(self.data.get(k, []))
                done_at = self.acked_at.get(self.last_writer.get(k, -1))
                if (self.stale_read and acked and not self.staled and current and done_at is not None
                        and done_at < invoked_at):
                    self.staled = True
                    current = current[:-1]  # the state before a write that completed earlier
                out.append([f, k, current])
        return out


def simulate(rng: random.Random, store: Store, n_clients: int, n_txns: int) -> list[Op]:
    ops: list[Op] = []
    counters = {k: 0 for k in KEYS}
    clients = [_Client(p) for p in range(n_clients)]
    next_process = n_clients
    started = 0

    def emit(process: int, typ: str, value: Any) -> None:
        ops.append(Op(len(ops), process, Keyword(typ), Keyword("txn"), value))

    while started < n_txns or any(c.phase != "idle" for c in clients):
        c = rng.choice(clients)
        if c.phase == "idle":
            if started >= n_txns:
                continue
            started += 1
            txn = []
            for _ in range(rng.randint(1, 4)):
                k = rng.choice(KEYS)
                if rng.random() < 0.5:
                    counters[k] += 1
                    txn.append([Keyword("append"), k, counters[k]])
                else:
                    txn.append([Keyword("r"), k, None])
            c.txn, c.phase, c.invoked_at = txn, "invoked", len(ops)
            c.outcome = rng.choices(["ok", "fail", "info"], [0.85, 0.07, 0.08])[0]
            emit(c.process, "invoke", txn)
        elif c.phase == "invoked":
            apply = c.outcome == "ok" or (c.outcome == "info" and rng.random() < 0.5)
            c.result = store.execute(c.invoked_at, c.txn, c.invoked_at, apply, c.outcome == "ok")
            c.phase = "executed"
        else:
            value = c.result if c.outcome == "ok" else c.txn
            emit(c.process, c.outcome, value)
            if c.outcome == "ok":  # only an acknowledged write has a completion to order by
                store.acked_at[c.invoked_at] = len(ops) - 1
            c.phase = "idle"
            if c.outcome == "info":  # Jepsen retires the process after :info
                c.process = next_process
                next_process += 1
    return ops


def final_reads(ops: list[Op], store: Store) -> list[Op]:
    """A fresh process reads every key after everything else completed."""
    ops = list(ops)
    p = 10_000
    txn = [[Keyword("r"), k, None] for k in KEYS]
    ops.append(Op(len(ops), p, Keyword("invoke"), Keyword("txn"), txn))
    ops.append(Op(len(ops), p, Keyword("ok"), Keyword("txn"), [[Keyword("r"), k, list(store.data.get(k, []))]
                                                               for k in KEYS]))
    return ops


def force_stale(ops: list[Op], store: Store) -> list[Op]:
    """When the random schedule offered no chance for the stale read, stage one."""
    ops = list(ops)
    k = KEYS[0]
    value = 10_000
    ops.append(Op(len(ops), 20_000, Keyword("invoke"), Keyword("txn"), [[Keyword("append"), k, value]]))
    ops.append(Op(len(ops), 20_000, Keyword("ok"), Keyword("txn"), [[Keyword("append"), k, value]]))
    store.data.setdefault(k, []).append(value)
    ops.append(Op(len(ops), 20_001, Keyword("invoke"), Keyword("txn"), [[Keyword("r"), k, None]]))
    ops.append(Op(len(ops), 20_001, Keyword("ok"), Keyword("txn"), [[Keyword("r"), k, store.data[k][:-1]]]))
    return ops


workloads = st.tuples(st.randoms(use_true_random=False), st.integers(2, 5), st.integers(5, 40))
SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(workloads)
def test_correct_store_histories_are_valid(w):
    rng, n_clients, n_txns = w
    store = Store()
    ops = final_reads(simulate(rng, store, n_clients, n_txns), store)
    result = check_elle(ops, "list-append", STRICT)
    assert result.valid is True, result.render()


@SETTINGS
@given(workloads)
def test_a_lost_write_is_flagged(w):
    rng, n_clients, n_txns = w
    store = Store(lose_a_write=True)
    ops = final_reads(simulate(rng, store, n_clients, n_txns), store)
    result = check_elle(ops, "list-append", STRICT)
    if store.lost:
        assert result.valid is False, result.render()
    else:  # no ok append happened at all: nothing was lost
        assert result.valid is True, result.render()


@SETTINGS
@given(workloads)
def test_a_stale_read_is_flagged(w):
    rng, n_clients, n_txns = w
    store = Store(stale_read=True)
    ops = simulate(rng, store, n_clients, n_txns)
    if not store.staled:
        ops = force_stale(ops, store)
    result = check_elle(ops, "list-append", STRICT)
    assert result.valid is False, result.render()
    assert any(t.endswith("-realtime") or t in ("G-single-item", "G2-item", "G1c") for t in result.anomaly_types)
