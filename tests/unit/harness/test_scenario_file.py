"""Scenario files (mallory/harness/scenario_file.py): what a well-formed one loads into, and
the one-line error each kind of malformed one gets."""

from __future__ import annotations

from pathlib import Path

import pytest

from mallory.harness.scenario_file import load_filter_sets, load_scenario
from mallory.scenario.events import Message, ScenarioError, code, send
from mallory.scenario.roles import roles_named

GOOD = """\
from mallory.scenario import *

FILTERS = [If(IsMessageType("append") & Count("seen").lt(1)).Then(Deliver(), Count("seen").incr()),
           If(IsMessageType("append")).Then(Drop())]
STATE_MACHINE = StateMachine()
STATE_MACHINE.builder().on(IsEventType("commit"), SUCCESS)
SETUP = [{"f": "write", "value": 1}, {"f": "read"}]
TIMEOUT_S = 2.5
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "s.py"
    path.write_text(text)
    return path


def test_a_well_formed_file_loads_into_a_runnable_scenario(tmp_path):
    scenario = load_scenario(write(tmp_path, GOOD))
    assert scenario.timeout_s == 2.5 and scenario.setup == ({"f": "write", "value": 1}, {"f": "read"})
    assert len(scenario.filters.filters) == 2
    engine = scenario.engine(["n1", "n2", "n3"])
    appends = [Message(str(i), "n1", "n2", "append") for i in range(2)]
    assert [engine.step(send(m)).deliver for m in appends] == [(appends[0],), ()]
    engine.step(code("n2", "commit"))
    assert engine.ended and engine.verdict().passed


def test_setup_may_await_a_state_and_pause_a_node(tmp_path):
    text = GOOD.replace("SETUP = [", "SETUP = [{\"await\": \"startState\"}, {\"pause\": \"n2\", \"for_s\": 1.5}, ")
    assert load_scenario(write(tmp_path, text)).setup[:2] == ({"await": "startState"}, {"pause": "n2", "for_s": 1.5})


def test_setup_is_optional(tmp_path):
    assert load_scenario(write(tmp_path, GOOD.replace("SETUP = ", "_SETUP = "))).setup == ()


def test_duplicates_are_off_unless_the_file_allows_them(tmp_path):
    assert load_scenario(write(tmp_path, GOOD)).duplicates is False
    assert load_scenario(write(tmp_path, GOOD + "DUPLICATES = True\n")).duplicates is True


@pytest.mark.parametrize(("change", "error"), [
    (("TIMEOUT_S = 2.5", ""), "defines no TIMEOUT_S"),
    (("FILTERS = [", "FILTERZ = ["), "defines no FILTERS"),
    (("TIMEOUT_S = 2.5", "TIMEOUT_S = 0"), "TIMEOUT_S is a positive number of seconds, not 0"),
    (("TIMEOUT_S = 2.5", "TIMEOUT_S = '5'"), "TIMEOUT_S is a positive number"),
    (("TIMEOUT_S = 2.5", "TIMEOUT_S = float('inf')"), "TIMEOUT_S is a positive number"),
    (("If(IsMessageType(\"append\")).Then(Drop())", "If(IsMessageType(\"append\"))"),
     "FILTERS: a filter set holds filters .*not If\\(IsMessageType\\('append'\\)\\) without .Then"),
    (("FILTERS = [", "FILTERS = ("), "line 4: closing parenthesis ']' does not match opening parenthesis '\\('"),
    (("SETUP = [{\"f\": \"write\", \"value\": 1}", "SETUP = [{\"f\": \"write\", \"val\": 1}"),
     "SETUP step 1 is a client operation \\(a map with a str \"f\""),
    (("SETUP = [", "SETUP = [{\"await\": \"nowhere\"}, "), "SETUP step 1 .*\"await\" names a state of STATE_MACHINE"),
    (("SETUP = [", "SETUP = [{\"pause\": \"n1\", \"for_s\": 0}, "), "SETUP step 1 .*a pause is"),
    (("SETUP = [", "SETUP = [{\"pause\": \"n1\", \"for_s\": 61}, "), "SETUP step 1 .*a pause is"),
    (("SETUP = [", "SETUP = [{\"pause\": \"n1\"}, "), "SETUP step 1 .*a pause is"),
    (("SETUP = [", "SETUP = [3, "), "SETUP step 1 is a map, not 3"),
    (("TIMEOUT_S = 2.5", "TIMEOUT_S = 2.5\nSTATE_MACHINE = [STATE_MACHINE]"), "STATE_MACHINE is a StateMachine, not list"),
    (("on(IsEventType(\"commit\"), SUCCESS)", "on(IsEventType(\"commit\"), \"done\")"),
     "no success state is reachable from startState"),
    (("TIMEOUT_S = 2.5", "TIMEOUT_S = 2.5\nDUPLICATES = 1"), "DUPLICATES is True or False, not 1"),
    (("IsEventType(\"commit\")", "IsEventTyp(\"commit\")"), "line 6: NameError: name 'IsEventTyp' is not defined"),
    (("Count(\"seen\").lt(1)", "Count(\"seen\").lt(1) and IsMessageSend()"), "line 3: TypeError: .* is a condition"),
])
def test_a_malformed_file_gets_one_line_naming_it(tmp_path, change, error):
    path = write(tmp_path, GOOD.replace(*change))
    with pytest.raises(ScenarioError, match=error) as caught:
        load_scenario(path)
    assert str(caught.value).startswith(f"scenario {path}") and "\n" not in str(caught.value)


def test_a_missing_file_is_said_so(tmp_path):
    with pytest.raises(ScenarioError, match="cannot read it: No such file"):
        load_scenario(tmp_path / "none.py")


SETS = """\
from mallory.scenario import *

FILTER_SETS = {
    "drop-appends-to-a-follower": [
        If(IsMessageType("append") & IsMessageFrom(role("leader")) & IsMessageTo(role("follower"))).Then(Drop()),
    ],
    "isolate-n3": [IsolateNode("n3")],
}
"""


def test_a_filter_set_file_loads_its_sets_by_name(tmp_path):
    sets = load_filter_sets(write(tmp_path, SETS))
    assert sorted(sets) == ["drop-appends-to-a-follower", "isolate-n3"]
    assert roles_named(sets["drop-appends-to-a-follower"].filters) == {"leader", "follower"}
    assert roles_named(sets["isolate-n3"].filters) == frozenset()


@pytest.mark.parametrize(("change", "error"), [
    (("FILTER_SETS = {", "SETS = {"), "FILTER_SETS is a non-empty dict from names to lists of filters, not NoneType"),
    (("FILTER_SETS = {", "FILTER_SETS = {}\n_ = {"), "FILTER_SETS is a non-empty dict"),
    (("\"isolate-n3\"", "\"Isolate n3\""), "set name 'Isolate n3' is not 1-48 of a-z"),
    (("\"isolate-n3\"", "\"-n3\""), "set name '-n3' is not"),
    (("[IsolateNode(\"n3\")]", "[]"), "set 'isolate-n3' is a non-empty list of filters"),
    (("[IsolateNode(\"n3\")]", "[Drop()]"), "set 'isolate-n3': a filter set holds filters"),
    (("role(\"leader\")", "role(\"boss\")"), "line 5: ScenarioError: role 'boss': roles are leader"),
])
def test_a_malformed_filter_set_file_gets_one_line_naming_it(tmp_path, change, error):
    path = write(tmp_path, SETS.replace(*change))
    with pytest.raises(ScenarioError, match=error) as caught:
        load_filter_sets(path)
    assert str(caught.value).startswith(f"filter sets {path}") and "\n" not in str(caught.value)


def test_the_shipped_filter_set_files_load():
    from mallory.paths import SUTS

    for path in (SUTS / "example/filter_sets.py", SUTS / "raft/filter_sets.py"):
        assert load_filter_sets(path)
