"""The mediator API client against a real mediator API on 127.0.0.1 (no firewall queue,
no root): firewall calls round-trip, refusals carry the server's reason."""

from __future__ import annotations

import socket

import pytest

from mallory.errors import MalloryError
from mallory.mediator.client import MediatorClient
from mallory.mediator.service import Mediator

NODES = {"n1": "10.9.1.2", "n2": "10.9.2.2", "n3": "10.9.3.2"}
TOKEN = "client-token"


@pytest.fixture
def mediator():
    m = Mediator(NODES, token=TOKEN, api_address=("127.0.0.1", 0), batch_address=("127.0.0.1", 0)).start()
    yield m
    m.stop()


def client_for(m: Mediator, token: str = TOKEN) -> MediatorClient:
    host, port = m.api.server_address[:2]
    return MediatorClient(host, port, token, timeout=2)


def test_firewall_round_trip(mediator):
    c = client_for(mediator)
    assert sorted(c.partition([["n1"], ["n2", "n3"]])["links"]) == ["n1->n2", "n1->n3", "n2->n1", "n3->n1"]
    assert c.delay([("n2", "n3")], 25)["links"] == ["n2->n3"]
    assert c.duplicate([("n3", "n2")], 2)["links"] == ["n3->n2"]
    assert c.drop([("n2", "n3")])["links"] == ["n2->n3"]
    rules = {(r["src"], r["dst"]): r for r in c.rules()}
    assert {k: rules[("n2", "n3")][k] for k in ("drop", "delay_ms", "copies")} == {"drop": True, "delay_ms": 25.0, "copies": 0}
    assert rules[("n3", "n2")]["copies"] == 2 and len(rules) == 6
    assert c.heal([("n1", "n2")])["links"] == ["n1->n2"]
    assert len(c.heal()["links"]) == 5
    assert c.rules() == [] and c.status()["nodes"] == NODES


def test_refusals_carry_the_servers_reason(mediator):
    c = client_for(mediator)
    with pytest.raises(MalloryError, match="422 .*unknown node"):
        c.drop([("n1", "n9")])
    with pytest.raises(MalloryError, match="400 .*'ms'"):
        c.delay([("n1", "n2")], -1)
    with pytest.raises(MalloryError, match="401 .*X-Mallory-Token"):
        client_for(mediator, token="wrong").metrics()
    assert c.rules() == []  # nothing changed


def test_unreachable_mediator_is_a_mallory_error():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # bound, never listening: connection refused
        with pytest.raises(MalloryError, match="unreachable"):
            MediatorClient("127.0.0.1", port, TOKEN, timeout=1).metrics()
