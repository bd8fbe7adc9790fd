"""Stall catch-up (suts/example/README.md, seeded bug 2), made with messages and one pause,
on 3 nodes. The message sequence:

1. n1 is made the leader: while the run is in its start state every vote request but n1's
   is dropped, so only n1 can gather votes. Its first append (the one that carries its
   term's no-op entry, `A term n1 0 0 0 1 ...`) is dropped, and from then on n1 is cut off
   from n2 and n3 (a partition: every message across it is dropped). n1's no-op stays in
   its log, uncommitted;
2. n2 and n3 time out, elect a new leader between them (its vote requests now pass), which
   appends a no-op of its own term at the same index and commits it (`commit` at n2 or n3);
3. SETUP waits for that, then pauses n1 for 2 s: while it is paused the partition is lifted
   (state `paused`, on the pause's fault event), so the new leader's appends, which name a
   commit index at or past n1's uncommitted entry, queue up in n1's sockets;
4. n1 resumes. Its event loop notices it did not run for longer than an election timeout
   and takes the queued append in that stalled round.

Without the bug n1 steps down, finds its entry conflicts with the new leader's and drops it
(`truncate`): the scenario passes. With `--bugs stall-catchup`, n1 first "catches up": it
applies up to the new leader's commit index, its own uncommitted no-op included
(`stall-catchup-applied`), and then truncates that applied entry (`truncate`, where
example_sut.c aborts: "truncating a committed entry"): the scenario fails in failState. If
n1 dies of "log mismatch below the commit index" instead, no `truncate` follows and the run
times out in `applied-uncommitted`, not a success state: it fails too.

    mallory scenario run suts/example/scenarios/stall_catchup.py --sut suts/example/example-bugs.toml   # exit 1
    mallory scenario run suts/example/scenarios/stall_catchup.py --sut suts/example/example.toml        # exit 0

Needs the messages' bytes (an append is "A term leader prevIndex prevTerm commit n
entries..", example_sut.c's header comment) to tell an append with entries from a
heartbeat.
"""

from mallory.scenario import *


def _carries_entries(event, ctx):
    fields = event.message.payload.split() if event.message is not None else []
    return len(fields) > 6 and fields[6] != b"0"


CARRIES_ENTRIES = IsMessageType("append") & Condition(_carries_entries, "CarriesEntries()")
CUT = InState("cut") | InState("new-leader") | InState("committed")

FILTERS = [
    If(InState(START) & IsMessageType("vote-request") & ~IsMessageFrom("n1")).Then(Drop()),
    If(Once("n1-leads", IsMessageSend() & IsMessageFrom("n1") & CARRIES_ENTRIES)).Then(
        CreatePartition(old=["n1"], rest=2)),
    If(CUT & IsMessageAcrossPartition()).Then(Drop()),
]

STATE_MACHINE = StateMachine()
(STATE_MACHINE.builder()
    .on(IsMessageSend() & IsMessageFrom("n1") & CARRIES_ENTRIES, "cut")
    .on(IsEventType("became-leader") & ~IsEventOf("n1"), "new-leader")
    .on(IsEventType("commit") & ~IsEventOf("n1"), "committed")
    .on(IsFaultEvent("pause:n1"), "paused"))
STATE_MACHINE.builder("paused").on(IsEventOf("n1") & IsEventType("truncate"), SUCCESS)
(STATE_MACHINE.builder("paused")
    .on(IsEventOf("n1") & IsEventType("stall-catchup-applied"), "applied-uncommitted")
    .on(IsEventOf("n1") & IsEventType("truncate"), FAIL))

SETUP = [{"await": "committed"}, {"pause": "n1", "for_s": 2}]
TIMEOUT_S = 40
