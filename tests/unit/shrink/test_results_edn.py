"""results.edn: Jepsen's shape, read back by the project's EDN reader, matching the checks."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from mallory.history.edn import Keyword, loads
from mallory.history.ops import read_history
from mallory.oracles.linearizability import check_linearizable
from mallory.oracles.logs import scan_log
from mallory.oracles.models import CasRegister
from mallory.oracles.result import CheckResult
from mallory.oracles.results_edn import merge_valid, results_edn

K = Keyword

NONLINEARIZABLE = """{:type :invoke, :f :write, :value 1, :process 0, :time 0, :index 0}
{:type :ok, :f :write, :value 1, :process 0, :time 1, :index 1}
{:type :invoke, :f :read, :value nil, :process 1, :time 2, :index 2}
{:type :ok, :f :read, :value 2, :process 1, :time 3, :index 3}
"""


def test_a_real_checker_verdict_and_log_findings_read_back(tmp_path):
    path = tmp_path / "history.edn"
    path.write_text(NONLINEARIZABLE)
    _, history = read_history(path)
    result = check_linearizable(history, CasRegister())
    assert result.valid is False
    logs = scan_log(["[10.1.1.2:7001 term 3 follower] assertion failed: truncating a committed entry"], "n2")
    assert logs
    back = loads(results_edn(result, logs))
    assert back[K("valid?")] is False
    hist = back[K("history")]
    assert hist[K("valid?")] is False
    assert hist[K("checker")] == result.checker
    assert list(hist[K("anomaly-types")]) == result.anomaly_types == ["nonlinearizable"]
    assert set(hist[K("anomalies")]) == set(result.anomalies)
    nodes = back[K("nodes")]
    assert nodes[K("valid?")] is False
    assert [(f[K("oracle")], f[K("kind")], f[K("node")], f[K("signature")]) for f in nodes[K("findings")]] == [
        (f.oracle, f.kind, f.node, f.signature) for f in logs
    ]
    assert all(isinstance(k, Keyword) for k in back)


def test_no_history_is_unknown_and_says_why():
    back = loads(results_edn(None, [], "history.edn:3: not EDN"))
    assert back[K("valid?")] == K("unknown") and isinstance(back[K("valid?")], Keyword)
    assert back[K("history")][K("error")] == "history.edn:3: not EDN"
    assert back[K("nodes")] == {K("valid?"): True, K("findings"): []}


VERDICTS = st.sampled_from([True, False, "unknown"])


@settings(max_examples=100, deadline=None)
@given(VERDICTS, st.booleans())
def test_top_verdict_is_jepsens_merge(history_valid, log_finding):
    result = CheckResult(valid=history_valid, checker="cas-register")
    logs = scan_log(["panic: boom"], "n1") if log_finding else []
    back = loads(results_edn(result, logs))
    if history_valid is False or log_finding:
        assert back[K("valid?")] is False
    elif history_valid == "unknown":
        assert back[K("valid?")] == K("unknown")
    else:
        assert back[K("valid?")] is True
    assert back[K("history")][K("valid?")] == (K("unknown") if history_valid == "unknown" else history_valid)


def test_merge_valid_is_false_then_unknown_then_true():
    assert merge_valid([True, "unknown", False]) is False
    assert merge_valid([True, "unknown"]) == "unknown"
    assert merge_valid([True, True]) is True
    assert merge_valid([]) is True
