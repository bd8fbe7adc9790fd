#!/bin/sh
# A node container's first process: route everything through the mediator (the node's
# network is internal; the mediator is its gateway), switch off the offloads so the node,
# the mediator and the peer see the same packets, then idle. The campaign loop starts the
# observer and the SUT in here through the Engine API.
set -eu
: "${MALLORY_GATEWAY:?the mediator address on this node's network}"
ip route replace default via "$MALLORY_GATEWAY"
for dev in $(ls /sys/class/net); do
    [ "$dev" = lo ] || ethtool -K "$dev" gso off tso off gro off lro off tx off >/dev/null 2>&1 || true
done
echo "node ${MALLORY_NODE:-?}: default via $MALLORY_GATEWAY"
exec tini -s -- sleep infinity
