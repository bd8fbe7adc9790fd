"""Oracles of a cluster's availability once the faults are over (pure).

- cannot restart: the reset after a schedule brought every node but one back; that one
  failed to start, exited before it was ready, or never became ready. With every other
  node healthy the cluster could take it, so the node's own state (or the SUT's handling
  of it) is what keeps it out. Signed by how it failed; the node's last log lines are its
  details, and the first of them a log pattern matches (a line the SUT names as a bug, or a
  panic...) is named there as the likely cause (never in the signature: that one line has
  its own log finding).
- stuck: no client operation succeeded for `limit_s` after every fault of the schedule
  was healed (the history's last `heal` nemesis op), though clients kept asking. Signed by
  its class alone.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from mallory.history.ops import Op
from mallory.log_lines import LogPattern
from mallory.oracles.logs import DEFAULT_PATTERNS, log_tail, scan_log
from mallory.oracles.triage import Finding

ORACLE = "liveness"
CANNOT_RESTART = "cannot-restart"
STUCK = "stuck"
#: the nemesis op that marks every fault healed (`ScheduleChecks.faults_healed` records it)
HEAL = "heal"
#: how a reset can fail to bring a node back (nemesis.nemesis.ResetReport's `unready`)
HOW_UNREADY = ("start-failed", "exited", "not-ready")


def cannot_restart_findings(unready: Mapping[str, Mapping[str, str]], nodes: Sequence[str],
                            logs: Mapping[str, str],
                            patterns: Sequence[LogPattern] = DEFAULT_PATTERNS) -> list[Finding]:
    """`unready`: node -> {"how": one of HOW_UNREADY, "message": the adapter's words}, the
    nodes a reset could not bring back; `nodes`: the cluster's; `logs`: node -> what it
    logged during the schedule. A finding when exactly one node of two or more is unready;
    its details' `log_bug` is the first of the node's last lines one of `patterns` (the log
    oracle's) matches, {"name", "line"}, or None."""
    if len(unready) != 1 or len(nodes) < 2:
        return []
    ((node, why),) = unready.items()
    how = why.get("how", "not-ready")
    message = f"{node} did not come back after the reset ({how}) while every other node did: {why.get('message', '')}".strip()
    tail = log_tail(logs.get(node, ""))
    cause = next(iter(scan_log(tail, node, patterns)), None)
    log_bug = None if cause is None else {"name": cause.kind, "line": cause.message}
    if log_bug is not None:
        message += f" (its log: {log_bug['name']}: {log_bug['line']})"
    details = {"how": how, "reason": why.get("message", ""), "last_log_lines": tail, "log_bug": log_bug}
    return [Finding(ORACLE, CANNOT_RESTART, (how,), message, node, details)]


def stuck_findings(ops: Sequence[Op], limit_s: float, watched_until: int | None = None) -> list[Finding]:
    """A finding when the history's clients got no ok completion within `limit_s` of its
    last `heal` nemesis op, and it was watched that long (or an ok came only later). None
    without such an op: the schedule's faults were never healed while clients ran.
    `watched_until`: when the recording stopped, on the ops' clock (default: its last op;
    clients that fail fast may record their last op a moment before the limit)."""
    heals = [op.time for op in ops if not op.is_client and str(op.f) == HEAL and op.time is not None]
    healed = heals[-1] if heals else None
    if healed is None:
        return []
    after = [op for op in ops if op.is_client and op.time is not None and op.time >= healed]
    first_ok = next((op.time for op in after if op.type == "ok"), None)
    last = max((op.time for op in ops if op.time is not None), default=healed)
    watched = max(last, watched_until or 0) - healed
    limit_ns = limit_s * 1e9
    if (first_ok is not None and first_ok - healed <= limit_ns) or (first_ok is None and watched < limit_ns):
        return []
    invoked = sum(1 for op in after if op.type == "invoke")
    first_ok_after_s = None if first_ok is None else round((first_ok - healed) / 1e9, 3)
    waited = "no ok completion at all" if first_ok_after_s is None else f"the first ok completion after {first_ok_after_s:.1f} s"
    message = f"no client operation succeeded for {limit_s:g} s after every fault healed ({waited}; {invoked} invoked)"
    details = {"limit_s": limit_s, "first_ok_after_s": first_ok_after_s, "watched_s": round(watched / 1e9, 3),
               "invoked_after_heal": invoked}
    return [Finding(ORACLE, STUCK, (), message, None, details)]
