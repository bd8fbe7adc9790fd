"""Filters and the filter set: what happens to each message, after Netrix's testlib
(netrix testlib/filters.go, testlib/actions.go, testlib/parition.go).

    If(condition).Then(action, *actions)

is a filter: when its condition holds for an event it handles the event, running every
action in order and delivering the messages they give, in that order, and nothing else. A
filter that holds for a SEND but has no `Deliver()` among its actions therefore drops the
message (or holds it, with `StoreInSet`, for a later `DeliverAllFromSet`: Netrix's hold and
release, how a test reorders messages). `IsolateNode(node)` is the filter that handles
every message from or to `node` and delivers nothing.

A `FilterSet` tries its filters in order on every event, messages or not, and the first
that handles it decides (first match); later ones are not asked. When none does, its
default filter decides: Netrix's `If(IsMessageSend()).Then(DeliverMessage())`, so an
unmatched message is delivered and the filters of a set only say what differs from an
undisturbed run. Non-message events pass through filters too: a filter on a code event can
`DeliverAllFromSet` what an earlier one held.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from mallory.scenario.context import Context, NodeRef
from mallory.scenario.dsl import (
    Action,
    Condition,
    Deliver,
    IsMessageFrom,
    IsMessageSend,
    IsMessageTo,
)
from mallory.scenario.events import Message, ScenarioError, ScenarioEvent


class Filter:
    """`If(condition).Then(*actions)`: handles an event when `condition` holds for it."""

    def __init__(self, condition: Condition, actions: Sequence[Action]) -> None:
        self.condition = condition
        self.actions = tuple(actions)

    def __call__(self, event: ScenarioEvent, ctx: Context) -> list[Message] | None:
        """The messages to deliver when the filter handles `event`; None when it does not."""
        if not self.condition(event, ctx):
            return None
        return [m for action in self.actions for m in action(event, ctx)]

    def __str__(self) -> str:
        return f"If({self.condition}).Then({', '.join(map(str, self.actions))})"


class If:
    """The first half of a filter: `If(condition).Then(action, *actions)`."""

    def __init__(self, condition: Condition) -> None:
        if not isinstance(condition, Condition):
            raise ScenarioError(f"If takes a condition, not {condition!r}")
        self.condition = condition

    def Then(self, action: Action, *actions: Action) -> Filter:
        wrong = [a for a in (action, *actions) if not isinstance(a, Action)]
        if wrong:
            raise ScenarioError(f"If({self.condition}).Then takes actions, not {wrong[0]!r}")
        return Filter(self.condition, (action, *actions))

    def __repr__(self) -> str:
        return f"If({self.condition}) without .Then(...)"


def IsolateNode(node: NodeRef) -> Filter:
    """Handles every message from or to `node`, delivering none (Netrix's IsolateNode)."""
    condition = IsMessageFrom(node) | IsMessageTo(node)
    return Filter(Condition(condition, f"IsolateNode({condition})"), ())


#: Netrix's default filter (NewFilterSet): deliver what nothing else handled
DEFAULT = If(IsMessageSend()).Then(Deliver())


@dataclass(frozen=True)
class Decision:
    """What the filter set made of one event: the messages to deliver now, in order (the
    event's own, held ones, both or none), and which filter decided: its position in the
    set, or None for the default filter; `delayed`, the messages to deliver later, each
    with its delay in ns (`Delay`)."""

    deliver: tuple[Message, ...]
    filter: int | None
    delayed: tuple[tuple[Message, int], ...] = ()


class FilterSet:
    """Filters tried in order on every event, the first that handles it deciding, the
    default filter when none does (see the module docstring)."""

    def __init__(self, filters: Sequence[Filter], default: Filter = DEFAULT) -> None:
        wrong = [f for f in filters if not isinstance(f, Filter)]
        if wrong:
            raise ScenarioError(f"a filter set holds filters (If(...).Then(...)), not {wrong[0]!r}")
        self.filters = tuple(filters)
        self.default = default

    def decide(self, event: ScenarioEvent, ctx: Context) -> Decision:
        for index, f in enumerate(self.filters):
            delivered = f(event, ctx)
            if delivered is not None:
                return Decision(tuple(delivered), index, _take_delayed(ctx))
        return Decision(tuple(self.default(event, ctx) or ()), None, _take_delayed(ctx))


def _take_delayed(ctx: Context) -> tuple[tuple[Message, int], ...]:
    delayed = tuple(ctx.delayed)
    ctx.delayed.clear()
    return delayed
