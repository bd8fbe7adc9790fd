#!/usr/bin/env bash
# The main job: a short fuzz campaign on an instrumented Redis 7 cluster with Sentinel.
#
# Installs what is missing for the demo (scripts/setup.sh demo: apt packages, venv), builds Debian's Redis
# with the project's failover/replication annotations through mallory-cc (suts/redis/build.sh,
# cached under build/redis/ after the first time), then `mallory fuzz` brings up a 3-node
# cluster in network namespaces (mediator as gateway, an observer per node, redis-server +
# sentinel per node), runs the list-append workload with every oracle on and lets the
# Q-learner choose faults for MALLORY_DEMO_DURATION (default 5m) with the live status
# screen; it ends with the summary (states, schedules, bugs with their bundle paths), the
# annotated events seen, and the cluster removed. Needs root (namespaces, iptables).
#   MALLORY_DEMO_DURATION=30m  MALLORY_DEMO_OUT=out/x  MALLORY_DEMO_SEED=7  MALLORY_DEMO_PLAIN=1
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$(id -u)" -ne 0 ]; then
    echo "make demo needs root: it creates network namespaces and iptables rules" >&2
    exit 1
fi
bash scripts/setup.sh demo
build="$(bash suts/redis/build.sh)"
out="${MALLORY_DEMO_OUT:-out/demo-$(date +%Y%m%d-%H%M%S)}"
# `mallory fuzz` exits 1 when the campaign found bugs: finding them is what the demo is for.
status=0
.venv/bin/mallory fuzz --sut redis-sentinel --nodes 3 \
    --duration "${MALLORY_DEMO_DURATION:-5m}" --workload list-append --seed "${MALLORY_DEMO_SEED:-1}" \
    --out "$out" ${MALLORY_DEMO_PLAIN:+--plain} || status=$?
[ "$status" -le 1 ] || exit "$status"
echo
cat "$out/fuzzer_stats"
echo
.venv/bin/python suts/redis/annotated_events.py "$out/events/events.jsonl" "$build/bin/redis-server.mallory.json"
echo "campaign directory: $out  (bugs: $out/bugs; replay the timeline: .venv/bin/mallory analyze $out/events/events.jsonl)"
