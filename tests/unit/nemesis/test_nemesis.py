"""The Nemesis's catalogue logic and the membership family, around a named fake adapter
(the live behaviour of every fault is in tests/live/nemesis/test_catalogue.py), and the
real backends and mediator client against the protocols the faults use of them."""

from __future__ import annotations

import inspect
import random

import pytest

from mallory.cluster.backend import NodeProcess
from mallory.cluster.docker import DockerCluster
from mallory.cluster.netns import NetnsCluster
from mallory.errors import MalloryError
from mallory.harness.adapter import StopOutcome
from mallory.mediator.client import MediatorClient
from nemesis.faults.base import FaultBackend, FaultContext, FaultReport, Firewall
from nemesis.nemesis import Nemesis


class FakeBackend:
    nodes = ["n1", "n2", "n3"]


class FakeMembershipAdapter:
    """Records membership and process calls; every node runs; n1 is the primary."""

    name = "fake-members"

    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []
        self.primary = "n1"

    def is_running(self, node: str) -> bool:
        return True

    def process(self, node: str):
        return None

    def wait_ready(self, node: str, timeout: float | None = None) -> None:
        pass

    def kill(self, node: str) -> None:
        self.calls.append(("kill", node))

    def pause(self, node: str) -> None:
        self.calls.append(("pause", node))

    def resume(self, node: str) -> None:
        self.calls.append(("resume", node))

    def primaries(self) -> list[str]:
        return [self.primary]

    def promote(self, node: str) -> None:
        self.calls.append(("promote", node))
        self.primary = node

    def remove_member(self, node: str) -> None:
        self.calls.append(("remove", node))

    def add_member(self, node: str) -> None:
        self.calls.append(("add", node))


def test_membership_remove_is_healed_by_adding_back():
    adapter = FakeMembershipAdapter()
    nemesis = Nemesis(FaultContext(FakeBackend(), adapter), enabled=["membership"])
    assert nemesis.actions() == ["membership:promote", "membership:promote-paused", "membership:remove", "noop"]
    assert "no mediator" in nemesis.refused["membership:promote-cut-off"]
    report = nemesis.enact("membership:remove", random.Random(1))
    node = report.nodes[0]
    assert adapter.calls == [("remove", node)] and nemesis.active == [report]
    nemesis.heal(report)
    assert adapter.calls == [("remove", node), ("add", node)] and report.healed and nemesis.active == []


def test_membership_promote_and_back():
    adapter = FakeMembershipAdapter()
    nemesis = Nemesis(FaultContext(FakeBackend(), adapter), enabled=["membership:promote"])
    report = nemesis.enact("membership:promote", random.Random(2))
    assert report.verified and report.nodes[0] != "n1" and adapter.primary == report.nodes[0]
    nemesis.heal(report)
    assert adapter.primary == "n1"


class FakeStoppingAdapter:
    """Nodes that run until stopped; `slow` nodes outlast the stop timeout and are killed."""

    name = "fake-stops"

    def __init__(self, slow: set[str] = frozenset()) -> None:
        self.running = set(FakeBackend.nodes)
        self.slow = slow
        self.starts: list[str] = []

    def is_running(self, node: str) -> bool:
        return node in self.running

    def process(self, node: str):
        return None

    def stop(self, node: str) -> StopOutcome | None:
        if node not in self.running:
            return None
        self.running.discard(node)
        return StopOutcome(False, 5.0, -9) if node in self.slow else StopOutcome(True, 0.2, 0)

    def start(self, node: str) -> None:
        self.running.add(node)
        self.starts.append(node)


def test_stop_says_per_node_whether_it_exited_by_itself_and_is_healed_by_a_start():
    adapter = FakeStoppingAdapter(slow={"n2"})
    nemesis = Nemesis(FaultContext(FakeBackend(), adapter), enabled=["stop"])
    assert nemesis.actions() == ["stop:one", "stop:minority", "stop:majority", "stop:all", "noop"]
    assert "cannot tell which nodes are primaries" in nemesis.refused["stop:primaries"]
    report = nemesis.enact("stop:all", random.Random(0))
    assert report.verified and report.nodes == ["n1", "n2", "n3"] and adapter.running == set()
    assert report.evidence["proc_state"] == {n: "adapter: not running" for n in FakeBackend.nodes}
    assert report.evidence["stop"]["n1"] == {"exited_by_itself": True, "seconds": 0.2, "status": 0}
    assert report.evidence["stop"]["n2"] == {"exited_by_itself": False, "seconds": 5.0, "status": -9}
    nemesis.heal(report)
    assert report.healed and adapter.starts == ["n1", "n2", "n3"] and adapter.running == set(FakeBackend.nodes)
    again = nemesis.enact("stop:one", random.Random(1))
    assert again.evidence["stop"] == {again.nodes[0]: {"exited_by_itself": True, "seconds": 0.2, "status": 0}}


def test_stop_is_refused_to_an_adapter_that_cannot_stop_a_node():
    nemesis = Nemesis(FaultContext(FakeBackend(), FakeMembershipAdapter()))
    assert "fake-members cannot stop a node" == nemesis.refused["stop:one"]
    with pytest.raises(MalloryError, match="fault stop:all refused: fake-members cannot stop a node"):
        Nemesis(FaultContext(FakeBackend(), FakeMembershipAdapter()), enabled=["stop:all"])


class FakeRestartingAdapter(FakeStoppingAdapter):
    """Nodes a reset starts and waits for: `broken` ones cannot start, `crashing` ones exit
    before they are ready, `stuck` ones run but never get ready."""

    def __init__(self, broken=(), crashing=(), stuck=()) -> None:
        super().__init__()
        self.running -= {*broken, *crashing}
        self.broken, self.crashing, self.stuck = set(broken), set(crashing), set(stuck)
        self.waited: dict[str, list[float | None]] = {}

    def start(self, node: str) -> None:
        if node in self.broken:
            raise MalloryError(f"{node}: no such binary")
        if node not in self.crashing:
            super().start(node)

    def wait_ready(self, node: str, timeout: float | None = None) -> None:
        self.waited.setdefault(node, []).append(timeout)
        if node in self.crashing:
            raise MalloryError(f"{node} exited before it was ready")
        if node in self.stuck:
            raise MalloryError(f"{node} not ready after {timeout} s")


@pytest.mark.parametrize("kind, how", [("broken", "start-failed"), ("crashing", "exited"), ("stuck", "not-ready")])
def test_a_reset_says_which_node_it_could_not_bring_back_and_how(kind, how):
    adapter = FakeRestartingAdapter(**{kind: ["n2"]})
    report = Nemesis(FaultContext(FakeBackend(), adapter, ready_timeout=20.0), enabled=["stop"]).reset()
    assert not report.healthy and report.unready == {"n2": {"how": how, "message": report.unready["n2"]["message"]}}
    assert "n2" in report.unready["n2"]["message"] and report.to_json()["unready"] == report.unready
    assert adapter.waited["n1"][0] == 20.0
    # every node is still waited for: after one was waited for in vain, briefly
    assert adapter.waited["n3"][0] == (20.0 if kind == "broken" else 2.0)


def test_a_reset_notes_how_a_node_it_restarted_had_died_and_where_its_log_ended(tmp_path):
    class DeadProcesses(FakeRestartingAdapter):
        """n2's process died of SIGSEGV during the schedule (before the reset)."""

        backend = type("Waits", (), {"wait": staticmethod(lambda proc, timeout: -11 if proc.node == "n2" else 0)})()

        def process(self, node: str):
            return NodeProcess(node, "sut", 0, tmp_path / f"{node}.log")  # pid 0: no /proc to read

        def log_paths(self, node: str):
            return [tmp_path / f"{node}.log"]

    (tmp_path / "n2.log").write_text("applying entry 42\n")
    adapter = DeadProcesses()
    adapter.running.discard("n2")
    report = Nemesis(FaultContext(FakeBackend(), adapter), enabled=["stop"]).reset()
    assert report.restarted == ["n2"] and report.exited == {"n2": {"status": -11, "log_end": 18}}
    assert report.healthy and report.to_json()["exited"] == report.exited


def test_a_fresh_restart_tears_every_node_down_and_starts_it_again_even_without_stop():
    class TearingDown(FakeRestartingAdapter):
        """Records teardowns (kill and remove the data) instead of offering `stop`."""

        stop = None

        def __init__(self) -> None:
            super().__init__()
            self.torn: list[str] = []

        def teardown(self, node: str) -> None:
            assert node in self.running, "torn down before anything is started again"
            self.running.discard(node)
            self.torn.append(node)

    adapter = TearingDown()
    nemesis = Nemesis(FaultContext(FakeBackend(), adapter))
    assert "cannot stop a node" in nemesis.restart_all().problems[0]  # without stop, no plain restart
    report = nemesis.restart_all(fresh=True)
    assert adapter.torn == adapter.starts == FakeBackend.nodes and adapter.running == set(FakeBackend.nodes)
    assert report.restarted == FakeBackend.nodes and report.healthy and set(adapter.waited) == set(FakeBackend.nodes)


def test_a_healthy_reset_has_no_unready_node():
    report = Nemesis(FaultContext(FakeBackend(), FakeRestartingAdapter()), enabled=["stop"]).reset()
    assert report.healthy and report.unready == {}


class FakeFirewall:
    """The mediator's rules per directed link, as the firewall keeps them."""

    def __init__(self) -> None:
        self.rule: dict[tuple[str, str], dict] = {}

    def _set(self, links, **what) -> dict:
        for link in links:
            self.rule.setdefault(tuple(link), {"drop": False, "delay_ms": 0, "copies": 0}).update(what)
        return {"links": [f"{s}->{d}" for s, d in links]}

    def drop(self, links):
        return self._set(links, drop=True)

    def delay(self, links, ms):
        return self._set(links, delay_ms=ms)

    def duplicate(self, links, copies=1):
        return self._set(links, copies=copies)

    def heal(self, links=None):
        healed = list(self.rule) if links is None else [tuple(link) for link in links]
        for link in healed:
            self.rule.pop(link, None)
        return {"links": [f"{s}->{d}" for s, d in healed]}

    def rules(self):
        return [{"src": s, "dst": d, **r, "affected": 0} for (s, d), r in self.rule.items()]

    def metrics(self):
        return {"firewall": {"dropped": 0, "delayed": 0, "duplicated": 0}}


class TransferRefusingAdapter(FakeMembershipAdapter):
    """A transfer to a node that is paused (or cut off, say) does not take; one to a paused
    node is refused outright when `refuse_paused`."""

    def __init__(self, refuse_paused: bool = False) -> None:
        super().__init__()
        self.paused: set[str] = set()
        self.refuse_paused = refuse_paused

    def pause(self, node: str) -> None:
        super().pause(node)
        self.paused.add(node)

    def resume(self, node: str) -> None:
        super().resume(node)
        self.paused.discard(node)

    def promote(self, node: str) -> None:
        self.calls.append(("promote", node))
        if node in self.paused and self.refuse_paused:
            raise MalloryError(f"cannot reach {node}")


@pytest.mark.parametrize("spec, effect", [("promote-cut-off", "drop"), ("promote-lagging", "delay")])
def test_a_promote_to_a_cut_off_or_lagging_node_holds_its_links_until_healed(spec, effect):
    adapter, firewall = TransferRefusingAdapter(), FakeFirewall()
    nemesis = Nemesis(FaultContext(FakeBackend(), adapter, mediator=firewall), enabled=[f"membership:{spec}"])
    report = nemesis.enact(f"membership:{spec}", random.Random(3))
    (node,) = report.nodes
    assert node != "n1" and adapter.calls == [("promote", node)]
    assert report.verified and report.evidence["transfer_refused"] is None and report.evidence["took"] is False
    assert sorted(report.links) == sorted([f"{node}->{o}" for o in ("n1", "n2", "n3") if o != node]
                                          + [f"{o}->{node}" for o in ("n1", "n2", "n3") if o != node])
    held = {f"{s}->{d}": r for (s, d), r in firewall.rule.items()}
    assert set(held) == set(report.links)
    assert all(r["drop"] if effect == "drop" else r["delay_ms"] == 300.0 for r in held.values())
    nemesis.heal(report)
    assert report.healed and all(not r["drop"] and not r["delay_ms"] for r in firewall.rule.values())


def test_healing_a_partition_keeps_the_links_a_promote_to_a_cut_off_node_still_holds():
    adapter, firewall = TransferRefusingAdapter(), FakeFirewall()
    nemesis = Nemesis(FaultContext(FakeBackend(), adapter, mediator=firewall),
                      enabled=["membership:promote-cut-off", "partition:majority"])
    cut = nemesis.enact("membership:promote-cut-off", random.Random(3))
    partition = nemesis.enact("partition:majority", random.Random(1))
    shared = set(cut.links) & set(partition.links)
    assert shared, "the partition cuts some of the cut-off node's links too"
    nemesis.heal(partition)
    dropped = {f"{s}->{d}" for (s, d), r in firewall.rule.items() if r["drop"]}
    assert dropped == set(cut.links)  # the cut-off node is still cut off
    nemesis.heal(cut)
    assert not any(r["drop"] for r in firewall.rule.values())


def test_a_promote_to_a_paused_node_is_healed_by_resuming_it_and_says_when_it_was_refused():
    adapter = TransferRefusingAdapter(refuse_paused=True)
    nemesis = Nemesis(FaultContext(FakeBackend(), adapter), enabled=["membership:promote-paused"])
    report = nemesis.enact("membership:promote-paused", random.Random(5))
    (node,) = report.nodes
    assert adapter.calls == [("pause", node), ("promote", node)]
    assert report.evidence["transfer_refused"] == f"cannot reach {node}" and not report.verified
    nemesis.heal(report)
    assert adapter.calls[-1] == ("resume", node) and adapter.primary == "n1"  # leadership is not moved back


def test_noop_and_labels():
    nemesis = Nemesis(FaultContext(FakeBackend(), FakeMembershipAdapter()), enabled=["noop", "membership:remove"])
    assert nemesis.actions() == ["membership:remove", "noop"]
    noop = nemesis.enact("noop", random.Random(0))
    assert noop.verified and noop.healed and nemesis.active == []
    nemesis.heal(noop)  # harmless
    with pytest.raises(MalloryError, match="not enabled"):
        nemesis.enact("membership:promote", random.Random(0))


def test_without_mediator_or_controls_network_and_preload_faults_are_refused():
    nemesis = Nemesis(FaultContext(FakeBackend(), FakeMembershipAdapter()))
    for label in ("partition:one", "delay:all", "drop:pair", "duplicate:one"):
        assert "mediator" in nemesis.refused[label]
    for label in ("clock:bump", "disk:eio"):
        assert "preload env" in nemesis.refused[label]
    assert {"kill:one", "pause:primaries", "membership:remove"} <= set(nemesis.actions())
    with pytest.raises(MalloryError, match="partition:one refused: no mediator"):
        Nemesis(FaultContext(FakeBackend(), FakeMembershipAdapter()), enabled=["partition:one"])
    with pytest.raises(MalloryError, match="needs at least 4 nodes"):
        Nemesis(FaultContext(FakeBackend(), FakeMembershipAdapter(), mediator=object()), enabled=["partition:minority-third"])


class RecordingFamily:
    """A named fake fault family: records the order of heals; `unhealable` specs raise."""

    def __init__(self, family: str, healed: list[str], unhealable: str | None = None) -> None:
        self.family, self.specs, self.healed, self.unhealable = family, ("x", "y"), healed, unhealable

    def unsupported(self, ctx, spec):
        return None

    def enact(self, ctx, spec, rng):
        return FaultReport(action=f"{self.family}:{spec}", family=self.family, spec=spec, verified=True)

    def heal(self, ctx, report):
        if report.spec == self.unhealable:
            raise MalloryError("no quorum")
        self.healed.append(report.action)
        report.healed = True


def test_heal_all_heals_the_latest_first_and_restarts_last():
    healed: list[str] = []
    families = [RecordingFamily("kill", healed), RecordingFamily("disk", healed), RecordingFamily("membership", healed, "y")]
    nemesis = Nemesis(FaultContext(FakeBackend(), FakeMembershipAdapter()), families=families)
    reports = [nemesis.enact(a, random.Random(0)) for a in ("disk:x", "kill:x", "membership:y", "membership:x")]
    problems = nemesis.heal_all(reports)
    assert healed == ["membership:x", "disk:x", "kill:x"]
    assert problems == ["healing membership:y: no quorum"]
    assert [r.action for r in nemesis.active] == ["membership:y"]  # the reset tries it again
    reset = nemesis.reset()
    assert "healing membership:y: no quorum" in reset.problems and nemesis.active == []


class WatchingFamily(RecordingFamily):
    """A family that is Armed and HasBackgroundWork: records when the Nemesis calls them."""

    def arm(self, ctx, specs):
        self.healed.append(f"armed {specs}")

    def stop_background_work(self):
        self.healed.append("background stopped")


def test_the_nemesis_arms_a_family_with_its_enabled_specs_and_stops_its_background_work_on_reset():
    calls: list[str] = []
    families = [WatchingFamily("clock", calls), WatchingFamily("disk", calls)]
    nemesis = Nemesis(FaultContext(FakeBackend(), FakeMembershipAdapter()), enabled=["clock:y"], families=families)
    assert calls == ["armed ['y']"]  # disk has nothing enabled: not armed
    nemesis.reset()
    assert calls == ["armed ['y']", "background stopped", "background stopped"]


def _parameters(function) -> list[str]:
    return list(inspect.signature(function).parameters)


@pytest.mark.parametrize("backend", [NetnsCluster, DockerCluster])
def test_the_netns_and_docker_backends_offer_what_the_faults_use(backend):
    for name in ("data_dir", "exec"):
        assert _parameters(getattr(backend, name)) == _parameters(getattr(FaultBackend, name)), name
    assert isinstance(backend.nodes, property)


def test_the_mediator_client_makes_every_firewall_call_of_the_faults():
    calls = [name for name, _ in inspect.getmembers(Firewall, inspect.isfunction) if not name.startswith("_")]
    assert set(calls) == {"drop", "delay", "duplicate", "heal", "rules", "metrics"}
    for name in calls:
        assert _parameters(getattr(MediatorClient, name)) == _parameters(getattr(Firewall, name)), name
