"""Operation generators for the three workloads, in the value shapes Elle and Knossos read.

* `register`: `:read` (invoke value nil, ok value the register), `:write v`, `:cas [old new]`.
  With one key the values are bare, as in Knossos' cas-register; with several keys each
  value is Jepsen's independent tuple `[k v]` (`[k [old new]]` for cas) so a checker can
  split the history per key.
* `list-append`: `:txn` of `[:append k v]` / `[:r k nil]` micro-ops; ok fills reads with lists.
* `rw-register`: `:txn` of `[:w k v]` / `[:r k nil]` micro-ops; ok fills reads with values.

Appended and written values are unique per key (a per-key counter), which Elle needs to map
a read back to its writer. Keys follow Elle's generator: `key_count` keys are active at a
time, picked uniformly or with exponentially falling weights, and a key that has taken
`max_writes_per_key` writes is retired for a fresh one so versions stay short.
Workloads are shared by all worker threads; each worker passes its own `random.Random`.
"""

from __future__ import annotations

import random
import threading
from typing import Any, Protocol

from mallory.errors import MalloryError
from mallory.history.edn import Keyword

APPEND = Keyword("append")
READ = Keyword("r")
WRITE = Keyword("w")

DISTRIBUTIONS = ("uniform", "exponential")


class Workload(Protocol):
    name: str

    def next_op(self, rng: random.Random) -> dict[str, Any]:
        """The next op to invoke: {"f": ..., "value": ...}."""
        ...


class KeySpace:
    """The active keys, their write counters and per-key unique values (thread-safe)."""

    def __init__(
        self,
        key_count: int = 10,
        distribution: str = "exponential",
        max_writes_per_key: int | None = 32,
        key_base: int = 0,
        exponential_base: float = 2.0,
    ) -> None:
        if key_count < 1:
            raise MalloryError(f"workload key_count must be at least 1, not {key_count}")
        if distribution not in DISTRIBUTIONS:
            raise MalloryError(
                f"workload key distribution must be one of {', '.join(DISTRIBUTIONS)}, not {distribution!r}"
            )
        if max_writes_per_key is not None and max_writes_per_key < 1:
            raise MalloryError(f"workload max_writes_per_key must be at least 1, not {max_writes_per_key}")
        self.key_count = key_count
        self.distribution = distribution
        self.max_writes_per_key = max_writes_per_key
        self._weights = (
            [exponential_base ** -i for i in range(key_count)] if distribution == "exponential" else None
        )
        # keys start at key_base: a campaign gives each schedule keys no earlier one touched
        self._active = list(range(key_base, key_base + key_count))
        self._next_fresh = key_base + key_count
        self._last_value: dict[int, int] = {}
        self._lock = threading.Lock()

    def pick(self, rng: random.Random) -> int:
        with self._lock:
            if self._weights is None:
                return rng.choice(self._active)
            return rng.choices(self._active, weights=self._weights)[0]

    def next_value(self, key: int) -> int:
        """A value never before written to `key` (1, 2, 3, ...); retires the key at its limit."""
        with self._lock:
            value = self._last_value.get(key, 0) + 1
            self._last_value[key] = value
            if self.max_writes_per_key is not None and value >= self.max_writes_per_key and key in self._active:
                self._active[self._active.index(key)] = self._next_fresh
                self._next_fresh += 1
            return value


class _TxnWorkload:
    """Transactions of 1..max_txn_length micro-ops, each a write or a read with equal odds."""

    name: str
    write_f: Keyword

    def __init__(self, keys: KeySpace | None = None, min_txn_length: int = 1, max_txn_length: int = 4) -> None:
        if not 1 <= min_txn_length <= max_txn_length:
            raise MalloryError(
                f"workload txn length must satisfy 1 <= min ({min_txn_length}) <= max ({max_txn_length})"
            )
        self.keys = keys or KeySpace()
        self.min_txn_length = min_txn_length
        self.max_txn_length = max_txn_length

    def next_op(self, rng: random.Random) -> dict[str, Any]:
        txn = []
        for _ in range(rng.randint(self.min_txn_length, self.max_txn_length)):
            key = self.keys.pick(rng)
            if rng.random() < 0.5:
                txn.append([READ, key, None])
            else:
                txn.append([self.write_f, key, self.keys.next_value(key)])
        return {"f": "txn", "value": txn}


class ListAppendWorkload(_TxnWorkload):
    name = "list-append"
    write_f = APPEND


class RwRegisterWorkload(_TxnWorkload):
    name = "rw-register"
    write_f = WRITE


class RegisterWorkload:
    """Knossos' cas-register: read, write and cas with equal odds over a small value range."""

    name = "register"

    def __init__(self, key_count: int = 1, value_range: int = 5, key_base: int = 0) -> None:
        if key_count < 1:
            raise MalloryError(f"workload key_count must be at least 1, not {key_count}")
        if value_range < 1:
            raise MalloryError(f"workload value_range must be at least 1, not {value_range}")
        self.key_count = key_count
        self.value_range = value_range
        #: the clients add this to the key on the wire; the history keeps keys 0..key_count-1,
        #: so each schedule's history starts from a register nobody wrote (Knossos' nil)
        self.key_base = key_base

    @property
    def independent(self) -> bool:
        """True when values carry their key as Jepsen's independent tuples [k v]."""
        return self.key_count > 1

    def next_op(self, rng: random.Random) -> dict[str, Any]:
        f = rng.choice(("read", "write", "cas"))
        if f == "read":
            arg: Any = None
        elif f == "write":
            arg = rng.randrange(self.value_range)
        else:
            arg = [rng.randrange(self.value_range), rng.randrange(self.value_range)]
        if self.independent:
            return {"f": f, "value": [rng.randrange(self.key_count), arg]}
        return {"f": f, "value": arg}


WORKLOADS = ("register", "list-append", "rw-register")
#: the `workload` that runs no client operations (no history to check)
NO_WORKLOAD = "none"


def make_workload(name: str, **options: Any) -> Workload:
    """Build a workload by name; a wrong name or option is the user's error."""
    try:
        if name == "register":
            return RegisterWorkload(**options)
        key_options = {k: options.pop(k) for k in ("key_count", "distribution", "max_writes_per_key", "key_base") if k in options}
        if name == "list-append":
            return ListAppendWorkload(KeySpace(**key_options), **options)
        if name == "rw-register":
            return RwRegisterWorkload(KeySpace(**key_options), **options)
    except TypeError as exc:
        raise MalloryError(f"workload {name}: {exc}") from None
    raise MalloryError(f"unknown workload {name!r}; known: {', '.join(WORKLOADS)}")
