"""Sticky leader (suts/example/README.md, seeded bug 1) all the way to its harm, with
messages alone, on 3 nodes: the README's partition, kill, heal, where an isolation by
messages stands in for the kill. The message sequence:

1. n1 is made the leader: while the run is in its start state every vote request but n1's
   is dropped. Its first append (the one that carries its no-op, `A term n1 0 0 0 1 ...`)
   is dropped, and from then on every message from or to n1 is: n1 leads on, alone, its
   no-op uncommitted;
2. n2 is made the new leader: n3's vote requests reach n2 but n2's votes do not reach
   n3, so n3 cannot win, and n2, which takes up each term n3 campaigns in, wins as soon as
   its own timeout comes before n3's next one (about half the rounds). Dropping n3's vote
   requests instead would leave n2 to out-campaign n3 term by term, a race it could lose
   for longer than the harness waits for a leader. n2's no-op is committed with n3's ack,
   and n3 learns so from n2's next append (`commit` at n3);
3. then every message from or to n2 is dropped too (n2 as good as killed): n3 hears from
   no leader, and campaigns again and again, each time one term higher; its vote requests
   to n1 are counted (and still dropped);
4. after 4 of them (n3 at least 4 terms past n1), n1 and n3 hear each other again: n1 gets
   n3's vote request, or n3's answer to its append, of a term 3 or more ahead from a node
   without a leader.

Without the bug n1 steps down (`stepped-down` at n1): the scenario passes. With
`--bugs sticky-leader` n1 keeps its leadership in n3's term (`sticky-leader-kept-term`)
and sends n3 its own log: n3 must drop n2's no-op, which it knows is committed, to take n1's
(`truncate` at n3, where example_sut.c aborts: "truncating a committed entry"): the
scenario fails in failState. sticky_leader.py makes the bug fire without the harm (no
other leader commits in between).

    mallory scenario run suts/example/scenarios/sticky_leader_rollback.py --sut suts/example/example-bugs.toml   # exit 1
    mallory scenario run suts/example/scenarios/sticky_leader_rollback.py --sut suts/example/example.toml        # exit 0
"""

from mallory.scenario import *


def _carries_entries(event, ctx):
    fields = event.message.payload.split() if event.message is not None else []
    return len(fields) > 6 and fields[6] != b"0"


CARRIES_ENTRIES = IsMessageType("append") & Condition(_carries_entries, "CarriesEntries()")
ELECTIONS = Count("elections")
N1_CUT = InState("cut") | InState("new-leader") | InState("committed")
N2_GONE = InState("committed") | InState("healed") | InState("kept-term")

FILTERS = [
    If(InState(START) & IsMessageType("vote-request") & ~IsMessageFrom("n1")).Then(Drop()),
    If(Once("n1-leads", IsMessageSend() & IsMessageFrom("n1") & CARRIES_ENTRIES)).Then(Drop()),
    If(InState("committed") & IsMessageSend() & IsMessageType("vote-request") & IsMessageFrom("n3")
       & IsMessageTo("n1")).Then(ELECTIONS.incr()),
    If(N1_CUT & (IsMessageFrom("n1") | IsMessageTo("n1"))).Then(Drop()),
    If(InState("cut") & IsMessageType("vote-reply") & IsMessageTo("n3")).Then(Drop()),
    If(N2_GONE & (IsMessageFrom("n2") | IsMessageTo("n2"))).Then(Drop()),
]

STATE_MACHINE = StateMachine()
(STATE_MACHINE.builder()
    .on(IsMessageSend() & IsMessageFrom("n1") & CARRIES_ENTRIES, "cut")
    .on(IsEventType("became-leader") & IsEventOf("n2"), "new-leader")
    .on(IsEventType("commit") & IsEventOf("n3"), "committed")
    .on(ELECTIONS.geq(4), "healed"))
STATE_MACHINE.builder("healed").on(IsEventOf("n1") & IsEventType("stepped-down"), SUCCESS)
(STATE_MACHINE.builder("healed")
    .on(IsEventOf("n1") & IsEventType("sticky-leader-kept-term"), "kept-term")
    .on(IsEventOf("n3") & IsEventType("truncate"), FAIL))

TIMEOUT_S = 40
