"""Jepsen's `results.edn` for a run: the checkers' answers in the shape Jepsen writes.

Jepsen's composed checker answers `{:valid? v, :checker-name {...}, ...}` where each
sub-checker's map has its own `:valid?` and the top one merges them: false beats
:unknown beats true. Here the sub-checkers are the history checker (`:history`, the
CheckResult with Elle's keys: `:anomaly-types`, `:anomalies`, `:not`, `:also-not`) and
the node-side oracles (`:nodes`: log patterns, ASan reports, deaths by signal). Map keys
become keywords, as Jepsen's are, so Jepsen's tools and `mallory check` read it back.
Pure: the text only; the caller writes it next to `history.edn`.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from mallory.history.edn import Keyword, dumps
from mallory.oracles.result import CheckResult, Verdict
from mallory.oracles.triage import Finding

_UNKNOWN = Keyword("unknown")


def merge_valid(verdicts: Iterable[Verdict]) -> Verdict:
    """Jepsen's merge-valid: any false is false, else any unknown is unknown, else true."""
    verdicts = list(verdicts)
    if False in verdicts:
        return False
    if "unknown" in verdicts:
        return "unknown"
    return True


def _edn_valid(valid: Verdict) -> Any:
    return _UNKNOWN if valid == "unknown" else valid


def _keywords(value: Any) -> Any:
    """JSON-shaped data with its map keys as keywords (Jepsen's maps are keyword-keyed)."""
    if isinstance(value, dict):
        return {Keyword(str(k).replace("_", "-")) if isinstance(k, str) else k: _keywords(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_keywords(v) for v in value]
    return value


def history_part(result: CheckResult) -> dict[Keyword, Any]:
    data = result.to_json()
    data.pop("valid")
    return {Keyword("valid?"): _edn_valid(result.valid), **_keywords(data)}


def nodes_part(findings: Iterable[Finding]) -> dict[Keyword, Any]:
    found = [
        {Keyword("oracle"): f.oracle, Keyword("kind"): f.kind, Keyword("node"): f.node,
         Keyword("message"): f.message, Keyword("signature"): f.signature}
        for f in findings
    ]
    return {Keyword("valid?"): not found, Keyword("findings"): found}


def results_edn(history: CheckResult | None, node_findings: Iterable[Finding], history_error: str | None = None) -> str:
    """results.edn's text. `history` None: no history was checked (`history_error` says
    why when it could not be read): that part is :unknown, as Jepsen says of a checker
    that could not decide."""
    if history is not None:
        hist = history_part(history)
    else:
        hist = {Keyword("valid?"): _UNKNOWN, Keyword("error"): history_error or "no history recorded"}
    nodes = nodes_part(node_findings)
    valid = merge_valid([history.valid if history is not None else "unknown", nodes[Keyword("valid?")]])
    return dumps({Keyword("valid?"): _edn_valid(valid), Keyword("history"): hist, Keyword("nodes"): nodes}) + "\n"
