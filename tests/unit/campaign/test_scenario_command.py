"""`mallory scenario run` (mallory/commands/scenario.py) with a fake cluster in place of the
netns one: argument handling, SETUP on the nodes in turn, relayed client events, the exit
codes (0 pass, 1 fail, 254 bad input, 69 a dead mediator) and the teardown."""

from __future__ import annotations

from contextlib import contextmanager

import pytest

from mallory.campaign.loop import ComponentDied
from mallory.campaign.observed import message_layer_args
from mallory.cli import main
from mallory.commands import scenario as command
from mallory.errors import MalloryError
from mallory.harness.client import Completion

SCENARIO = """\
from mallory.scenario import *

FILTERS = [If(IsMessageType("append")).Then(Drop())]
STATE_MACHINE = StateMachine()
STATE_MACHINE.builder().on(IsClientEvent("write", "ok"), SUCCESS)
SETUP = [{"f": "write", "value": 1}, {"f": "read"}]
TIMEOUT_S = 0.3
"""
SPEC = """\
name = "fake"
[start]
command = ["true"]
[ports]
client = 7000
peer = 7001
[client]
kind = "line"
[messages]
delimiter = "\\n"
type = { names = { "65" = "append" } }
"""


def report(ended: bool, passed: bool, states: tuple[str, ...] = ("startState",)) -> dict:
    return {"ended": ended, "passed": passed, "state": "successState" if passed else "startState", "states": list(states),
            "reason": "why", "lines": ["PASS: why" if passed else "FAIL: why", "path: startState"], "events": 3,
            "messages": {"n1->n2": {"append": {"sent": 2, "dropped": 2}}}}


class FakeClient:
    """A fake register client: node n2 leads (others refuse), ops recorded."""

    def __init__(self, node: str, calls: list) -> None:
        self.node, self.calls = node, calls

    def open(self) -> None:
        pass

    def invoke(self, op):
        self.calls.append((self.node, op["f"], op["value"]))
        return Completion("ok" if self.node == "n2" else "fail", op["value"])

    def close(self) -> None:
        pass


class FakeBackend:
    nodes = ["n1", "n2", "n3"]


class FakeAdapter:
    """A fake adapter of a started, ready SUT."""

    name = "fake"

    def __init__(self) -> None:
        self.backend = FakeBackend()
        self.calls: list = []
        self.torn_down = False

    def start(self, node):
        pass

    def wait_ready(self, node, timeout=None):
        pass

    def teardown(self, node):
        self.torn_down = True

    def pause(self, node):
        self.calls.append((node, "pause"))

    def resume(self, node):
        self.calls.append((node, "resume"))

    def client(self, node, workload):
        return FakeClient(node, self.calls)


class FakeMediator:
    """A fake mediator client: answers /scenario from a script, records relayed client ops."""

    def __init__(self, answers) -> None:
        self.answers = list(answers)
        self.ops: list = []

    def client_op(self, process, type, f):
        self.ops.append((process, type, f))

    def fault_reported(self, f):
        self.ops.append(("fault", f))

    def scenario(self):
        answer = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        if isinstance(answer, Exception):
            raise answer
        return answer


class FakeStack:
    def __init__(self, answers, dead: bool = False) -> None:
        self.adapter = FakeAdapter()
        self.client = FakeMediator(answers)
        self.dead = dead

    def revive_dead(self):
        if self.dead:
            raise ComponentDied("the mediator (pid 9) was killed by SIGKILL; its log: gw/mediator.log")
        return []


@pytest.fixture
def files(tmp_path):
    scenario, spec = tmp_path / "s.py", tmp_path / "fake.toml"
    scenario.write_text(SCENARIO)
    spec.write_text(SPEC)
    return scenario, spec


def use(monkeypatch, stack):
    @contextmanager
    def fake_cluster(sut, path, args):
        yield stack

    monkeypatch.setattr(command, "observed_cluster", fake_cluster)
    monkeypatch.setattr(command, "POLL_S", 0.01)


def test_a_passing_scenario_exits_0_after_setup_and_says_its_path(monkeypatch, capsys, files):
    stack = FakeStack([report(False, False), report(True, True)])
    use(monkeypatch, stack)
    assert main(["scenario", "run", str(files[0]), "--sut", str(files[1])]) == 0
    out = capsys.readouterr().out
    assert "PASS: why\npath: startState\n" in out and "n1->n2 append: dropped 2 sent 2" in out
    # the write went to n1 (refused), then n2 (ok); the read to n1 (refused), n2, ...
    assert stack.adapter.calls == [("n1", "write", 1), ("n2", "write", 1), ("n1", "read", None), ("n2", "read", None)]
    assert stack.client.ops == [(0, "invoke", "write"), (0, "ok", "write"), (1, "invoke", "read"), (1, "ok", "read")]
    assert stack.adapter.torn_down


def test_setup_awaits_a_state_then_pauses_a_node_and_resumes_it(monkeypatch, capsys, files):
    """The pause and resume are fault events the scenario sees; the write after the await
    waits until the run has been in "cut"."""
    files[0].write_text(SCENARIO.replace('SETUP = [{"f": "write", "value": 1}, {"f": "read"}]',
                                         'STATE_MACHINE.builder().on(IsEventType("x"), "cut")\n'
                                         'SETUP = [{"await": "cut"}, {"pause": "n3", "for_s": 0.01}, {"f": "write", "value": 1}]'))
    stack = FakeStack([report(False, False), report(False, False), report(False, False, ("startState", "cut")),
                       report(True, True)])
    use(monkeypatch, stack)
    assert main(["scenario", "run", str(files[0]), "--sut", str(files[1])]) == 0
    assert stack.adapter.calls == [("n3", "pause"), ("n3", "resume"), ("n1", "write", 1), ("n2", "write", 1)]
    assert stack.client.ops == [("fault", "pause:n3"), ("fault", "resume:n3"), (0, "invoke", "write"), (0, "ok", "write")]
    assert stack.client.answers == [report(True, True)]  # asked until "cut" was in the run's states


def test_a_pause_of_a_node_the_cluster_lacks_is_refused_before_any_cluster(monkeypatch, capsys, files):
    files[0].write_text(SCENARIO.replace('SETUP = [', 'SETUP = [{"pause": "n4", "for_s": 1}, '))
    use(monkeypatch, FakeStack([report(False, False)]))
    monkeypatch.setattr(command, "observed_cluster", None)  # called: a TypeError, not a 254
    assert main(["scenario", "run", str(files[0]), "--sut", str(files[1])]) == 254
    assert "SETUP pauses n4, not a node of 3" in capsys.readouterr().err


def test_a_failing_or_timed_out_scenario_exits_1(monkeypatch, capsys, files):
    stack = FakeStack([report(False, False)])  # never ends: the timeout's verdict
    use(monkeypatch, stack)
    assert main(["scenario", "run", str(files[0]), "--sut", str(files[1])]) == 1
    assert "FAIL: why" in capsys.readouterr().out and stack.adapter.torn_down


def test_a_dead_mediator_exits_69_and_the_sut_is_torn_down(monkeypatch, capsys, files):
    stack = FakeStack([MalloryError("mediator unreachable")], dead=True)
    use(monkeypatch, stack)
    assert main(["scenario", "run", str(files[0]), "--sut", str(files[1])]) == 69
    assert "the mediator (pid 9)" in capsys.readouterr().err and stack.adapter.torn_down


@pytest.mark.parametrize("change, args, error", [
    (None, ["--nodes", "0"], "--nodes 0: a cluster has 1..250 nodes"),
    ("TIMEOUT_S = 0.3", [], "defines no TIMEOUT_S"),
    (None, ["--workload", "list-append"], "cannot run the list-append workload"),
    (None, ["--sut", "/nonexistent.toml"], "no such spec file"),
])
def test_bad_input_exits_254_before_any_cluster(monkeypatch, capsys, files, change, args, error):
    @contextmanager
    def no_cluster(sut, path, args):
        raise AssertionError("no cluster may come up for bad input")
        yield

    monkeypatch.setattr(command, "observed_cluster", no_cluster)
    scenario, spec = files
    if change:
        scenario.write_text(SCENARIO.replace(change, ""))
    argv = ["scenario", "run", str(scenario), "--sut", str(spec), *args]
    if "--sut" in args:
        argv = ["scenario", "run", str(scenario), *args]
    assert main(argv) == 254
    assert error in capsys.readouterr().err


def test_an_sut_without_messages_is_refused_before_the_mediator_starts(tmp_path):
    adapter = FakeAdapter()
    with pytest.raises(MalloryError, match="declares no peer messages"):
        message_layer_args(adapter, "fake", ["--scenario", str(tmp_path / "s.py")])
