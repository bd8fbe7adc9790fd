"""The EDN reader/writer and the history formats the harness and the checkers share."""

from __future__ import annotations

import io

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mallory.errors import MalloryError
from mallory.history import edn
from mallory.history.edn import Keyword, Symbol
from mallory.history.ops import (
    HistoryError,
    Op,
    pair_calls,
    read_history_text,
    write_edn,
    write_jsonl,
)


def test_edn_features_jepsen_histories_use():
    text = """
    ; a comment line
    [{:type :invoke, :f :read :process 0 :time 84944594608 :value nil}
     ; a comment inside the collection
     {:type :info :process :nemesis :f :start :value [:isolate #{1 2}]
      :error [:not-found "etcdserver: \\"key\\" not found"]
      :exception {:via [[clojure.lang.RestFn invoke "RestFn.java" 397]]}}
     {:type :ok :process 1 :value {0 100, 1 0} :index 7 :op-index 3 :flag true :other false}]
    """
    [forms] = edn.read_all(text)
    assert forms[0]["time"] == 84944594608 and forms[0]["value"] is None
    assert isinstance(forms[0]["type"], Keyword) and forms[0]["type"] == "invoke"
    assert forms[1]["value"] == [Keyword("isolate"), frozenset({1, 2})]
    assert forms[1]["error"][1] == 'etcdserver: "key" not found'
    assert isinstance(forms[1]["exception"]["via"][0][0], Symbol)
    assert forms[2]["value"] == {0: 100, 1: 0} and forms[2]["op-index"] == 3
    assert forms[2]["flag"] is True and forms[2]["other"] is False


def test_keyword_and_string_stay_distinct_when_written():
    assert edn.dumps([Keyword("x"), "x", Symbol("y"), None, True, -3, {Keyword("a"): [1, 2]}]) == \
        '[:x "x" y nil true -3 {:a [1 2]}]'


edn_values = st.recursive(
    st.none() | st.booleans() | st.integers(-2**70, 2**70)
    | st.text(max_size=8) | st.builds(Keyword, st.from_regex(r"[a-z][a-z0-9\-]{0,6}", fullmatch=True)),
    lambda children: st.lists(children, max_size=4)
    | st.dictionaries(st.integers(0, 9) | st.builds(Keyword, st.from_regex(r"[a-z]{1,4}", fullmatch=True)),
                      children, max_size=3),
    max_leaves=12,
)


@settings(max_examples=200, deadline=None)
@given(edn_values)
def test_edn_round_trip(value):
    back = edn.loads(edn.dumps(value))
    assert back == value
    assert type(back) is type(value)


@pytest.mark.parametrize("text,line,what", [
    ('{:type :invoke :process 0}\n{:type :ok :process 0\n', 2, "never closed"),
    ('{:type :invoke :process 0}\n{:type :ok :process 0]}\n', 2, "closes"),
    ('{:type :invoke :process 0}\n{:type :done :process 0}\n', 2, ":type"),
    ('{:type :invoke :process 0 :index "x"}\n', 1, ":index"),
    ('{:type :ok :process 0 :f}\n', 1, "odd number"),
])
def test_malformed_edn_names_the_line(text, line, what):
    with pytest.raises(MalloryError, match=rf"h.edn:{line}: .*{what}"):
        read_history_text(text, "edn", "h.edn")


def test_malformed_json_and_etcd_name_the_line():
    with pytest.raises(HistoryError, match=r"h.jsonl:2: malformed JSON"):
        read_history_text('{"type":"invoke","process":0}\n{"type":\n', "json", "h.jsonl")
    with pytest.raises(HistoryError, match=r"e.log:2: not a jepsen.util op line"):
        read_history_text("INFO  jepsen.util - 0\t:invoke\t:read\tnil\nWARN something\n", "porcupine-etcd", "e.log")


def _sample() -> list[Op]:
    K = Keyword
    return [
        Op(0, 0, K("invoke"), K("txn"), [[K("append"), K("x"), 1], [K("r"), 5, None]], time=10),
        Op(1, K("nemesis"), K("info"), K("start"), [K("isolate"), {K("n1"): [K("n2")]}], time=11),
        Op(2, 0, K("ok"), K("txn"), [[K("append"), K("x"), 1], [K("r"), 5, [1, 2]]], time=12),
        Op(3, 1, K("invoke"), K("write"), 3, time=13),
        Op(4, 1, K("info"), K("write"), 3, time=14, error=K("timeout")),
    ]


def test_history_edn_and_jsonl_round_trip():
    ops = _sample()
    out = io.StringIO()
    write_edn(ops, out)
    assert out.getvalue().splitlines()[0] == \
        "{:index 0, :time 10, :type :invoke, :process 0, :f :txn, :value [[:append :x 1] [:r 5 nil]]}"
    fmt, back = read_history_text(out.getvalue())
    assert fmt == "edn"
    assert [(o.index, o.process, o.type, o.f, o.value, o.time, o.error) for o in back] == \
        [(o.index, o.process, o.type, o.f, o.value, o.time, o.error) for o in ops]
    raw = io.BytesIO()
    write_jsonl(ops, raw)
    fmt, back = read_history_text(raw.getvalue().decode())
    assert fmt == "json"
    # JSON has no keywords: mop names and f come back as keywords, keys as equal strings
    assert [(o.process, o.type, o.f, o.value) for o in back] == [(o.process, o.type, o.f, o.value) for o in ops]


def test_pairing_and_its_errors():
    calls = pair_calls(_sample())
    assert [(c.invoke.index, c.status) for c in calls] == [(0, "ok"), (3, "info")]
    assert calls[0].value == [["append", "x", 1], ["r", 5, [1, 2]]]
    K = Keyword
    double = [Op(0, 0, K("invoke"), K("read")), Op(1, 0, K("invoke"), K("read"))]
    with pytest.raises(HistoryError, match="invokes again"):
        pair_calls(double)
    orphan = [Op(0, 0, K("ok"), K("read"))]
    with pytest.raises(HistoryError, match="no open invoke"):
        pair_calls(orphan)
    never = pair_calls([Op(0, 2, K("invoke"), K("write"), 1)])
    assert never[0].status == "info" and never[0].done is None


def test_sparse_indices_are_made_dense_in_file_order():
    text = "{:index 10 :type :invoke :process 0 :f :read}\n{:index 962 :type :ok :process 0 :f :read :value 1}\n"
    _, ops = read_history_text(text)
    assert [o.index for o in ops] == [0, 1]
    assert ops[1].extra["source-index"] == 962


def test_ops_inside_one_vector_know_their_lines():
    text = "; knossos style\n[{:process 0, :type :invoke, :f :read}\n ; comment\n {:process 0, :type :ok, :f :read}\n" \
           " {:process 1, :type :okk, :f :read}]\n"
    with pytest.raises(HistoryError, match=r"k.edn:5: op :type"):
        read_history_text(text, "edn", "k.edn")
    _, ops = read_history_text(text.replace(":okk", ":invoke"), "edn", "k.edn")
    assert [o.line for o in ops] == [2, 4, 5]


def test_line_numbers_never_rescan_the_text(monkeypatch):
    # Counting newlines from the start of the text for each op made reading quadratic
    # (a 24 MB history took minutes): only errors may take that slow path.
    calls = []
    real = edn._line_of
    monkeypatch.setattr(edn, "_line_of", lambda text, pos: calls.append(pos) or real(text, pos))
    stream = "".join(f'{{:type :invoke, :process {i}, :f :txn, :value [[:append :x {i}] [:r :y nil]]}}\n'
                     for i in range(2000))
    _, ops = read_history_text(stream)
    _, nested = read_history_text("[" + stream + "]")
    assert ops[-1].line == 2000 and nested[-1].line == 2000
    assert calls == []
