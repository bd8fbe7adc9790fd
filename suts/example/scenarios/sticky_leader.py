"""Sticky leader (suts/example/README.md, seeded bug 1), made with messages alone.

A leader that hears of a term 3 or more ahead from a node without a leader must step down;
with `--bugs sticky-leader` it adopts the term and stays leader (example_sut.c,
leader_keeps_term). The README's sequence opens the gap with a partition and a kill; these
filters open it by holding messages back, on 3 nodes:

1. the first append names the leader L (only a leader sends appends): it is recorded and
   L is cut off from the other two (a partition: every message across it is dropped);
2. the other two's vote replies are dropped, so every election fails and the next starts
   one term higher; the vote requests between them are counted;
3. after 8 of them (two candidates that time out together share a term, so at least 4
   terms past L's) the partition is healed: L hears the higher term from a candidate, or
   in the reply to its next append from a node without a leader. Vote replies are still
   dropped, so that no other node becomes leader first: L hearing of the term from a
   leader (its append) is a correct step-down whatever the bug, and once the election
   that healed it had asked only the other node (L's request was dropped in the cut),
   could win that race (it did in one of the first two live runs).

L stepping down passes; L keeping its term (`sticky-leader-kept-term`) fails: run on
suts/example/example-bugs.toml it should fail, on example.toml pass.
"""

from mallory.scenario import *

LEADER = sender_of("leader")
ELECTIONS = Count("elections")

FILTERS = [
    If(Once("leader", IsMessageSend() & IsMessageType("append"))).Then(
        RecordMessageAs("leader"), CreatePartition(old=[LEADER], rest=2)),
    If(InState("cut") & IsMessageAcrossPartition()).Then(Drop()),
    If(InState("cut") & IsMessageSend() & IsMessageType("vote-request")).Then(ELECTIONS.incr(), Deliver()),
    If((InState("cut") | InState("healed")) & IsMessageType("vote-reply")).Then(Drop()),
]

STATE_MACHINE = StateMachine()
STATE_MACHINE.builder().on(IsMessageSend() & IsMessageType("append"), "cut").on(ELECTIONS.geq(8), "healed")
STATE_MACHINE.builder("healed").on(IsEventOf(LEADER) & IsEventType("sticky-leader-kept-term"), FAIL)
STATE_MACHINE.builder("healed").on(IsEventOf(LEADER) & IsEventType("stepped-down"), SUCCESS)

TIMEOUT_S = 30
