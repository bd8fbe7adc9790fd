"""A campaign's protocol model: the user's module loaded from its file, and its event
names bound to the timeline's event types (the pure part is mallory/learner/model.py).

    model = load_model(Path("suts/raft/model.py"))
    feed = bind_model(model, nodes, catalogue, log_names)   # ModelError for a name the SUT lacks
    windows.trace = feed.trace_types                        # what the mediator puts in traces
    feed.noted(action, report)                              # a fault the loop enacted
    trace = feed.run(window.trace)                          # the window's ModelTrace

Names resolve as waypoints' do (campaign/waypoints.py): an annotation's label to its code
events through the SUT's catalogue, a log event's name to its stable id. "fault:<family>"
is the FAULT event the campaign puts in the timeline when it enacts a fault of that family
(its data is the action, "partition:one"), "fault:<family>:<spec>" that of one action
(it wins over its family's name); its Step gets the targets and links of the
action's report, which the loop hands over with `noted`. "fault:heal" is the heal of every
fault in force (the fuzzer's `heal` and the firewall's own). "client:<f>:<type>" is the
client operation the workload relayed to the timeline.

A name that is none of these (a typo, an annotation the build lacks) is refused before
the campaign starts, not silently never met.
"""

from __future__ import annotations

import hashlib
import importlib.util
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from mallory.campaign.waypoints import event_types
from mallory.errors import MalloryError
from mallory.instrument.catalogue import Catalogue
from mallory.learner.model import Model, ModelReplay, ModelTrace, Step
from nemesis.nemesis import default_families

HEAL = "heal"
CLIENT_TYPES = ("invoke", "ok", "fail", "info")


def load_model(path: Path) -> Model:
    """The model the Python file at `path` defines (learner/model.py's contract);
    MalloryError naming the file if it cannot be read, fails to import, or breaks the
    contract."""
    path = Path(path)
    if not path.is_file():
        raise MalloryError(f"model {path}: no such file")
    # a name of its own per file: two campaigns' models never share a module
    name = "mallory_model_" + hashlib.blake2b(str(path.resolve()).encode(), digest_size=6).hexdigest()
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise MalloryError(f"model {path}: not a Python file")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses of the module look themselves up there
    try:
        spec.loader.exec_module(module)
    except Exception as exc:  # the user's code: whatever it raises is its problem, said plainly
        del sys.modules[name]
        raise MalloryError(f"model {path}: importing it failed: {type(exc).__name__}: {exc}") from None
    return Model.from_namespace(vars(module), str(path))


def _fault_types(label: str) -> frozenset[str] | None:
    """The FAULT event types of a family's actions, or of one action ("<family>:<spec>")
    (None: no such family or action)."""
    if label == HEAL:
        return frozenset({f"FAULT:{HEAL}"})
    family, _, spec = label.partition(":")
    for known in default_families():
        if known.family == family:
            specs = [s for s in known.specs if s == spec] if spec else list(known.specs)
            return frozenset(f"FAULT:{family}:{s}" for s in specs) or None
    return None


def _client_types(rest: str) -> frozenset[str] | None:
    """"<f>:<type>" as its CLIENT event type (None: not of that shape)."""
    f, _, kind = rest.rpartition(":")
    if not f or kind not in CLIENT_TYPES:
        return None
    return frozenset({f"CLIENT_INVOKE:{f}:{kind}" if kind == "invoke" else f"CLIENT_COMPLETE:{f}:{kind}"})


def resolve(name: str, catalogue: Catalogue, log_names: Iterable[str]) -> frozenset[str]:
    """The timeline types a model's event name denotes; MalloryError if none."""
    kind, _, rest = name.partition(":")
    if kind == "fault":
        found = _fault_types(rest)
        if found is None:
            families = sorted([HEAL, *(f.family for f in default_families())])
            raise MalloryError(f"no fault family or action {rest!r} (fault:<family> or fault:<family>:<spec>, "
                               f"the family one of: {', '.join(families)})")
        return found
    if kind == "client":
        found = _client_types(rest)
        if found is None:
            raise MalloryError(f"{name!r} is not client:<f>:<{'|'.join(CLIENT_TYPES)}>")
        return found
    labels = {e.label for e in catalogue if e.label}
    if name not in labels and name not in set(log_names):
        raise MalloryError(f"no event named {name!r}: neither a label of the SUT's catalogue nor a log event it declares")
    return event_types(name, catalogue)


class ModelFeed:
    """The model of one campaign bound to its SUT: turns a window's trace into Steps and
    replays them; one execution per schedule (`restart`)."""

    def __init__(self, model: Model, nodes: Sequence[str], names: dict[str, str]) -> None:
        self.model = model
        #: timeline type -> the model's event name
        self.names = names
        self.replay = ModelReplay(model, nodes)
        self._reports: list[tuple[str, Any]] = []  # faults enacted, not yet met in a trace

    @property
    def trace_types(self) -> frozenset[str]:
        return frozenset(self.names)

    def restart(self) -> None:
        """A new execution (a schedule's start), or one whose events were lost."""
        self.replay.restart()
        self._reports.clear()

    def noted(self, action: str, report: Any) -> None:
        """The loop enacted `action`; `report` (JSON: its "nodes" and "links") says where."""
        self._reports.append((action, report))

    def steps(self, trace: Iterable[tuple[str, str]]) -> list[Step]:
        out = []
        for node, kind in trace:
            name = self.names.get(kind)
            if name is None:
                continue
            if kind.startswith("FAULT:") and kind != f"FAULT:{HEAL}":
                targets, links = self._targets(kind.removeprefix("FAULT:"))
                out.append(Step(name, node, targets, links))
            else:
                out.append(Step(name, node))
        return out

    def _targets(self, action: str) -> tuple[tuple[str, ...], tuple[tuple[str, str], ...]]:
        """The nodes and links of the first noted report of `action` (none noted: none)."""
        for i, (noted, report) in enumerate(self._reports):
            if noted == action:
                del self._reports[i]
                report = report if isinstance(report, dict) else {}
                links = tuple(tuple(link.split("->", 1)) for link in report.get("links") or () if "->" in link)
                return tuple(report.get("nodes") or ()), links  # type: ignore[return-value]
        return (), ()

    def run(self, trace: Iterable[tuple[str, str]]) -> ModelTrace:
        return self.replay.run(self.steps(trace))


def bind_model(model: Model, nodes: Sequence[str], catalogue: Catalogue, log_names: Iterable[str]) -> ModelFeed:
    """The model's event names resolved for this SUT; MalloryError naming the model and
    every name it could not resolve."""
    log_names = list(log_names)
    names: dict[str, str] = {}
    problems = []
    # an action's own name ("fault:membership:remove") wins over its family's
    for name in sorted(model.events, key=lambda n: n.count(":")):
        try:
            for kind in resolve(name, catalogue, log_names):
                names[kind] = name
        except MalloryError as exc:
            problems.append(str(exc))
    if problems:
        raise MalloryError(f"model {model.name}: " + "; ".join(problems))
    return ModelFeed(model, nodes, names)
