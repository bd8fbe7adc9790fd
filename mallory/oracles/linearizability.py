"""Linearizability checking, Porcupine-style.

Wing & Gong's search with Lowe's just-in-time linearization: walk a doubly-linked list of
call/return entries in real-time order; at a call, try to linearize that op now (the
model step must succeed) unless (linearized-set, state) was already explored (the
memoisation that makes it practical); at a return whose op is not yet linearized, undo
the last choice. Open ops (info, never completed) return at +infinity, so they may take
effect at any point after their invocation, or never. Models that are per-key (kv) are
checked one partition at a time (P-compositionality): the history is linearizable iff
every key's sub-history is.

A time budget and a cap on memoised states turn a search that would exhaust the machine
into `unknown`. On failure the result names the longest linearizable prefix found and the
op that cannot be placed after it.
"""

from __future__ import annotations

import gc
import time
from collections import defaultdict
from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import Any

from mallory.history.ops import Call, Op, pair_calls
from mallory.oracles.models import INF, LinOp, Model
from mallory.oracles.result import CheckResult

DEFAULT_MAX_STATES = 5_000_000
#: Memory the memo table may use, estimated per entry from the bitset width.
DEFAULT_MEMORY_LIMIT = 512 * 2**20
#: Partitions are first searched with this many states each, then 8x more, and so on: a
#: history is invalid as soon as one partition is, and some are far easier to refute.
FIRST_TRIAL_STATES = 20_000
TRIAL = "trial budget"
#: after a search that memoised more states than this, a full collection (see check_linearizable)
COLLECT_AFTER_STATES = 100_000


class _Entry:
    __slots__ = ("op", "match", "prev", "next", "time", "is_call")

    def __init__(self, op: LinOp | None, is_call: bool, t: float) -> None:
        self.op = op
        self.is_call = is_call
        self.time = t
        self.match: _Entry | None = None
        self.prev: _Entry | None = None
        self.next: _Entry | None = None


@dataclass
class PartitionResult:
    valid: bool | str
    key: Hashable
    n_ops: int
    prefix: list[LinOp] = field(default_factory=list)
    prefix_state: Any = None
    stuck: LinOp | None = None
    reason: str = ""
    states: int = 0


class _Budget:
    def __init__(self, deadline: float | None, max_states: int, memory_limit: int) -> None:
        self.deadline = deadline
        self.max_states = max_states
        self.memory_limit = memory_limit

    def states_for(self, n_ops: int) -> int:
        """The memo-table cap for a partition of n_ops: a (bitset, state) entry costs roughly
        150 bytes of tuple, set slot and state plus the bitset's n_ops / 8 bytes."""
        return max(1, min(self.max_states, self.memory_limit // (150 + n_ops // 8)))


def _build_list(ops: list[LinOp]) -> _Entry:
    events: list[tuple[float, int, int, _Entry]] = []
    for op in ops:
        call = _Entry(op, True, op.call)
        ret = _Entry(op, False, op.ret)
        call.match = ret
        # Ties (only possible among open ops at +inf) keep calls before returns.
        events.append((op.call, 0, op.id, call))
        events.append((op.ret, 1, op.id, ret))
    events.sort(key=lambda e: (e[0], e[1], e[2]))
    head = _Entry(None, False, -1)
    prev = head
    for _, _, _, entry in events:
        prev.next = entry
        entry.prev = prev
        prev = entry
    return head


def check_partition(model: Model, ops: list[LinOp], key: Hashable, budget: _Budget,
                    state_cap: int | None = None) -> PartitionResult:
    """Lowe's algorithm over one partition. Op ids are re-numbered locally for the bitset.

    `state_cap` (below the budget's own cap) makes a trial run: exceeding it gives
    unknown with reason TRIAL, so the caller can retry with more."""
    local = [LinOp(i, op.call, op.ret, op.input, op.output, op.source, op.key) for i, op in enumerate(ops)]
    originals = {i: op for i, op in enumerate(ops)}
    head = _build_list(local)
    bits = [1 << i for i in range(len(local))]
    cache: set[tuple[int, Any]] = set()
    stack: list[tuple[_Entry, Any]] = []
    state = model.initial
    linearized = 0
    best: list[int] = []
    best_state = state
    step = model.step
    max_states = budget.states_for(len(ops))
    trial = state_cap is not None and state_cap < max_states
    if trial:
        max_states = state_cap  # type: ignore[assignment]
    deadline = budget.deadline
    best_len = 0
    entry = head.next
    iterations = 0
    # The hot loop: lift/unlift (remove an op's call and return entries from the list, and
    # put them back) are inlined.
    while head.next is not None:
        iterations += 1
        if iterations & 0xFFF == 0 and deadline is not None and time.monotonic() > deadline:
            return PartitionResult("unknown", key, len(ops), reason="time limit reached", states=len(cache))
        if entry.is_call:  # type: ignore[union-attr]
            op = entry.op  # type: ignore[union-attr]
            ok, new_state = step(state, op.input, op.output)
            if ok:
                new_lin = linearized | bits[op.id]
                memo = (new_lin, new_state)
                if memo not in cache:
                    cache.add(memo)
                    if len(cache) > max_states:
                        return PartitionResult(
                            "unknown", key, len(ops),
                            reason=TRIAL if trial else f"more than {max_states} states (memory budget)",
                            states=len(cache),
                        )
                    stack.append((entry, state))
                    if len(stack) > best_len:
                        best_len = len(stack)
                        best = [e.op.id for e, _ in stack]  # type: ignore[union-attr]
                        best_state = new_state
                    state = new_state
                    linearized = new_lin
                    # lift
                    entry.prev.next = entry.next  # type: ignore[union-attr]
                    entry.next.prev = entry.prev  # type: ignore[union-attr]
                    match = entry.match  # type: ignore[union-attr]
                    match.prev.next = match.next
                    if match.next is not None:
                        match.next.prev = match.prev
                    entry = head.next
                    continue
            entry = entry.next  # type: ignore[union-attr]
        else:
            if not stack:
                prefix = [originals[i] for i in best]
                done = set(best)
                stuck = min((op for op in local if op.id not in done), key=lambda o: (o.ret, o.call))
                return PartitionResult(
                    False, key, len(ops), prefix, best_state, originals[stuck.id], states=len(cache)
                )
            entry, state = stack.pop()
            linearized &= ~bits[entry.op.id]  # type: ignore[union-attr]
            # unlift
            match = entry.match
            match.prev.next = match
            if match.next is not None:
                match.next.prev = match
            entry.prev.next = entry  # type: ignore[union-attr]
            entry.next.prev = entry  # type: ignore[union-attr]
            entry = entry.next
    return PartitionResult(True, key, len(ops), states=len(cache))


def _op_words(model: Model, op: LinOp) -> str:
    inv = op.source.invoke
    done = op.source.done
    where = f"line {inv.line}" if inv.line is not None else f"index {inv.index}"
    end = (
        f", completed {done.type} at line {done.line}" if done is not None and done.line is not None
        else f", completed {done.type} at index {done.index}" if done is not None
        else ", never completed"
    )
    return f"process {inv.process} {model.describe(op)} (invoked at {where}{end})"


#: ops of the longest prefix (the last in linearization order) drawn before the stuck op
AROUND_PREFIX = 10
#: at most this many ops are described around the point where the search got stuck
AROUND_MAX = 40


def around_stuck(model: Model, r: PartitionResult, partition: list[LinOp]) -> list[dict[str, Any]]:
    """The ops of a failed partition around the point where no linearization exists, for a
    Knossos/Porcupine-style diagram: every op that overlaps the span from the invocation
    of the earliest of the prefix's last AROUND_PREFIX ops (and the stuck op) to the stuck
    op's completion; the AROUND_MAX invoked nearest the stuck op when there are more.

    Each: history positions `call` and `ret` (None: never completed), `index` (the invoke's),
    process, status, the model's words, and `linearized`: its place in the prefix's
    linearization order (None: not linearized).
    """
    assert r.stuck is not None
    place = {op.id: k for k, op in enumerate(r.prefix)}
    shown = r.prefix[-AROUND_PREFIX:] + [r.stuck]
    start = min(op.call for op in shown)
    end = r.stuck.ret if r.stuck.ret != INF else max(op.call for op in shown)
    overlapping = [op for op in partition if op.call <= end and op.ret >= start]
    nearest = sorted(overlapping, key=lambda op: abs(op.call - r.stuck.call))[:AROUND_MAX]
    return [
        {"index": op.source.invoke.index, "process": op.source.invoke.process, "status": op.source.status,
         "call": int(op.call), "ret": None if op.ret == INF else int(op.ret), "op": model.describe(op),
         "linearized": place.get(op.id), "stuck": op is r.stuck}
        for op in sorted(nearest, key=lambda op: op.call)
    ]


def check_linearizable(
    history: list[Op],
    model: Model,
    time_limit: float | None = None,
    max_states: int = DEFAULT_MAX_STATES,
    memory_limit: int = DEFAULT_MEMORY_LIMIT,
    source: str = "<history>",
) -> CheckResult:
    """Is the client part of `history` linearizable with respect to `model`?"""
    calls: list[Call] = pair_calls(history, source=source)
    ops = model.lin_ops(calls)
    partitions: dict[Hashable, list[LinOp]] = defaultdict(list)
    for op in ops:
        partitions[op.key].append(op)
    budget = _Budget(None if time_limit is None else time.monotonic() + time_limit, max_states, memory_limit)
    started = time.monotonic()
    results: list[PartitionResult] = []
    pending = sorted(partitions, key=lambda k: (len(partitions[k]), repr(k)))
    cap: int | None = FIRST_TRIAL_STATES if len(pending) > 1 else None  # trials only help with several
    failed_early = False
    while pending and not failed_early:
        retry = []
        for key in pending:
            res = check_partition(model, partitions[key], key, budget, cap)
            if res.reason == TRIAL:
                retry.append(key)
                continue
            results.append(res)
            if res.valid is False or res.reason == "time limit reached":
                failed_early = True
                break
        pending, cap = retry, (cap * 8 if cap is not None else None)
    elapsed = time.monotonic() - started
    stats = {
        "ops": len(ops),
        "partitions": len(partitions),
        "states": sum(r.states for r in results),
        "seconds": round(elapsed, 3),
    }
    if stats["states"] > COLLECT_AFTER_STATES:
        # The memo's (bitset, state) tuples freed last (a set frees in hash order) stay in
        # CPython's tuple free list, scattered over every pymalloc arena the memo filled, and
        # keep each arena resident: ~280 MB after a search that reached its memory budget,
        # until a full collection clears the free lists. Cheap next to such a search.
        gc.collect()
    if not ops:
        # Knossos calls a history without client operations linearizable (knossos
        # mongodb-v0-ack-rollback-.edn holds only nemesis ops); say there was nothing to check.
        return CheckResult(True, model.name, [], {}, ["linearizable: no client operations to check"],
                           notes=["the history has no client operations that take effect"], stats=stats)
    failed = [r for r in results if r.valid is False]
    unknown = [r for r in results if r.valid == "unknown"]
    if failed:
        r = failed[0]
        assert r.stuck is not None
        keyword = "" if r.key is None else f" on key {r.key!r}"
        explanation = [
            f"not linearizable{keyword}: the longest linearizable prefix has {len(r.prefix)} of {r.n_ops} ops, "
            f"leaving the state {r.prefix_state!r}; then this op cannot be placed:",
            "  " + _op_words(model, r.stuck),
        ]
        tail = r.prefix[-5:]
        if tail:
            explanation.append("last ops of that prefix, in linearization order:")
            explanation.extend("  " + _op_words(model, op) for op in tail)
        case = {
            "key": None if r.key is None else repr(r.key),
            "prefix_length": len(r.prefix),
            "prefix_ops": [op.source.invoke.index for op in r.prefix],
            "state_after_prefix": repr(r.prefix_state),
            "stuck_op": {
                "index": r.stuck.source.invoke.index,
                "process": r.stuck.source.invoke.process,
                "op": model.describe(r.stuck),
                "line": r.stuck.source.invoke.line,
            },
            "around": around_stuck(model, r, partitions[r.key]),
        }
        return CheckResult(False, model.name, ["nonlinearizable"], {"nonlinearizable": [case]}, explanation,
                           not_models=["linearizable"], stats=stats)
    if unknown:
        reasons = sorted({r.reason for r in unknown})
        keys = ", ".join(repr(r.key) for r in unknown if r.key is not None)
        explanation = [f"search gave up ({'; '.join(reasons)})" + (f" on keys {keys}" if keys else "")]
        return CheckResult("unknown", model.name, [], {}, explanation, stats=stats)
    return CheckResult(True, model.name, [], {}, [f"linearizable: {len(ops)} ops in {len(partitions)} partition(s)"],
                       stats=stats)
