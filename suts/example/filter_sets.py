"""Filter sets for campaigns on the example SUT (`mallory fuzz --filter-sets`; the format:
mallory/harness/scenario_file.py). Each is a fault `filters:<name>` in force for one step's
window. The example SUT's adapter cannot tell which node leads (a TOML spec), so these sets
name nodes by name or by a drawn follower, never role("leader").

Its messages (suts/example/example.toml [messages]): vote-request, vote-reply, append,
append-reply.
"""

from mallory.scenario import *

FILTER_SETS = {
    # a node that hears no appends times out and campaigns while its peers still follow
    "drop-appends-to-a-node": [
        If(IsMessageType("append") & IsMessageTo(role("follower"))).Then(Drop()),
    ],
    # elections fail for the window: every candidate's term climbs (the sticky-leader gap)
    "drop-vote-replies": [
        If(IsMessageType("vote-reply")).Then(Drop()),
    ],
    # a leader's appends are acknowledged late: its commit index stalls, then jumps
    "delay-append-replies": [
        If(IsMessageType("append-reply")).Then(Delay(200)),
    ],
    # the first three appends to a node are held and then delivered after the fourth:
    # reordered appends, which the follower must walk back
    "reorder-appends-to-a-node": [
        If(IsMessageType("append") & IsMessageTo(role("follower")) & Count("held").lt(3))
        .Then(StoreInSet(Set("held")), Count("held").incr()),
        If(IsMessageType("append") & IsMessageTo(role("follower")))
        .Then(Deliver(), DeliverAllFromSet(Set("held"))),
    ],
    # one node cut off by messages, not by packets: its connections stay up
    "isolate-a-node": [IsolateNode(role("follower"))],
}
