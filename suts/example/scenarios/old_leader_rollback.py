"""An old leader's uncommitted writes are rolled back: the setting of stall catch-up
(suts/example/README.md, seeded bug 2), made with messages, on 3 nodes.

1. SETUP writes through the leader L; the first append that carries entries (L's, with a
   write no one else has) is held back, and from then on L is cut off from the other two:
   its writes stay uncommitted in its log;
2. the other two elect a new leader, which commits an entry of its own at the index of
   L's first uncommitted one;
3. then nothing is dropped any more: the new leader's appends reach L, which must drop its
   uncommitted entries (`truncate`) and apply none of them.

L truncating passes, on both builds. Stall catch-up needs L to have been stalled (paused
past an election timeout) when that first append arrives, which no filter can do:
stall_catchup.py adds that pause (a SETUP step) and so makes the seeded bug happen; a pause
of L before the heal would make the buggy SUT apply its uncommitted writes as if committed
(`stall-catchup-applied` at L), which fails this scenario too.

Needs the messages' bytes (an append is "A term leader prevIndex prevTerm commit n
entries..", example_sut.c's header comment) to tell an append with entries from a
heartbeat.
"""

from mallory.scenario import *


def _carries_entries(event, ctx):
    fields = event.message.payload.split() if event.message is not None else []
    return len(fields) > 6 and fields[6] != b"0"


CARRIES_ENTRIES = IsMessageType("append") & Condition(_carries_entries, "CarriesEntries()")
OLD_LEADER = sender_of("old-leader")

FILTERS = [
    If(Once("old-leader", IsMessageSend() & CARRIES_ENTRIES)).Then(
        RecordMessageAs("old-leader"), CreatePartition(old=[OLD_LEADER], rest=2)),
    If((InState("cut") | InState("new-leader")) & IsMessageAcrossPartition()).Then(Drop()),
]

STATE_MACHINE = StateMachine()
(STATE_MACHINE.builder()
    .on(IsMessageSend() & CARRIES_ENTRIES, "cut")
    .on(IsEventType("became-leader") & ~IsEventOf(OLD_LEADER), "new-leader")
    .on(IsEventType("commit") & ~IsEventOf(OLD_LEADER), "healed"))
STATE_MACHINE.builder("healed").on(IsEventOf(OLD_LEADER) & IsEventType("stall-catchup-applied"), FAIL)
STATE_MACHINE.builder("healed").on(IsEventOf(OLD_LEADER) & IsEventType("truncate"), SUCCESS)

SETUP = [{"f": "write", "value": 1}, {"f": "write", "value": 2}]
TIMEOUT_S = 30
