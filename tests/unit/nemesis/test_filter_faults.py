"""Filter sets as faults (nemesis/faults/filters.py) through the Nemesis, around a named fake
mediator that keeps the set in force as the real one does: which sets are offered or refused
and why, roles bound at enact time and verified by reading back, one window, heal, reset."""

from __future__ import annotations

import random

import pytest

from mallory.errors import MalloryError
from nemesis.faults.base import FaultContext
from nemesis.faults.filters import FilterSetFaults, bind_roles
from nemesis.nemesis import Nemesis, check_fault_names

SETS = {"drop-appends-to-a-follower": frozenset({"leader", "follower"}), "isolate-n3": frozenset()}


class FakeBackend:
    nodes = ["n1", "n2", "n3"]


class FakeAdapter:
    """Every node runs and is ready."""

    name = "fake"

    def is_running(self, node: str) -> bool:
        return True

    def wait_ready(self, node: str, timeout: float | None = None) -> None:
        pass


class FakeLeaderAdapter(FakeAdapter):
    """n2 leads (or nobody, during an election)."""

    leading: list[str] = ["n2"]

    def primaries(self) -> list[str]:
        return list(self.leading)


class FakeFilterMediator:
    """The mediator's filter-set and firewall calls; `served` are the sets it has."""

    def __init__(self, served=SETS) -> None:
        self.served = {name: sorted(roles) for name, roles in served.items()}
        self.active: str | None = None
        self.roles: dict[str, str] = {}
        self.switches: list[tuple[str | None, dict]] = []

    def filter_sets(self) -> dict:
        return {"sets": self.served, "active": self.active, "roles": self.roles}

    def switch_filters(self, name, roles=None) -> dict:
        if name is not None and name not in self.served:
            raise MalloryError(f"mediator POST /filters: 422 no filter set {name!r}")
        ended = {"set": self.active, "roles": self.roles, "messages": {}} if self.active else None
        self.switches.append((name, dict(roles or {})))
        self.active, self.roles = name, dict(roles or {})
        return {"active": name, "roles": self.roles, "ended": ended}

    def heal(self, links=None) -> dict:
        return {"links": []}

    def rules(self) -> list:
        return []


def nemesis(adapter=None, mediator=None, enabled=None) -> Nemesis:
    ctx = FaultContext(FakeBackend(), adapter or FakeLeaderAdapter(), mediator or FakeFilterMediator())
    return Nemesis(ctx, enabled or ["filters"], [FilterSetFaults(SETS)])


def test_a_set_is_enacted_with_its_roles_bound_then_healed_after_its_window():
    mediator = FakeFilterMediator()
    n = nemesis(mediator=mediator)
    assert n.actions() == ["filters:drop-appends-to-a-follower", "filters:isolate-n3", "noop"]
    report = n.enact("filters:drop-appends-to-a-follower", random.Random(4))
    roles = report.params["roles"]
    assert roles["leader"] == "n2" and roles["follower"] in ("n1", "n3")
    assert report.verified and report.nodes == sorted(roles.values()) and n.one_window(report)
    assert mediator.active == "drop-appends-to-a-follower" and mediator.roles == roles
    n.heal(report)
    assert report.healed and mediator.active is None and n.active == []
    assert report.heal_evidence["ended"]["set"] == "drop-appends-to-a-follower"


def test_the_same_draw_binds_the_same_followers():
    one = nemesis().enact("filters:drop-appends-to-a-follower", random.Random(9)).params["roles"]
    two = nemesis().enact("filters:drop-appends-to-a-follower", random.Random(9)).params["roles"]
    assert one == two


def test_without_a_leader_now_the_role_stays_unbound_and_says_so():
    adapter = FakeLeaderAdapter()
    adapter.leading = []
    report = nemesis(adapter).enact("filters:drop-appends-to-a-follower", random.Random(1))
    assert "leader" not in report.params["roles"] and report.evidence["unbound"] == ["leader"]
    assert report.verified


def test_a_set_naming_the_leader_is_refused_where_no_leader_can_be_told():
    n = nemesis(FakeAdapter(), enabled=None)
    assert n.actions() == ["filters:isolate-n3", "noop"]
    assert "cannot tell which node leads" in n.refused["filters:drop-appends-to-a-follower"]
    with pytest.raises(MalloryError, match="cannot tell which node leads"):
        nemesis(FakeAdapter(), enabled=["filters:drop-appends-to-a-follower"])


def test_sets_the_mediator_does_not_have_are_refused():
    class Without(FakeFilterMediator):
        def filter_sets(self) -> dict:
            raise MalloryError("mediator GET /filters: 409 this mediator has no filter sets")

    n = Nemesis(FaultContext(FakeBackend(), FakeLeaderAdapter(), Without()), None, [FilterSetFaults(SETS)])
    assert "the mediator runs no filter sets" in n.refused["filters:isolate-n3"]
    n = nemesis(mediator=FakeFilterMediator(served={"isolate-n3": frozenset()}), enabled=None)
    assert "has no filter set 'drop-appends-to-a-follower'" in n.refused["filters:drop-appends-to-a-follower"]


def test_a_reset_takes_a_set_still_in_force_out_and_health_says_if_one_is():
    mediator = FakeFilterMediator()
    n = nemesis(mediator=mediator)
    n.enact("filters:isolate-n3", random.Random(1))
    mediator.switch_filters("isolate-n3")  # as if a heal had been lost
    assert "filter set isolate-n3 is still in force" in n.health_problems()
    report = n.reset()
    assert report.healthy and mediator.active is None


def test_fault_names_are_checked_against_the_files_sets():
    check_fault_names(["filters:isolate-n3", "partition"], [FilterSetFaults(SETS)])
    with pytest.raises(MalloryError, match="unknown spec 'isolate-n4'.*drop-appends-to-a-follower, isolate-n3"):
        check_fault_names(["filters:isolate-n4"], [FilterSetFaults(SETS)])
    with pytest.raises(MalloryError, match="unknown fault family 'filters'"):
        check_fault_names(["filters"])


def test_roles_are_bound_among_the_right_nodes():
    rng = random.Random(3)
    for _ in range(20):
        roles = bind_roles(frozenset({"leader", "follower", "second-follower"}), ["n1", "n2", "n3"], ["n1"], rng)
        assert roles["leader"] == "n1" and {roles["follower"], roles["second-follower"]} == {"n2", "n3"}
    assert bind_roles(frozenset({"follower"}), ["n1", "n2"], ["n1", "n2"], rng) == {}  # everyone leads
    assert set(bind_roles(frozenset({"follower"}), ["n1", "n2"], [], rng).values()) <= {"n1", "n2"}
