"""A follower starved of heartbeats deposes the leader once it hears from it again
(raft-kv on libraft 0.15, without pre-vote as raft.toml runs it), on 3 nodes. After
Netrix's raft-testing DropHeartbeat (tests/voting/drop_heartbeat.go).

1. the first append-entries names the leader L and its receiver F; from then on every
   append-entries and install-snapshot to F is dropped, so F's election timer fires and it
   becomes a candidate of a higher term. Its vote requests are refused (libraft's leader
   stickiness: a node with a leader neither votes nor takes the term), so it stays one;
2. then nothing is dropped any more: F answers L's next append-entries with its higher term,
   and L steps down (Raft: a higher term in any reply makes a leader a follower);
3. a leader is elected again.

Each step passing is what Raft without pre-vote does. With pre-vote on (raft-kv's `-v`) F
never raises its term, L is not deposed, and a run ends in `campaigning` at its timeout,
failed: the disruption pre-vote exists to prevent.
"""

from mallory.scenario import *

LEADER, FOLLOWER = sender_of("heartbeat"), receiver_of("heartbeat")

FILTERS = [
    If(Once("heartbeat", IsMessageSend() & IsMessageType("append-entries"))).Then(RecordMessageAs("heartbeat")),
    If(InState("starving") & IsMessageTo(FOLLOWER)
       & (IsMessageType("append-entries") | IsMessageType("install-snapshot"))).Then(Count("starved").incr()),
]

STATE_MACHINE = StateMachine()
(STATE_MACHINE.builder()
    .on(IsMessageSend() & IsMessageType("append-entries"), "starving")
    .on(IsEventOf(FOLLOWER) & IsEventType("became-candidate"), "campaigning")
    .on(IsEventOf(LEADER) & IsEventType("became-follower"), "deposed")
    .on(IsEventType("became-leader"), SUCCESS))

TIMEOUT_S = 30
