"""The mediator's HTTP API on a real server on 127.0.0.1 (no firewall queue: no root)."""

import http.client
import time

import orjson
import pytest

from mallory.mediator.service import Mediator
from mallory.observer.packet import parse
from mallory.observer.sender import BatchSender
from mallory.timeline.codec import read_records
from mallory.timeline.event import Batch, ClockPair, Event, Kind
from tests.unit.mediator.test_transport import wait_for

NODES = {"n1": "10.9.1.2", "n2": "10.9.2.2", "n3": "10.9.3.2"}
TOKEN = "s3cret"


@pytest.fixture
def mediator(tmp_path):
    m = Mediator(NODES, token=TOKEN, api_address=("127.0.0.1", 0), batch_address=("127.0.0.1", 0),
                 record_dir=tmp_path, batch_interval=0.02).start()
    yield m
    m.stop()


def call(m, method, path, body=None, token=TOKEN, raw=None, headers=None):
    host, port = m.api.server_address[:2]
    conn = http.client.HTTPConnection(host, port, timeout=5)
    data = raw if raw is not None else (orjson.dumps(body) if body is not None else None)
    hdrs = {"X-Mallory-Token": token} if token is not None else {}
    hdrs.update(headers or {})
    conn.request(method, path, body=data, headers=hdrs)
    resp = conn.getresponse()
    payload = orjson.loads(resp.read())
    conn.close()
    return resp.status, payload


def test_firewall_control_round_trip(mediator):
    status, out = call(mediator, "POST", "/firewall/drop", {"partition": [["n1"], ["n2", "n3"]]})
    assert status == 200 and sorted(out["links"]) == ["n1->n2", "n1->n3", "n2->n1", "n3->n1"]
    assert 0 <= out["applied_us"] < 100_000  # the in-thread bound is checked in test_netns_firewall
    status, out = call(mediator, "POST", "/firewall/delay", {"links": ["n2->n3", ["n3", "n2"]], "ms": 25})
    assert status == 200 and out["links"] == ["n2->n3", "n3->n2"]
    status, out = call(mediator, "POST", "/firewall/duplicate", {"links": ["n2->n3"], "copies": 2})
    assert status == 200
    rules = {(r["src"], r["dst"]): r for r in call(mediator, "GET", "/status")[1]["firewall"]["rules"]}
    assert rules[("n2", "n3")] == {"src": "n2", "dst": "n3", "drop": False, "delay_ms": 25.0, "copies": 2, "affected": 0}
    assert rules[("n1", "n2")]["drop"] and len(rules) == 6
    status, out = call(mediator, "POST", "/firewall/heal", {"links": ["n1->n2"]})
    assert status == 200 and out["links"] == ["n1->n2"]
    status, out = call(mediator, "POST", "/firewall/heal", {})
    assert status == 200 and len(out["links"]) == 5
    assert call(mediator, "GET", "/status")[1]["firewall"]["rules"] == []


def test_test_lifecycle_heals_and_client_ops_enter_the_timeline(mediator, tmp_path):
    assert call(mediator, "POST", "/test/start", {"name": "t1"})[1]["test"]["name"] == "t1"
    call(mediator, "POST", "/firewall/drop", {"links": ["n1->n2"]})
    assert call(mediator, "POST", "/client", {"process": 3, "type": "invoke", "f": "write"})[0] == 200
    assert call(mediator, "POST", "/client", {"process": 3, "type": "ok", "f": "write"})[0] == 200
    status, out = call(mediator, "POST", "/test/end", {})
    assert status == 200 and out["healed"]["links"] == ["n1->n2"] and out["test"]["name"] == "t1"
    assert call(mediator, "GET", "/status")[1]["test"] is None
    assert wait_for(lambda: mediator.ingest.stats()["nodes"].get("mediator", {}).get("events", 0) >= 6)
    with open(tmp_path / "events.jsonl", "rb") as f:
        records = list(read_records(f))
    own = [e for r in records if isinstance(r, Batch) for e in r.events]
    kinds = [(e.kind, e.id, e.data) for e in own]
    assert (Kind.CLIENT_INVOKE, 3, "write:invoke") in kinds and (Kind.CLIENT_COMPLETE, 3, "write:ok") in kinds
    assert (Kind.FAULT, 0, "drop") in kinds
    assert isinstance(records[0], ClockPair) and records[0].node == "mediator"


@pytest.mark.parametrize(
    "method, path, body, status, reason",
    [
        ("POST", "/firewall/drop", {"links": []}, 400, "non-empty list"),
        ("POST", "/firewall/drop", {"links": ["n1=>n2"]}, 400, "bad link"),
        ("POST", "/firewall/drop", {"links": ["n1->n9"]}, 422, "unknown node"),
        ("POST", "/firewall/drop", {"partition": "n1"}, 400, "list of lists"),
        ("POST", "/firewall/delay", {"links": ["n1->n2"]}, 400, "'ms'"),
        ("POST", "/firewall/delay", {"links": ["n1->n2"], "ms": True}, 400, "'ms'"),
        ("POST", "/firewall/duplicate", {"links": ["n1->n2"], "copies": "2"}, 400, "integer"),
        ("POST", "/client", {"process": -1, "type": "invoke", "f": "w"}, 400, "non-negative"),
        ("POST", "/client", {"process": 1, "type": "maybe", "f": "w"}, 400, "'type'"),
        ("POST", "/client", {"type": "ok", "f": "w"}, 400, "missing field 'process'"),
        ("POST", "/test/start", {}, 400, "missing field 'name'"),
        ("POST", "/test/start", {"name": "x" * 129}, 400, "1..128 characters"),
        ("POST", "/client", {"process": 2**64 - 1, "type": "ok", "f": "w"}, 400, "below 2^63"),
        ("POST", "/nope", {}, 404, "no POST /nope"),
        ("POST", "/nope", [1], 404, "no POST /nope"),  # the route is looked up before the body is read
    ],
)
def test_malformed_requests_get_a_reason_change_nothing_and_are_counted(mediator, method, path, body, status, reason):
    call(mediator, "POST", "/firewall/drop", {"links": ["n2->n3"]})
    before = call(mediator, "GET", "/status")[1]["firewall"]["rules"]
    got, out = call(mediator, method, path, body)
    assert got == status and reason in out["error"]
    after = call(mediator, "GET", "/metrics")[1]
    assert after["api_rejected"] == 1 and reason in after["api_reasons"][0]
    assert after["firewall"]["rules"] == before


def test_token_and_body_checks(mediator):
    assert call(mediator, "GET", "/status", token=None)[0] == 401
    assert call(mediator, "GET", "/status", token="wrong")[0] == 401
    assert call(mediator, "POST", "/firewall/heal", raw=b"{not json")[0] == 400
    status, out = call(mediator, "POST", "/firewall/heal", raw=b"[1, 2]")
    assert status == 400 and "JSON object" in out["error"]
    assert call(mediator, "GET", "/metrics")[1]["api_rejected"] == 4
    assert call(mediator, "GET", "/status")[0] == 200  # still serving
    assert call(mediator, "GET", "/status#now")[0] == 200  # a fragment names no other resource


def test_observer_batches_are_ingested_joined_and_recorded(mediator, tmp_path):
    from tests.unit.mediator.packets import tcp

    pkt = tcp(NODES["n1"], NODES["n2"], 1000, 2000, 77, b"hello")
    p = parse(pkt)
    mediator.firewall.seen.add(p.id)
    committed = []
    mediator.ingest.subscribers.append(committed.extend)
    senders = []
    try:
        for node in ("n1", "n2", "n3"):
            senders.append(BatchSender(ClockPair(node, 10, 1_000_000_000_000), mediator.receiver.address).start())
        senders[0].submit([Event("n1", Kind.SEND, 100, p.id, p.data), Event("n1", Kind.SEND, 120, 12345, "")], 200)
        senders[1].submit([Event("n2", Kind.RECV, 150, p.id, p.data)], 200)
        senders[2].submit([], 200)
        for s in senders:
            assert s.flush(5)
        stats = call(mediator, "GET", "/metrics")[1]["ingest"]
        assert stats["nodes"]["n1"] == {"batches": 1, "events": 2, "lost": 0, "joined": 1, "unjoined": 1, "next_seq": 1}
        assert stats["nodes"]["n2"]["joined"] == 1
        recv = [c for c in list(committed) if c.event.kind is Kind.RECV]
        assert len(recv) == 1 and recv[0].send is not None and recv[0].send.event.node == "n1"
    finally:
        for s in senders:
            s.close()
    with open(tmp_path / "events.jsonl", "rb") as f:
        records = list(read_records(f))
    assert ClockPair("n1", 10, 1_000_000_000_000) in records
    assert any(isinstance(r, Batch) and r.node == "n2" and r.events[0].id == p.id for r in records)


def test_recording_is_readable_by_mallory_analyze(tmp_path):
    import subprocess
    import sys

    m = Mediator({"n1": "10.9.1.2", "n2": "10.9.2.2"}, token=TOKEN, api_address=("127.0.0.1", 0),
                 batch_address=("127.0.0.1", 0), record_dir=tmp_path, batch_interval=0.01).start()
    t0 = time.monotonic_ns()
    try:
        m.ingest.on_clock(ClockPair("n1", t0, time.time_ns()))
        m.ingest.on_clock(ClockPair("n2", t0, time.time_ns()))
        for k in range(5):
            ts = t0 + k * 20_000_000
            m.ingest.on_batch(Batch("n1", k, ts + 10_000_000, [Event("n1", Kind.SEND, ts, 1000 + k, "aa")]))
            m.ingest.on_batch(Batch("n2", k, ts + 10_000_000, [Event("n2", Kind.RECV, ts + 1000, 1000 + k, "aa")]))
        time.sleep(0.2)
    finally:
        m.stop()
    second = Mediator({"n1": "10.9.1.2"}, token=TOKEN, api_address=("127.0.0.1", 0),
                      batch_address=("127.0.0.1", 0), record_dir=tmp_path)
    assert second.recording_path.name == "events.1.jsonl"  # a restart never mixes two streams
    second.stop()
    out = subprocess.run([sys.executable, "-m", "mallory.cli", "analyze", str(tmp_path / "events.jsonl"),
                          "--window", "0.02", "--json"], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    windows = [orjson.loads(line) for line in out.stdout.splitlines() if line.strip()]
    assert len(windows) >= 3, out.stdout


@pytest.mark.parametrize(
    "path, field, extra, reason",
    [
        ("/test/start", "name", b"", "must be str, got [[["),
        ("/client/batch", "ops", b"", "ops[0] must be an object, got [[["),
        ("/firewall/delay", "ms", b', "links": ["n1->n2"]', "'ms' must be"),
        ("/window", "wait_ms", b', "start_ns": 0, "end_ns": 1', "'wait_ms' must be"),
    ],
)
def test_a_deeply_nested_value_of_the_wrong_type_is_a_400_not_a_crash(mediator, path, field, extra, reason):
    # orjson parses up to 1024 levels; quoting such a value in the reason must not recurse that deep
    nested = b"[" * 1000 + b"]" * 1000
    value = b"[" + nested + b"]" if field == "ops" else nested
    raw = b'{"' + field.encode() + b'": ' + value + extra + b"}"
    status, out = call(mediator, "POST", path, raw=raw)
    assert status == 400 and reason in out["error"]
    assert call(mediator, "GET", "/metrics")[1]["api_bugs"] == 0
