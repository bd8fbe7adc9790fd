#!/usr/bin/env bash
# The main job: a short fuzz campaign on the bundled default cluster.
#
# Builds the example SUT (suts/example: a Raft-lite replicated register in C, annotated with
# // INSTRUMENT_FUNC / // INSTRUMENT_BLOCK) with mallory-cc, brings up a 3-node cluster in
# network namespaces with the mediator as gateway and an observer per node, runs the
# register workload and lets the Q-learner choose faults for MALLORY_DEMO_DURATION (default
# 5m), then prints the summary and removes the cluster. Needs root (network namespaces).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$(id -u)" -ne 0 ]; then
    echo "make demo needs root: it creates network namespaces and iptables rules" >&2
    exit 1
fi
PATH="$PWD/.venv/bin:$PATH" make -s -C suts/example >/dev/null
out="${MALLORY_DEMO_OUT:-out/demo-$(date +%Y%m%d-%H%M%S)}"
.venv/bin/mallory fuzz --sut suts/example/example.toml --nodes 3 \
    --duration "${MALLORY_DEMO_DURATION:-5m}" --workload register --seed "${MALLORY_DEMO_SEED:-1}" \
    --out "$out" ${MALLORY_DEMO_PLAIN:+--plain}
echo
cat "$out/fuzzer_stats"
echo "campaign directory: $out  (analyze the recorded timeline: .venv/bin/mallory analyze $out/events/events.jsonl)"
