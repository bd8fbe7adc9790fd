"""Scenario files and filter-set files, Python files in Netrix's filter language
(mallory/scenario/): a scenario, a Netrix-style unit test read into a `Scenario`
(mallory/scenario/engine.py) for `mallory scenario run`; and named filter sets, which a
campaign offers its learner as faults (`mallory fuzz --filter-sets FILE`,
nemesis/faults/filters.py).

A scenario file is Python that imports its words from mallory.scenario and defines:

    FILTERS        a list of filters (`If(...).Then(...)`, `IsolateNode(...)`), tried in
                   order on every event; a message none handles is delivered, so [] lets
                   every message through
    STATE_MACHINE  a `StateMachine` from whose start state a success state is reachable
                   (else no run could pass)
    SETUP          (optional, default none) steps taken in order once the cluster is ready:
                   a client operation, a map with "f" (a str) and optionally "value", as a
                   harness client's `invoke` takes them: {"f": "write", "value": 3};
                   {"await": "STATE"}: wait until the state machine has been in the state
                   STATE (one of its states); {"pause": "n1", "for_s": 2}: pause node n1's
                   SUT (SIGSTOP) for that many seconds (0 < for_s <= 60), then resume it,
                   each relayed as a fault event ("pause:n1", "resume:n1") the filters and
                   the machine see: what no filter can do, a node stalled
    TIMEOUT_S      how many seconds a run may last, a positive number; a run still going
                   then passes if its state machine is in a success state
    DUPLICATES     (optional, default False) True when the SUT's protocol tolerates a
                   message delivered twice: only then may a decision duplicate one

Other names it defines are its own. Node names in it are the cluster's (n1, n2, ...), and
message types those of the SUT's `[messages]`. Loading runs the file, as a spec's framer
is imported: it is code the user trusts. Every error is one line naming the file and,
where there is one, the line: a missing or unreadable file, Python that does not compile
or raises, a missing name or a value of the wrong kind.

    from mallory.scenario import *

    FILTERS = [If(IsMessageType("append") & Count("seen").lt(3)).Then(Deliver(), Count("seen").incr())]
    STATE_MACHINE = StateMachine()
    STATE_MACHINE.builder().on(IsEventType("commit"), SUCCESS)
    TIMEOUT_S = 10

A filter-set file defines FILTER_SETS, a dict from a set's name (1 to 48 of a-z, 0-9 and
"-", starting with a letter or digit: the fault's label is "filters:<name>") to a non-empty
list of filters. A campaign puts one set in force for one step's window at a time (a fresh
context each time, no state machine: `InState` sees the start state), so a set says what
one window does to the messages:

    FILTER_SETS = {
        "drop-appends-to-a-follower": [
            If(IsMessageType("append") & IsMessageFrom(role("leader")) & IsMessageTo(role("follower")))
            .Then(Drop()),
        ],
    }

Its filters name nodes by name (n1, n2, ...) or by role (mallory/scenario/roles.py:
`role("leader")`, `role("follower")`, `role("second-follower")`), bound each time the set
goes into force; a set naming the leader is refused on an SUT that cannot tell which node
leads.
"""

from __future__ import annotations

import math
import re
import traceback
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from mallory.scenario.engine import Scenario
from mallory.scenario.events import ScenarioError
from mallory.scenario.filters import FilterSet
from mallory.scenario.machine import StateMachine

REQUIRED = ("FILTERS", "STATE_MACHINE", "TIMEOUT_S")
#: the keys of a SETUP client operation
OP_KEYS = ("f", "value")
#: the longest a SETUP step may pause a node
MAX_PAUSE_S = 60.0
#: a filter set's name (the spec of its fault label)
SET_NAME = re.compile(r"[a-z0-9][a-z0-9-]{0,47}")


def load_scenario(path: str | Path) -> Scenario:
    """The scenario `path` defines (see the module docstring); ScenarioError otherwise."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ScenarioError(f"scenario {path}: cannot read it: {exc.strerror}") from None
    namespace = _run(text, path, "scenario")
    where = f"scenario {path}"
    if missing := [name for name in REQUIRED if name not in namespace]:
        raise ScenarioError(f"{where}: defines no {', '.join(missing)} (a scenario defines {', '.join(REQUIRED)})")
    try:
        filters = _filters(namespace["FILTERS"])
        machine = _machine(namespace["STATE_MACHINE"])
        setup = _setup(namespace.get("SETUP", []), machine)
        timeout = _timeout(namespace["TIMEOUT_S"])
        duplicates = namespace.get("DUPLICATES", False)
        if not isinstance(duplicates, bool):
            raise ScenarioError(f"DUPLICATES is True or False, not {duplicates!r}")
    except ScenarioError as exc:
        raise ScenarioError(f"{where}: {exc}") from None
    return Scenario(str(path), filters, machine, setup, timeout, duplicates)


def load_filter_sets(path: str | Path) -> dict[str, FilterSet]:
    """The filter sets `path` defines, by name (see the module docstring); ScenarioError
    otherwise."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ScenarioError(f"filter sets {path}: cannot read it: {exc.strerror}") from None
    value = _run(text, path, "filter sets").get("FILTER_SETS")
    where = f"filter sets {path}"
    if not isinstance(value, Mapping) or not value:
        raise ScenarioError(f"{where}: FILTER_SETS is a non-empty dict from names to lists of filters, "
                            f"not {type(value).__name__}")
    sets = {}
    for name, filters in value.items():
        if not isinstance(name, str) or not SET_NAME.fullmatch(name):
            raise ScenarioError(f"{where}: set name {name!r} is not 1-48 of a-z, 0-9 and '-' (starting with no '-')")
        if not isinstance(filters, (list, tuple)) or not filters:
            raise ScenarioError(f"{where}: set {name!r} is a non-empty list of filters, not {filters!r}")
        try:
            sets[name] = FilterSet(filters)
        except ScenarioError as exc:
            raise ScenarioError(f"{where}: set {name!r}: {exc}") from None
    return sets


def _run(text: str, path: Path, what: str) -> dict[str, Any]:
    """The names the file (`what`: a scenario, filter sets) defines when run; one-line
    errors for what it does wrong."""
    try:
        compiled = compile(text, str(path), "exec")
    except SyntaxError as exc:
        raise ScenarioError(f"{what} {path} line {exc.lineno}: {exc.msg}") from None
    namespace: dict[str, Any] = {"__name__": f"mallory_scenario_{path.stem}", "__file__": str(path)}
    try:
        exec(compiled, namespace)
    except Exception as exc:  # the file's own error, whatever it is: said in one line
        lines = [frame.lineno for frame in traceback.extract_tb(exc.__traceback__) if frame.filename == str(path)]
        at = f" line {lines[-1]}" if lines else ""
        raise ScenarioError(f"{what} {path}{at}: {type(exc).__name__}: {exc}") from None
    return namespace


def _filters(value: Any) -> FilterSet:
    if not isinstance(value, (list, tuple)):
        raise ScenarioError(f"FILTERS is a list of filters, not {type(value).__name__}")
    try:
        return FilterSet(value)
    except ScenarioError as exc:
        raise ScenarioError(f"FILTERS: {exc}") from None


def _machine(value: Any) -> StateMachine:
    if not isinstance(value, StateMachine):
        raise ScenarioError(f"STATE_MACHINE is a StateMachine, not {type(value).__name__}")
    if not any(value.states[label].success for label in value.reachable()):
        raise ScenarioError("STATE_MACHINE: no success state is reachable from startState, so no run can pass")
    return value


def _setup(value: Any, machine: StateMachine) -> tuple[Mapping[str, Any], ...]:
    if not isinstance(value, (list, tuple)):
        raise ScenarioError(f"SETUP is a list of steps, not {type(value).__name__}")
    for number, step in enumerate(value, 1):
        if not isinstance(step, Mapping):
            raise ScenarioError(f"SETUP step {number} is a map, not {step!r}")
        if "await" in step:
            if set(step) != {"await"} or step["await"] not in machine.states:
                raise ScenarioError(f"SETUP step {number} {dict(step)!r}: \"await\" names a state of STATE_MACHINE "
                                    f"({', '.join(machine.states)})")
        elif "pause" in step:
            for_s = step.get("for_s")
            if (set(step) != {"pause", "for_s"} or not isinstance(step["pause"], str) or isinstance(for_s, bool)
                    or not isinstance(for_s, (int, float)) or not 0 < for_s <= MAX_PAUSE_S):
                raise ScenarioError(f"SETUP step {number} {dict(step)!r}: a pause is {{\"pause\": NODE, \"for_s\": "
                                    f"seconds in (0, {MAX_PAUSE_S:g}]}}")
        elif not isinstance(step.get("f"), str) or set(step) - set(OP_KEYS):
            raise ScenarioError(f"SETUP step {number} is a client operation (a map with a str \"f\" and an optional "
                                f"\"value\"), an await or a pause, not {dict(step)!r}")
    return tuple(value)


def _timeout(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < math.inf:
        raise ScenarioError(f"TIMEOUT_S is a positive number of seconds, not {value!r}")
    return float(value)
