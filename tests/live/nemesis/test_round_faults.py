"""Round faults against the real mediator (root: network namespaces): three nodes, the
mediator in the gateway, and in the middle of every round datagrams on every link, which
must arrive exactly where the drawn round does not cut. Nothing is left in the firewall
after the window. No SUT runs: the example SUT's spec only names the round length."""

from __future__ import annotations

import random
import time
import uuid

import pytest

from mallory import paths
from mallory.cluster.netns import NetnsCluster
from mallory.harness.spec import load_spec
from mallory.harness.spec_adapter import SpecAdapter
from mallory.mediator.client import MediatorClient
from nemesis.faults.base import FaultContext
from nemesis.faults.rounds import RoundFaults, round_length
from nemesis.nemesis import Nemesis
from tests.live.netns_helpers import TOKEN, MediatorProcess, check_links

pytestmark = pytest.mark.timeout(180)

#: long rounds, so that a check of every link fits in the middle of each
ROUND_S = 1.5


@pytest.fixture(scope="module")
def live(tmp_path_factory):
    cluster = NetnsCluster.up(f"rf-{uuid.uuid4().hex[:6]}", 3, data_root=tmp_path_factory.mktemp("rounds"))
    try:
        mediator = MediatorProcess(cluster).start()
        client = MediatorClient(cluster.layout.gateway_control_address, mediator.port, TOKEN)
        adapter = SpecAdapter(load_spec(paths.SUTS / "example" / "example.toml"), cluster)  # never started
        yield cluster, FaultContext(cluster, adapter, client)
    finally:
        cluster.down()


def test_the_spec_names_the_round_length(live):
    _, ctx = live
    assert round_length(ctx) == 0.3


@pytest.mark.parametrize("spec, seed", [("isolate", 4), ("lossy-sync", 5), ("random-drop", 1)])
def test_each_round_cuts_exactly_its_links_and_the_window_leaves_none(live, spec, seed):
    cluster, ctx = live
    family = RoundFaults(window_s=3 * ROUND_S, d=2, k=0, drop_p=0.4, round_s=ROUND_S)
    nemesis = Nemesis(ctx, enabled=[f"rounds:{spec}"], families=[family])
    report = nemesis.enact(f"rounds:{spec}", random.Random(seed))
    started = time.monotonic()  # the family's clock started a moment before: checks land mid-round
    rounds = [{tuple(link.split("->")) for link in r["links"]} for r in report.params["rounds"]]
    assert len(rounds) == 3 and any(rounds) and report.verified
    for index, cut in enumerate(rounds):
        time.sleep(max(0.0, started + index * ROUND_S + 0.15 - time.monotonic()))
        check_links(cluster, cut)
        assert time.monotonic() < started + (index + 1) * ROUND_S, "the check ran past its round"
    time.sleep(max(0.0, started + 3 * ROUND_S + 0.3 - time.monotonic()))
    assert ctx.mediator.rules() == []
    check_links(cluster, set())
    nemesis.heal(report)
    assert report.heal_evidence["rounds_enacted"] == 3 and report.heal_evidence["unanswered"] == []
    assert report.heal_evidence["dropped_during"] >= 10 * len(set().union(*rounds))  # check_links' datagrams
    assert [line["round"] for line in report.evidence["applied"]] == [0, 1, 2, 3]


def test_a_heal_mid_window_lifts_the_round_in_force(live):
    cluster, ctx = live
    family = RoundFaults(window_s=30.0, d=3, k=0, round_s=10.0)
    nemesis = Nemesis(ctx, enabled=["rounds:isolate"], families=[family])
    report = nemesis.enact("rounds:isolate", random.Random(1))  # seed 1 isolates n3 in the first round
    assert sorted(report.links) == ["n1->n3", "n2->n3", "n3->n1", "n3->n2"]
    check_links(cluster, {tuple(link.split("->")) for link in report.links})
    nemesis.heal(report)  # long before the window is over
    assert ctx.mediator.rules() == [] and report.links == []
    check_links(cluster, set())
