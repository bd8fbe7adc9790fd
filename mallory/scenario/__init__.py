"""Netrix-style scenarios (issue 19): a filter set that decides every message of a declared
peer port and a state machine over the run's events, pure (no I/O), after Netrix
(github.com/netrixframework/netrix: testlib/, sm/).

    events.py   the message and event model the scenario sees
    context.py  what a run's conditions and actions share: counters, message sets, recorded
                messages, once-flags, the partition, the machine's state
    dsl.py      conditions and actions (Netrix's vocabulary, the table in its docstring)
    filters.py  If(...).Then(...), IsolateNode, the filter set (first match, deliver by default)
    machine.py  the state machine and a run through it
    engine.py   a scenario and the engine that runs one on events (who drives it: there)
    roles.py    nodes named by role (the leader, a follower), bound when filters go into force

A scenario file, or a file of filter sets for a campaign (mallory/harness/scenario_file.py
reads both), imports its words from here:

    from mallory.scenario import *
"""

from mallory.scenario.dsl import (
    Action,
    Condition,
    Count,
    CountTo,
    CreatePartition,
    Delay,
    Deliver,
    DeliverAllFromSet,
    Drop,
    InState,
    IsClientEvent,
    IsEventOf,
    IsEventType,
    IsFaultEvent,
    IsMessageAcrossPartition,
    IsMessageBetween,
    IsMessageFrom,
    IsMessageFromPart,
    IsMessageReceive,
    IsMessageSend,
    IsMessageTo,
    IsMessageType,
    IsMessageWithinPartition,
    Once,
    OnceAction,
    RecordMessageAs,
    Set,
    StoreInSet,
    receiver_of,
    sender_of,
)
from mallory.scenario.filters import If, IsolateNode
from mallory.scenario.machine import FAIL, START, SUCCESS, StateMachine
from mallory.scenario.roles import role

__all__ = [
    "FAIL", "START", "SUCCESS", "Action", "Condition", "Count", "CountTo", "CreatePartition", "Delay", "Deliver",
    "DeliverAllFromSet", "Drop", "If", "InState", "IsClientEvent", "IsEventOf", "IsEventType", "IsFaultEvent",
    "IsMessageAcrossPartition", "IsMessageBetween", "IsMessageFrom", "IsMessageFromPart", "IsMessageReceive",
    "IsMessageSend", "IsMessageTo", "IsMessageType", "IsMessageWithinPartition", "IsolateNode", "Once", "OnceAction",
    "RecordMessageAs", "Set", "StateMachine", "StoreInSet", "receiver_of", "role", "sender_of",
]
