"""The mediator's EDN edge (edn_api.py) on a real in-process mediator: EDN in and out on the
same routes as JSON, the same checks, and batched client ops entering the timeline."""

from __future__ import annotations

import http.client

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mallory.history.edn import Keyword, loads
from mallory.learner.learner import Learner
from mallory.mediator.advisor import Advisor
from mallory.mediator.edn_api import EdnBodyError, parse_body, render
from mallory.mediator.service import MEDIATOR_NODE, Mediator
from mallory.polling import wait_until
from mallory.timeline.event import Kind

TOKEN = "edn-test"


@pytest.fixture
def mediator():
    m = Mediator({"n1": "10.9.1.2"}, token=TOKEN, api_address=("127.0.0.1", 0), batch_address=("127.0.0.1", 0),
                 batch_interval=0.02).start()
    m.advisor = Advisor(m.windows, Learner.create(policy="qlearning", seed=3), wait_s=2.0, first_window_s=0.2)
    yield m
    m.stop()


def post(m: Mediator, path: str, body: bytes, content_type: str = "application/edn", accept: str | None = None):
    host, port = m.api.server_address[:2]
    conn = http.client.HTTPConnection(host, port, timeout=10)
    headers = {"X-Mallory-Token": TOKEN, "Content-Type": content_type}
    if accept:
        headers["Accept"] = accept
    try:
        conn.request("POST", path, body=body, headers=headers)
        response = conn.getresponse()
        return response.status, response.getheader("Content-Type"), response.read()
    finally:
        conn.close()


def test_keys_and_keyword_values_translate_to_the_json_shapes():
    assert parse_body(b'{:process 3, :type :invoke, :f :write, :start-ns 5}') == {
        "process": 3, "type": "invoke", "f": "write", "start_ns": 5}
    assert type(parse_body(b"{:f :read}")["f"]) is str  # plain str: the API's `type(x) is str` checks hold
    assert parse_body(b'{:ops [{:f :read} {:f "w"}]}') == {"ops": [{"f": "read"}, {"f": "w"}]}
    text = render({"window_ns": [1, 2], "action": "kill:one", "state": None, "nodes": {"n1": "10.0.0.1"}})
    assert loads(text.decode()) == {Keyword("window-ns"): [1, 2], Keyword("action"): "kill:one",
                                    Keyword("state"): None, Keyword("nodes"): {Keyword("n1"): "10.0.0.1"}}
    assert b'"kill:one"' in text  # a string stays a string, never a keyword


JSON_KEYS = st.from_regex(r"[a-z][a-z0-9_]{0,12}", fullmatch=True)
JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(JSON_KEYS, inner, max_size=4),
    max_leaves=20,
)


@given(st.dictionaries(JSON_KEYS, JSON_VALUES, max_size=6))
def test_any_json_shaped_answer_reads_back_as_the_same_request_body(payload):
    assert parse_body(render(payload)) == payload


@pytest.mark.parametrize("raw, reason", [
    (b"{:f", "never closed"),
    (b"[1 2]", "must be an EDN map, got a vector"),
    (b'{"f" 1}', "map keys must be keywords"),
    (b"{:links #{1 2}}", "has no JSON equivalent"),
    (b"\xff", "not UTF-8"),
    (b"{:a " + b"[" * 65 + b"]" * 65 + b"}", "nested deeper than 64 levels"),
    (b"{:a " + b"{:b " * 2000 + b"1" + b"}" * 2001, "nested deeper than 64 levels"),
    (rb'{:f "\ud800"}', "not Unicode text"),
    (rb"{:f \uD800}", "not Unicode text"),
])
def test_bad_edn_bodies_are_refused_with_a_reason(raw, reason):
    with pytest.raises(EdnBodyError, match=reason):
        parse_body(raw)


def test_edn_requests_get_edn_answers_and_the_json_checks(mediator):
    status, ctype, data = post(mediator, "/test/start", b'{:name "t-edn"}')
    assert (status, ctype) == (200, "application/edn")
    assert loads(data.decode())[Keyword("test")][Keyword("name")] == "t-edn"
    status, ctype, data = post(mediator, "/test/start", b"{:name")
    assert (status, ctype) == (400, "application/edn")
    assert "never closed" in loads(data.decode())[Keyword("error")]
    status, _, data = post(mediator, "/client", b"{:process -1, :type :invoke, :f :read}")
    assert status == 400 and "non-negative" in loads(data.decode())[Keyword("error")]
    status, _, data = post(mediator, "/client", b"{:process 9223372036854775808, :type :invoke, :f :read}")
    assert status == 400 and "below 2^63" in loads(data.decode())[Keyword("error")]  # the recording's ids are 64-bit
    status, _, data = post(mediator, "/client", b"{:process 1, :type :begin, :f :read}")
    assert status == 400 and "'type' must be one of" in loads(data.decode())[Keyword("error")]
    # JSON clients may ask for EDN answers too; and JSON stays JSON
    status, ctype, data = post(mediator, "/advisor/catalogue", b'{"actions": ["kill:one"]}', "application/json",
                               accept="application/edn")
    assert (status, ctype, loads(data.decode())) == (200, "application/edn", {Keyword("actions"): ["kill:one"]})
    status, ctype, _ = post(mediator, "/advisor/catalogue", b'{"actions": ["kill:one"]}', "application/json")
    assert (status, ctype) == (200, "application/json")
    assert mediator.api.rejected == 4


def test_a_client_batch_is_checked_whole_then_enters_the_timeline_in_order(mediator):
    committed = []
    mediator.ingest.subscribers.append(committed.extend)
    bad = b"{:ops [{:process 1, :type :invoke, :f :read} {:process 1, :type :ok}]}"
    status, _, data = post(mediator, "/client/batch", bad)
    assert status == 400 and "ops[1]: missing field 'f'" in loads(data.decode())[Keyword("error")]
    for body, reason in ((b"{:ops []}", "1..1000"), (b"{:ops [1]}", "must be an object")):
        status, _, data = post(mediator, "/client/batch", body)
        assert status == 400 and reason in loads(data.decode())[Keyword("error")]
    ops = [(1, "invoke", "read"), (2, "invoke", "write"), (1, "ok", "read"), (2, "info", "write")]
    body = "{:ops [" + " ".join(f"{{:process {p}, :type :{t}, :f :{f}}}" for p, t, f in ops) + "]}"
    status, _, data = post(mediator, "/client/batch", body.encode())
    assert status == 200 and loads(data.decode()) == {Keyword("ok"): True, Keyword("ops"): 4}

    def client_events():
        return [(e.event.id, e.event.data) for e in list(committed)
                if e.event.node == MEDIATOR_NODE and e.event.kind in (Kind.CLIENT_INVOKE, Kind.CLIENT_COMPLETE)]

    seen = wait_until(lambda: len(client_events()) >= 4 and client_events(), 10, "the batch in the timeline")
    assert seen == [(p, f"{f}:{t}") for p, t, f in ops]  # only the good batch: the bad ones changed nothing
