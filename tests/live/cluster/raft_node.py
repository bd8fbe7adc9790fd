"""A pysyncobj (Raft) node for the observer tests: argv = SELF_ADDR PEER_ADDR...

Every tick (0.2 s, or $RAFT_TICK seconds) it prints one JSON line: its address, the leader
it knows and its counter; the leader also increments the replicated counter, so there is
steady traffic between nodes.
"""

import json
import os
import sys
import time

from pysyncobj import SyncObj, SyncObjConf, replicated


class Counter(SyncObj):
    def __init__(self, me: str, peers: list[str]) -> None:
        super().__init__(me, peers, SyncObjConf(dynamicMembershipChange=False))
        self.value = 0

    @replicated
    def incr(self) -> int:
        self.value += 1
        return self.value


def main() -> None:
    me, peers = sys.argv[1], sys.argv[2:]
    node = Counter(me, peers)
    tick = float(os.environ.get("RAFT_TICK", "0.2"))
    while True:
        time.sleep(tick)
        leader = node._getLeader()
        if node._isLeader():
            node.incr()
        print(json.dumps({"self": me, "leader": str(leader) if leader else None, "value": node.value}), flush=True)


if __name__ == "__main__":
    main()
