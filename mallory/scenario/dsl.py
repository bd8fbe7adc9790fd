"""The words of Netrix's filter language, in Python: conditions over an event and the run's
context, and actions that change the context and say which messages to deliver.

Each follows its Netrix definition (github.com/netrixframework/netrix; file paths below are
that repository's), which is the reference the unit tests check:

    condition                      Netrix                               true when
    a & b, a | b, ~a               Condition.And/Or/Not (sm/condition.go) both / either (each
                                                                        short-circuits) / not
    IsMessageSend()                sm.IsMessageSend                     a SEND event
    IsMessageReceive()             sm.IsMessageReceive                  a RECV event
    IsEventOf(node)                sm.IsEventOf, IsEventOfF             the event is at `node`
    IsEventType(name)              sm.IsEventType                       a code or log event `name`
    IsMessageType(t)               sm.IsMessageType                     SEND/RECV of a `t` message
    IsMessageFrom(node)            sm.IsMessageFrom, IsMessageFromF     SEND/RECV from `node`
    IsMessageTo(node)              sm.IsMessageTo, IsMessageToF         SEND/RECV to `node`
    IsMessageBetween(a, b)         sm.IsMessageBetween                  from a to b or b to a
    IsMessageFromPart(label)       testlib.IsMessageFromPart (conds.go) sender in part `label`
    IsMessageAcrossPartition()     testlib.IsMessageAcrossPartition     ends in two parts
    IsMessageWithinPartition()     testlib.IsMessageWithinPartition     ends in one part
                                   (all three false without a partition or for a node in none)
    InState(label)                 StateMachine.InState (sm/sm.go)      the machine is there
    Once(name, c)                  sm.OnceCondition                     c, the first time only
    Count(label).lt(v) .gt .eq     CountWrapper.Lt/Gt/Eq/Leq/Geq        the counter compares so
      .leq .geq                    (and the ...F variants: v a function (sm/wrapper.go: a
                                   of the event and context)            counter springs into
    CountTo(label)                 sm.CountTo                           being at 0); CountTo's
                                                                        is "<label>_<to>", none
                                                                        for a non-message event
    Set(label).contains()          SetWrapper.Contains                  the event's message is
                                                                        in the set
    Set(label).count()             SetWrapper.Count                     a counter: its size
    IsClientEvent(f, type)         (Mallory's: Netrix has no client     a client event (either
    IsFaultEvent(name)             or fault events)                     argument None: any)

    action                         Netrix (testlib/actions.go)          delivers, and does
    Deliver()                      DeliverMessage                       a SEND's message
    Drop()                         DropMessage                          nothing
    StoreInSet(Set(label))         StoreInSet, SetWrapper.Add           nothing; holds the
                                                                        message in the set
    DeliverAllFromSet(Set(label))  DeliverAllFromSet                    the set's messages, in
                                                                        arrival order; empties it
    Count(label).incr()            IncrCounter, CountWrapper.Incr       nothing; counter + 1
    RecordMessageAs(label)         RecordMessageAs                      nothing; remembers the
                                                                        message as `label`
    OnceAction(name, a)            OnceAction                           a's, the first time only
    CreatePartition(**parts)       Context.CreatePartition,             nothing; makes the run's
                                   Partition.Setup (parition.go)        partition (see below)
    Delay(ms)                      (Mallory's: Netrix delivers at once) a SEND's message, `ms`
                                                                        milliseconds from now

A node argument is a name or a function of the event and context that gives one (Netrix's
`...F` variants in one); `sender_of(label)` and `receiver_of(label)` are such functions, the
ends of the message recorded as `label` (None, so the condition is false, until one is).
Netrix makes a partition in a test's setup; a scenario's setup is client operations, so
`CreatePartition` is an action: a filter places the partition when its condition holds. Its
parts are node lists (names or node functions) or sizes, filled with the nodes no part names
(`Context.create_partition`).

`Count(label)` with `label` a function is Netrix's CountF, and `Set(label)` SetF, except that
their counter or set springs into being like Count's: Netrix's CountF and SetF find only
those made elsewhere, so an Incr or a Store through them alone does nothing.

A condition is not a bool: `a and b` would silently mean `b`, so it raises; write `a & b`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any

from mallory.scenario.context import Context, NodeRef
from mallory.scenario.events import (
    CLIENT_KINDS,
    CODE_KINDS,
    Message,
    ScenarioError,
    ScenarioEvent,
)
from mallory.timeline.event import Kind

#: the longest a `Delay` holds a message (the gateway firewall's bound on a link delay)
MAX_DELAY_MS = 60_000

Test = Callable[[ScenarioEvent, Context], bool]
Effect = Callable[[ScenarioEvent, Context], list[Message]]
#: a value a counter is compared with: a number, or a function of the event and context
#: that gives one (None: the comparison is false)
Value = int | Callable[[ScenarioEvent, Context], "int | None"]


def _text(ref: Any) -> str:
    return repr(ref) if isinstance(ref, (str, int)) else getattr(ref, "__name__", str(ref))


class Condition:
    """A predicate over an event and the run's context, with its text (what a path prints)."""

    def __init__(self, test: Test, text: str) -> None:
        self._test = test
        self.text = text

    def __call__(self, event: ScenarioEvent, ctx: Context) -> bool:
        return bool(self._test(event, ctx))

    def __and__(self, other: Condition) -> Condition:
        return Condition(lambda e, c: self(e, c) and other(e, c), f"({self} & {other})")

    def __or__(self, other: Condition) -> Condition:
        return Condition(lambda e, c: self(e, c) or other(e, c), f"({self} | {other})")

    def __invert__(self) -> Condition:
        return Condition(lambda e, c: not self(e, c), f"~{self}")

    def __bool__(self) -> bool:
        raise TypeError(f"{self} is a condition, not a bool: combine conditions with &, | and ~")

    def __str__(self) -> str:
        return self.text

    __repr__ = __str__


class Action:
    """What a filter does when its condition holds: changes the context, and gives the
    messages to deliver now (none, for most)."""

    def __init__(self, effect: Effect, text: str) -> None:
        self._effect = effect
        self.text = text

    def __call__(self, event: ScenarioEvent, ctx: Context) -> list[Message]:
        return self._effect(event, ctx)

    def __str__(self) -> str:
        return self.text

    __repr__ = __str__


def _on_message(test: Callable[[Message, ScenarioEvent, Context], bool], text: str) -> Condition:
    """A condition on the event's message, false for an event without one."""
    return Condition(lambda e, c: e.message is not None and test(e.message, e, c), text)


class _NodeOf:
    """A node function: an end of the message recorded as `label`."""

    def __init__(self, end: str, label: str) -> None:
        self.end, self.label = end, label
        self.__name__ = f"{'sender' if end == 'src' else 'receiver'}_of({label!r})"

    def __call__(self, event: ScenarioEvent, ctx: Context) -> str | None:
        message = ctx.recorded.get(self.label)
        return None if message is None else getattr(message, self.end)


def sender_of(label: str) -> NodeRef:
    """The sender of the message recorded as `label` (`RecordMessageAs`)."""
    return _NodeOf("src", label)


def receiver_of(label: str) -> NodeRef:
    """The receiver of the message recorded as `label` (`RecordMessageAs`)."""
    return _NodeOf("dst", label)


# -- conditions on the event --------------------------------------------------------------


def IsMessageSend() -> Condition:
    return Condition(lambda e, c: e.kind is Kind.SEND, "IsMessageSend()")


def IsMessageReceive() -> Condition:
    return Condition(lambda e, c: e.kind is Kind.RECV, "IsMessageReceive()")


def IsEventOf(node: NodeRef) -> Condition:
    return Condition(lambda e, c: e.node == c.node(node, e), f"IsEventOf({_text(node)})")


def IsEventType(name: str) -> Condition:
    """A code event (annotation label) or log event (`[[log_events]]` name) called `name`:
    what Netrix's replicas publish as generic events."""
    return Condition(lambda e, c: e.kind in (*CODE_KINDS, Kind.LOG) and e.name == name, f"IsEventType({name!r})")


def IsMessageType(type: str) -> Condition:
    return _on_message(lambda m, e, c: m.type == type, f"IsMessageType({type!r})")


def IsMessageFrom(node: NodeRef) -> Condition:
    return _on_message(lambda m, e, c: m.src == c.node(node, e), f"IsMessageFrom({_text(node)})")


def IsMessageTo(node: NodeRef) -> Condition:
    return _on_message(lambda m, e, c: m.dst == c.node(node, e), f"IsMessageTo({_text(node)})")


def IsMessageBetween(one: NodeRef, two: NodeRef) -> Condition:
    def test(m: Message, e: ScenarioEvent, c: Context) -> bool:
        a, b = c.node(one, e), c.node(two, e)
        return (m.src, m.dst) in ((a, b), (b, a))

    return _on_message(test, f"IsMessageBetween({_text(one)}, {_text(two)})")


def IsClientEvent(f: str | None = None, type: str | None = None) -> Condition:
    """A client event, of operation `f` and type `type` ("invoke", "ok", "fail", "info")
    when given (Mallory's: Netrix's runs have no client events)."""

    def test(e: ScenarioEvent, c: Context) -> bool:
        op, _, kind = e.name.partition(":")
        return e.kind in CLIENT_KINDS and f in (None, op) and type in (None, kind)

    return Condition(test, f"IsClientEvent({_text(f)}, {_text(type)})")


def IsFaultEvent(name: str | None = None) -> Condition:
    """A fault event, called `name` when given (Mallory's)."""
    return Condition(lambda e, c: e.kind is Kind.FAULT and name in (None, e.name), f"IsFaultEvent({_text(name)})")


# -- conditions on the partition ----------------------------------------------------------


def _parts(m: Message, c: Context) -> tuple[str, str] | None:
    """The parts of a message's ends, None without a partition or for a node in no part."""
    if c.partition is None:
        return None
    src, dst = c.partition.part_of(m.src), c.partition.part_of(m.dst)
    return None if src is None or dst is None else (src, dst)


def IsMessageFromPart(label: str) -> Condition:
    return _on_message(lambda m, e, c: c.partition is not None and c.partition.part_of(m.src) == label,
                       f"IsMessageFromPart({label!r})")


def IsMessageAcrossPartition() -> Condition:
    return _on_message(lambda m, e, c: (p := _parts(m, c)) is not None and p[0] != p[1], "IsMessageAcrossPartition()")


def IsMessageWithinPartition() -> Condition:
    return _on_message(lambda m, e, c: (p := _parts(m, c)) is not None and p[0] == p[1], "IsMessageWithinPartition()")


# -- conditions on the run ----------------------------------------------------------------


def InState(label: str) -> Condition:
    """The state machine is in `label` (it steps before the filters, on the same event)."""
    return Condition(lambda e, c: c.state == label, f"InState({label!r})")


def Once(name: str, condition: Condition) -> Condition:
    """`condition`, until it has held once; `name` tells once-conditions apart."""
    key = f"{name}_cond_once"

    def test(e: ScenarioEvent, c: Context) -> bool:
        if key in c.once or not condition(e, c):
            return False
        c.once.add(key)
        return True

    return Condition(test, f"Once({name!r}, {condition})")


class _Counter(ABC):
    """Comparisons of a value the run keeps (`Count`'s counter, a set's size)."""

    text: str

    @abstractmethod
    def value(self, event: ScenarioEvent, ctx: Context) -> int | None:
        """The value now; None when there is none for this event."""

    def _compare(self, op: str, than: Value, holds: Callable[[int, int], bool]) -> Condition:
        def test(e: ScenarioEvent, c: Context) -> bool:
            mine = self.value(e, c)
            other = than if isinstance(than, int) else than(e, c)
            return mine is not None and other is not None and holds(mine, other)

        return Condition(test, f"{self.text}.{op}({_text(than)})")

    def lt(self, than: Value) -> Condition:
        return self._compare("lt", than, lambda a, b: a < b)

    def gt(self, than: Value) -> Condition:
        return self._compare("gt", than, lambda a, b: a > b)

    def eq(self, than: Value) -> Condition:
        return self._compare("eq", than, lambda a, b: a == b)

    def leq(self, than: Value) -> Condition:
        return self._compare("leq", than, lambda a, b: a <= b)

    def geq(self, than: Value) -> Condition:
        return self._compare("geq", than, lambda a, b: a >= b)


class Count(_Counter):
    """The counter `label` (a name, or a function of the event and context that gives one;
    None: no counter for this event, every comparison false and `incr` a no-op)."""

    def __init__(self, label: str | Callable[[ScenarioEvent, Context], str | None], text: str = "") -> None:
        self._label = label
        self.text = text or f"Count({_text(label)})"

    def key(self, event: ScenarioEvent, ctx: Context) -> str | None:
        return self._label if isinstance(self._label, str) else self._label(event, ctx)

    def value(self, event: ScenarioEvent, ctx: Context) -> int | None:
        key = self.key(event, ctx)
        return None if key is None else ctx.counter(key)

    def incr(self) -> Action:
        def effect(e: ScenarioEvent, c: Context) -> list[Message]:
            if (key := self.key(e, c)) is not None:
                c.counters[key] = c.counter(key) + 1
            return []

        return Action(effect, f"{self.text}.incr()")


def CountTo(label: str) -> Count:
    """A counter per receiver: "<label>_<to>" for a message to `to` (Netrix's sm.CountTo)."""
    return Count(lambda e, c: None if e.message is None else f"{label}_{e.message.dst}", f"CountTo({label!r})")


class _SetSize(_Counter):
    def __init__(self, of: Set) -> None:
        self._set = of
        self.text = f"{of.text}.count()"

    def value(self, event: ScenarioEvent, ctx: Context) -> int | None:
        found = self._set.get(event, ctx)
        return None if found is None else len(found)


class Set:
    """The message set `label` (a name, or a function of the event and context that gives
    one; None: no set for this event)."""

    def __init__(self, label: str | Callable[[ScenarioEvent, Context], str | None]) -> None:
        self._label = label
        self.text = f"Set({_text(label)})"

    def get(self, event: ScenarioEvent, ctx: Context) -> dict[str, Message] | None:
        key = self._label if isinstance(self._label, str) else self._label(event, ctx)
        return None if key is None else ctx.message_set(key)

    def contains(self) -> Condition:
        def test(e: ScenarioEvent, c: Context) -> bool:
            found = self.get(e, c)
            return found is not None and e.message is not None and e.message.id in found

        return Condition(test, f"{self.text}.contains()")

    def count(self) -> _Counter:
        return _SetSize(self)


# -- actions ------------------------------------------------------------------------------


def Deliver() -> Action:
    """The message of a SEND event, to be delivered now; nothing for other events."""
    return Action(lambda e, c: [e.message] if e.kind is Kind.SEND and e.message is not None else [], "Deliver()")


def Delay(ms: float) -> Action:
    """The message of a SEND event, to be delivered `ms` milliseconds from now (the gateway
    holds it that long; messages after it on its connection do not wait, so a delay can
    reorder); nothing for other events."""
    if isinstance(ms, bool) or not isinstance(ms, (int, float)) or not 0 <= ms <= MAX_DELAY_MS:
        raise ScenarioError(f"Delay takes milliseconds in [0, {MAX_DELAY_MS}], not {ms!r}")

    def effect(e: ScenarioEvent, c: Context) -> list[Message]:
        if e.kind is Kind.SEND and e.message is not None:
            c.delayed.append((e.message, int(ms * 1_000_000)))
        return []

    return Action(effect, f"Delay({ms!r})")


def Drop() -> Action:
    """Nothing: says in words that a filter delivers nothing."""
    return Action(lambda e, c: [], "Drop()")


def StoreInSet(target: Set) -> Action:
    """Holds the event's message (SEND or RECV) in `target`."""

    def effect(e: ScenarioEvent, c: Context) -> list[Message]:
        found = target.get(e, c)
        if found is not None and e.message is not None:
            found[e.message.id] = e.message
        return []

    return Action(effect, f"StoreInSet({target.text})")


def DeliverAllFromSet(source: Set) -> Action:
    """Every message of `source`, in the order they were stored; empties it."""

    def effect(e: ScenarioEvent, c: Context) -> list[Message]:
        found = source.get(e, c)
        if found is None:
            return []
        out = list(found.values())
        found.clear()
        return out

    return Action(effect, f"DeliverAllFromSet({source.text})")


def RecordMessageAs(label: str) -> Action:
    """Remembers the event's message (SEND or RECV) as `label` (`sender_of`, `receiver_of`)."""

    def effect(e: ScenarioEvent, c: Context) -> list[Message]:
        if e.message is not None:
            c.recorded[label] = e.message
        return []

    return Action(effect, f"RecordMessageAs({label!r})")


def OnceAction(name: str, action: Action) -> Action:
    """`action`, the first time only; `name` tells once-actions apart."""
    key = f"{name}_action_once"

    def effect(e: ScenarioEvent, c: Context) -> list[Message]:
        if key in c.once:
            return []
        c.once.add(key)
        return action(e, c)

    return Action(effect, f"OnceAction({name!r}, {action})")


def CreatePartition(**parts: list[NodeRef] | int) -> Action:
    """Makes the run's partition: each keyword a part's label, its value the part's nodes
    (names or node functions) or its size (see the module docstring)."""
    for label, nodes in parts.items():
        if not isinstance(nodes, (int, list, tuple)) or isinstance(nodes, bool):
            raise ScenarioError(f"CreatePartition: part {label!r} is a list of nodes or a size, not {nodes!r}")

    def effect(e: ScenarioEvent, c: Context) -> list[Message]:
        resolved: dict[str, list[str] | int] = {}
        for label, nodes in parts.items():
            if isinstance(nodes, int):
                resolved[label] = nodes
                continue
            names = [name for n in nodes if (name := c.node(n, e)) is not None]
            if len(names) < len(nodes):
                raise ScenarioError(f"CreatePartition: a node of part {label!r} is not known yet ({_text_list(nodes)})")
            resolved[label] = names
        c.create_partition(resolved)
        return []

    text = ", ".join(f"{label}={nodes if isinstance(nodes, int) else _text_list(nodes)}" for label, nodes in parts.items())
    return Action(effect, f"CreatePartition({text})")


def _text_list(nodes: list[NodeRef]) -> str:
    return "[" + ", ".join(_text(n) for n in nodes) + "]"
