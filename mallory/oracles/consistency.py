"""Which anomalies imply which, which consistency models forbid which anomalies.

These are Elle's tables (elle.consistency-model: `implied-anomalies`, `models`,
`direct-proscribed-anomalies`), restated with friendly model names. They decide two
things: which anomalies a check must look for, given the models the user expects to hold,
and which models a set of found anomalies rules out (Elle's `:not` and `:also-not`).

`garbage-read` (a read of a value no operation ever wrote) is this project's addition;
Elle does not flag it (a documented gap in its rw-register checker). It implies G1a: the
value can only have come from a write that never committed.
"""

from __future__ import annotations

from collections.abc import Iterable

from mallory.errors import MalloryError

#: anomaly -> anomalies it implies (if the key is present, so are the values).
IMPLIED_ANOMALIES: dict[str, list[str]] = {
    "G0": ["G1c", "G0-process"],
    "G0-process": ["G1c-process", "G0-realtime"],
    "G0-realtime": ["G1c-realtime"],
    "G1a": ["G1"],
    "G1b": ["G1"],
    "G1c": ["G1", "G1c-process"],
    "G1c-process": ["G1c-realtime", "G1-process"],
    "G1c-realtime": ["G1-realtime"],
    "G1": ["G1-process"],
    "G1-process": ["G1-realtime"],
    "G-single-item": ["G-single", "G-single-item-process", "G-nonadjacent-item"],
    "G-single-item-process": ["G-single-process", "G-single-item-realtime", "G-nonadjacent-item-process"],
    "G-single-item-realtime": ["G-single-realtime", "G-nonadjacent-item-realtime"],
    "G-single": ["G-nonadjacent", "GSIb", "G-single-process"],
    "G-single-process": ["G-nonadjacent-process", "G-single-realtime"],
    "G-single-realtime": ["G-nonadjacent-realtime"],
    "G-nonadjacent-item": ["G-nonadjacent", "G2-item", "G-nonadjacent-item-process"],
    "G-nonadjacent-item-process": ["G-nonadjacent-process", "G2-item-process", "G-nonadjacent-item-realtime"],
    "G-nonadjacent-item-realtime": ["G2-item-realtime", "G-nonadjacent-realtime"],
    "G-nonadjacent": ["G2", "G-nonadjacent-process"],
    "G-nonadjacent-process": ["G2-process", "G-nonadjacent-realtime"],
    "G-nonadjacent-realtime": ["G2-realtime"],
    "G2": ["G2-process"],
    "G2-item": ["G2", "G2-item-process"],
    "G2-item-process": ["G2-process", "G2-item-realtime"],
    "G2-item-realtime": ["G2-realtime"],
    "G2-process": ["G2-realtime"],
    "GSIa": ["GSI"],
    "GSIb": ["GSI"],
    "incompatible-order": ["G1a"],
    "future-read": ["G1c"],
    "dirty-update": ["G1a"],
    "garbage-read": ["G1a"],
    "lost-update": ["write-skew", "G2-item"],
    "write-skew": ["G2"],
}

#: model -> weaker models it implies (a history satisfying the key satisfies the values).
MODEL_IMPLIES: dict[str, list[str]] = {
    "causal-cerone": ["read-atomic"],
    "consistent-view": ["cursor-stability", "monotonic-view"],
    "cursor-stability": ["read-committed"],
    "forward-consistent-view": ["consistent-view"],
    "read-committed": ["read-uncommitted"],
    "serializable": ["repeatable-read", "update-serializable", "snapshot-isolation"],
    "update-serializable": ["forward-consistent-view"],
    "monotonic-atomic-view": ["read-committed"],
    "monotonic-view": ["read-committed"],
    "monotonic-snapshot-read": ["read-committed"],
    "parallel-snapshot-isolation": ["causal-cerone", "ROLA"],
    "prefix": ["causal-cerone"],
    "read-atomic": ["monotonic-atomic-view"],
    "repeatable-read": ["cursor-stability", "monotonic-atomic-view"],
    "ROLA": ["read-atomic"],
    "snapshot-isolation": [
        "forward-consistent-view", "monotonic-atomic-view", "monotonic-snapshot-read",
        "parallel-snapshot-isolation", "prefix",
    ],
    "strict-serializable": [
        "serializable", "snapshot-isolation", "strong-snapshot-isolation", "strong-session-serializable",
    ],
    "strong-session-read-uncommitted": ["read-uncommitted"],
    "strong-session-read-committed": ["read-committed", "strong-session-read-uncommitted"],
    "strong-read-uncommitted": ["strong-session-read-uncommitted"],
    "strong-read-committed": ["strong-session-read-committed", "strong-read-uncommitted"],
    "strong-session-serializable": ["serializable", "strong-session-snapshot-isolation"],
    "strong-session-snapshot-isolation": ["snapshot-isolation", "strong-session-read-committed"],
    "strong-snapshot-isolation": ["strong-session-snapshot-isolation", "strong-read-committed"],
}

#: other names users may pass (Adya's PL-n levels and synonyms).
MODEL_ALIASES = {
    "PL-1": "read-uncommitted",
    "PL-2": "read-committed",
    "PL-2.99": "repeatable-read",
    "PL-3": "serializable",
    "conflict-serializable": "serializable",
    "PL-SI": "snapshot-isolation",
    "PL-SS": "strict-serializable",
    "strong-serializable": "strict-serializable",
    "PL-CS": "cursor-stability",
    "PL-2+": "consistent-view",
    "PL-FCV": "forward-consistent-view",
    "PL-MSR": "monotonic-snapshot-read",
    "PL-2L": "monotonic-view",
    "PL-3U": "update-serializable",
}

#: model -> anomalies it directly forbids (on top of those of the models it implies).
PROSCRIBED: dict[str, list[str]] = {
    "causal-cerone": ["internal", "G1a"],
    "cursor-stability": ["G1", "G-cursor", "lost-update"],
    "monotonic-view": ["G1", "G-monotonic"],
    "monotonic-snapshot-read": ["G1", "G-MSR"],
    "consistent-view": ["G1", "G-single"],
    "forward-consistent-view": ["G1", "G-SIb"],
    "parallel-snapshot-isolation": ["internal", "G1a"],
    "serializable": ["G1", "G2", "internal"],
    "read-committed": ["G1"],
    "read-uncommitted": ["G0", "duplicate-elements", "cyclic-versions"],
    "prefix": ["internal", "G1a"],
    "snapshot-isolation": ["internal", "G1", "G-SI", "G-nonadjacent"],
    "read-atomic": ["internal", "G1a", "future-read"],
    "repeatable-read": ["G1", "G2-item", "lost-update"],
    "ROLA": ["lost-update"],
    "strict-serializable": ["G1", "G1c-realtime", "G2-realtime"],
    "strong-session-read-uncommitted": ["G0-process"],
    "strong-session-read-committed": ["G1c-process"],
    "strong-read-uncommitted": ["G0-realtime"],
    "strong-read-committed": ["G1c-realtime"],
    "strong-session-snapshot-isolation": ["internal", "G1-process", "G-nonadjacent-process"],
    "strong-snapshot-isolation": ["internal", "G1-realtime", "G-nonadjacent-realtime"],
    "strong-session-serializable": ["G1-process", "G2-process"],
    "update-serializable": ["G1", "G-update"],
}

ALL_MODELS: frozenset[str] = frozenset(MODEL_IMPLIES) | {m for ms in MODEL_IMPLIES.values() for m in ms}
ALL_ANOMALIES: frozenset[str] = (
    frozenset(IMPLIED_ANOMALIES)
    | {a for v in IMPLIED_ANOMALIES.values() for a in v}
    | {a for v in PROSCRIBED.values() for a in v}
    | {"empty-transaction-graph", "cycle-search-timeout"}
)


def _reverse(graph: dict[str, list[str]]) -> dict[str, list[str]]:
    rev: dict[str, list[str]] = {}
    for a, bs in graph.items():
        for b in bs:
            rev.setdefault(b, []).append(a)
    return rev


_IMPLIED_BY = _reverse(IMPLIED_ANOMALIES)
_MODEL_IMPLIED_BY = _reverse(MODEL_IMPLIES)
_PROSCRIBED_BY = _reverse(PROSCRIBED)


def _closure(start: Iterable[str], graph: dict[str, list[str]]) -> set[str]:
    seen = set(start)
    todo = list(seen)
    while todo:
        for nxt in graph.get(todo.pop(), ()):
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return seen


def canonical_model(name: str) -> str:
    model = MODEL_ALIASES.get(name, name)
    if model not in ALL_MODELS:
        raise MalloryError(f"unknown consistency model {name!r}; known: {', '.join(sorted(ALL_MODELS))}")
    return model


def check_anomaly_names(names: Iterable[str]) -> list[str]:
    names = list(names)
    unknown = [a for a in names if a not in ALL_ANOMALIES]
    if unknown:
        raise MalloryError(f"unknown anomaly {unknown[0]!r}; known: {', '.join(sorted(ALL_ANOMALIES))}")
    return names


def implied_anomalies(anomalies: Iterable[str]) -> set[str]:
    """The anomalies plus everything they imply."""
    return _closure(anomalies, IMPLIED_ANOMALIES)


def anomalies_implying(anomalies: Iterable[str]) -> set[str]:
    """Every anomaly whose presence would imply one of these."""
    return _closure(anomalies, _IMPLIED_BY)


def prohibited_anomalies(models: Iterable[str], extra: Iterable[str] = ()) -> set[str]:
    """Anomalies that must not occur if all `models` hold, plus `extra` (and what implies them)."""
    implied_models = _closure((canonical_model(m) for m in models), MODEL_IMPLIES)
    direct = {a for m in implied_models for a in PROSCRIBED.get(m, ())}
    return anomalies_implying(direct) | anomalies_implying(check_anomaly_names(extra))


def impossible_models(anomalies: Iterable[str]) -> set[str]:
    """Models ruled out by the presence of `anomalies`."""
    direct = {m for a in implied_anomalies(anomalies) for m in _PROSCRIBED_BY.get(a, ())}
    return _closure(direct, _MODEL_IMPLIED_BY)


def boundary(anomalies: Iterable[str]) -> tuple[list[str], list[str]]:
    """(weakest models ruled out, the stronger ones also ruled out), like Elle's :not/:also-not."""
    impossible = impossible_models(anomalies)
    weakest = {
        m for m in impossible
        if not any(other in impossible for other in _closure([m], MODEL_IMPLIES) - {m})
    }
    return sorted(weakest), sorted(impossible - weakest)
