"""Findings and bug signatures: one root cause found a hundred times is one bug.

Every oracle reports `Finding`s. A finding's signature is a short, filesystem-safe name
built from its oracle family, its class and the parts that identify its root cause, and
nothing that varies between sightings of that cause:

- a history checker gives at most one finding per history, however many anomalies of
  however many types it saw (`findings_from_result`). Its class is, for the Elle-style
  checkers, the weakest model of `HISTORY_CLASSES` the history violates; for the
  linearizability checkers, "nonlinearizable". The anomalies (types, cases, models ruled
  out) are the finding's details and the sighting's record, never its signature;
- a log pattern: its name and the normalised line (`logs.scan_log`);
- an ASan report: its kind and top program frames, not addresses (`asan.parse_asan`);
- a death by signal: the signal and the node's last log line, normalised
  (`logs.death_finding`).

`deduplicate` groups findings by signature.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from mallory.oracles.result import CheckResult

#: The classes of an Elle-style history's finding, weakest model first: a history is
#: classed by the first of these models it violates. "serializable": the data alone
#: contradict every serial order (lost, reordered or dirty writes, broken isolation);
#: "strong-session-serializable" / "strict-serializable": some serial order explains the
#: data, but none that keeps each process's order / real-time order (stale reads).
#: Finer classes (the anomaly types, or the weakest model of Elle's whole lattice) split one
#: root cause into many bugs: whether a reader happened to see an acknowledged append
#: before a failover lost it decides between incompatible-order, G1c, G-single-item or G2-item,
#: and each schedule's mix differs.
HISTORY_CLASSES = ("serializable", "strong-session-serializable", "strict-serializable")

#: the anomaly type, and class, of the linearizability checkers' findings
NONLINEARIZABLE = "nonlinearizable"


@dataclass
class Finding:
    """One observation of a (possible) bug.

    oracle:    "asan", "log", "signal", or the checker name ("list-append", "kv", ...).
    kind:      its class within that oracle ("heap-use-after-free", "panic",
               "not-serializable", "nonlinearizable"...).
    key:       the parts that identify the bug within its class (frames, normalised
               message); empty when the class says it all.
    message:   the human-readable line (first line of the report, the log line...).
    node:      where it was seen, when known.
    details:   anything else worth keeping (full report text, the checker's result).
    seen:      what this sighting saw beyond its class: a history's anomaly types.
    """

    oracle: str
    kind: str
    key: tuple[str, ...]
    message: str
    node: str | None = None
    details: dict[str, Any] = field(default_factory=dict)
    seen: tuple[str, ...] = ()

    @property
    def signature(self) -> str:
        digest = hashlib.sha1("\x1f".join((self.oracle, self.kind) + self.key).encode()).hexdigest()[:12]
        slug = re.sub(r"[^A-Za-z0-9]+", "-", f"{self.oracle}-{self.kind}").strip("-").lower()
        return f"{slug}-{digest}"


@dataclass
class Bug:
    """All findings that share one signature."""

    signature: str
    first: Finding
    count: int = 0
    nodes: set[str] = field(default_factory=set)

    def sighting(self) -> dict[str, Any]:
        """What these findings, all of one schedule, say about the sighting: how often the
        bug showed, on which nodes, and what it saw (a history's anomaly types)."""
        return {"occurrences": self.count, "nodes": sorted(self.nodes), "seen": list(self.first.seen)}


def deduplicate(findings: Iterable[Finding]) -> dict[str, Bug]:
    """Group findings by signature, in order of first appearance."""
    bugs: dict[str, Bug] = {}
    for f in findings:
        sig = f.signature
        bug = bugs.get(sig)
        if bug is None:
            bug = bugs[sig] = Bug(sig, f)
        bug.count += 1
        if f.node is not None:
            bug.nodes.add(f.node)
    return bugs


def history_class(result: CheckResult) -> str:
    """The class of an invalid history's finding: "nonlinearizable", or "not-" the weakest
    model of HISTORY_CLASSES the result rules out (from Elle's :not and :also-not)."""
    if NONLINEARIZABLE in result.anomaly_types:
        return NONLINEARIZABLE
    ruled_out = set(result.not_models) | set(result.also_not)
    weakest = next((m for m in HISTORY_CLASSES if m in ruled_out), None)
    # None only for anomalies no model proscribes (Elle's GSIa/GSIb, which no checker here finds)
    return "invalid" if weakest is None else f"not-{weakest}"


def findings_from_result(result: CheckResult) -> list[Finding]:
    """The finding of an invalid history: one, whatever anomalies it showed (none when the
    history is valid or the check could not tell).

    Signed by checker and class only (`history_class`), so another mix of anomalies, on
    other keys and values, over any number of transactions, is the same bug. The whole
    result (every anomaly type and its cases) is its details; the types are what it `seen`.
    """
    if result.valid is not False:
        return []
    kind = history_class(result)
    if kind == NONLINEARIZABLE:
        message = result.explanation[0] if result.explanation else f"{result.checker} history not linearizable"
    else:
        message = f"{result.checker} history {kind.replace('-', ' ', 1)}: {', '.join(result.anomaly_types)}"
    return [Finding(result.checker, kind, (), message, None, result.to_json(), tuple(result.anomaly_types))]
