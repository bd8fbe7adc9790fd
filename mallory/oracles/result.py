"""What every history checker returns: a verdict, named anomalies and words a human can read."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from mallory.errors import ExitCode

Verdict = Literal[True, False, "unknown"]

#: `mallory check` exit codes, as Jepsen's CLI: 0 valid, 1 invalid, 2 unknown.
EXIT_CODES = {True: ExitCode.OK, False: ExitCode.FAILED, "unknown": ExitCode.UNKNOWN}


@dataclass
class CheckResult:
    """A checker's answer.

    valid:         True, False or "unknown" (budget exhausted, nothing to check...).
    checker:       which checker produced it ("list-append", "cas-register", ...).
    anomaly_types: sorted names of what was found (Elle names for transactional checks,
                   "nonlinearizable" for the linearizability checker).
    anomalies:     per type, a list of cases (plain dicts, JSON-able).
    explanation:   human sentences, printed by `mallory check`.
    not_models / also_not: consistency models ruled out (Elle's :not / :also-not).
    notes:         remarks that do not change the verdict (e.g. where the project is
                   stricter than its reference).
    """

    valid: Verdict
    checker: str
    anomaly_types: list[str] = field(default_factory=list)
    anomalies: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    explanation: list[str] = field(default_factory=list)
    not_models: list[str] = field(default_factory=list)
    also_not: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    stats: dict[str, Any] = field(default_factory=dict)

    @property
    def exit_code(self) -> int:
        return EXIT_CODES[self.valid]

    def verdict_word(self) -> str:
        return {True: "valid", False: "INVALID", "unknown": "unknown"}[self.valid]

    def to_json(self) -> dict[str, Any]:
        return {
            "valid": self.valid,
            "checker": self.checker,
            "anomaly_types": self.anomaly_types,
            "anomalies": self.anomalies,
            "not": self.not_models,
            "also_not": self.also_not,
            "explanation": self.explanation,
            "notes": self.notes,
            "stats": self.stats,
        }

    def render(self) -> str:
        lines = [f"{self.checker}: {self.verdict_word()}"]
        if self.anomaly_types:
            lines.append("anomalies: " + ", ".join(self.anomaly_types))
        if self.not_models:
            lines.append("not: " + ", ".join(self.not_models))
        if self.also_not:
            lines.append("also not: " + ", ".join(self.also_not))
        lines.extend(self.explanation)
        lines.extend(f"note: {n}" for n in self.notes)
        return "\n".join(lines)
