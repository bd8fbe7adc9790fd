"""Findings and bug signatures: one bug found a hundred times is one bug.

Every oracle (ASan, log patterns, death by signal, the history checkers) reports
`Finding`s. A finding's signature is a short, filesystem-safe name built from what
identifies the bug and nothing that varies between occurrences: the ASan kind and top
frames (not addresses), a log pattern and its normalised message (numbers, addresses,
ids and timestamps blanked), an anomaly type and the shape of its witness (edge kinds,
number of keys), never the values or op indices. `deduplicate` groups findings by it.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from mallory.oracles.result import CheckResult


@dataclass
class Finding:
    """One observation of a (possible) bug.

    oracle:    "asan", "log", "signal", or the checker name ("list-append", "kv", ...).
    kind:      what it is within that oracle ("heap-use-after-free", "panic", "G1c"...).
    key:       the parts that identify the bug (frames, normalised message, shape).
    message:   the human-readable line (first line of the report, the log line...).
    node:      where it was seen, when known.
    details:   anything else worth keeping (full report text, the case dict).
    """

    oracle: str
    kind: str
    key: tuple[str, ...]
    message: str
    node: str | None = None
    details: dict[str, Any] = field(default_factory=dict)

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


_REL_ORDER = ("ww", "wr", "rw", "process", "realtime")


def _cycle_shape(case: dict[str, Any]) -> str:
    rels = [step["rel"] for step in case.get("cycle", [])]
    if not rels:
        return ""
    rotations = [tuple(rels[i:] + rels[:i]) for i in range(len(rels))]
    return "-".join(min(rotations))


def findings_from_result(result: CheckResult, node: str | None = None) -> list[Finding]:
    """One finding per anomaly type a checker reported (none when valid or unknown).

    Keyed by anomaly type plus the shape of its first witness: a cycle's edge kinds up to
    rotation, or the kind of operation that cannot be linearized. Keys, values, op
    indices and counts are left out, so the same anomaly on other keys and values in
    another run has the same signature.
    """
    if result.valid is not False:
        return []
    out = []
    for kind in result.anomaly_types:
        cases = result.anomalies.get(kind, [])
        first = cases[0] if cases else {}
        if "stuck_op" in first:
            shape = "stuck=" + first["stuck_op"]["op"].split()[0]
        else:
            shape = _cycle_shape(first)
        text = first.get("text", kind)
        out.append(Finding(result.checker, kind, (shape,), text.splitlines()[0] if text else kind, node,
                           {"case": first, "cases": len(cases)}))
    return out
