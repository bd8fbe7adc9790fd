"""Filter sets for campaigns on raft-kv (`mallory fuzz --sut raft-kv --filter-sets`; the
format: mallory/harness/scenario_file.py). Each is a fault `filters:<name>` in force for one
step's window; raft-kv's adapter names the leader, so sets may name role("leader").

Its messages (mallory/suts/raft_kv/wire.py, libraft's uv wire format): append-entries,
append-entries-result, request-vote, request-vote-result, install-snapshot, timeout-now.
"""

from mallory.scenario import *

FILTER_SETS = {
    # a follower starved of heartbeats for one window (Netrix's DropHeartbeat)
    "drop-appends-to-a-follower": [
        If(IsMessageType("append-entries") & IsMessageFrom(role("leader")) & IsMessageTo(role("follower")))
        .Then(Drop()),
    ],
    # the leader hears no acknowledgements: it cannot commit, nor see that followers are alive
    "drop-append-results-to-the-leader": [
        If(IsMessageType("append-entries-result") & IsMessageTo(role("leader"))).Then(Drop()),
    ],
    # elections in the window cannot finish
    "drop-vote-results": [
        If(IsMessageType("request-vote-result")).Then(Drop()),
    ],
    # appends to a follower reordered: the first two are held until the third has gone
    "reorder-appends-to-a-follower": [
        If(IsMessageType("append-entries") & IsMessageTo(role("follower")) & Count("held").lt(2))
        .Then(StoreInSet(Set("held")), Count("held").incr()),
        If(IsMessageType("append-entries") & IsMessageTo(role("follower")))
        .Then(Deliver(), DeliverAllFromSet(Set("held"))),
    ],
    # the leader's messages to one follower are late (200 ms), the other follower's not
    "delay-leader-to-a-follower": [
        If(IsMessageFrom(role("leader")) & IsMessageTo(role("follower"))).Then(Delay(200)),
    ],
    # the leader cut off by messages, not packets (its TCP connections stay up)
    "isolate-the-leader": [IsolateNode(role("leader"))],
}
