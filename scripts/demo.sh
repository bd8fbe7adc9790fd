#!/usr/bin/env bash
# The main job, as far as the project goes today: record a 5-node cluster's event stream
# and replay it through the timeline, the EventHistory abstraction and the state store.
# (The live fuzz campaign against a real cluster replaces this once `mallory fuzz` exists.)
set -euo pipefail
cd "$(dirname "$0")/.."
out="${MALLORY_DEMO_OUT:-out/demo}"
mkdir -p "$out"
.venv/bin/mallory synthesize --out "$out/events.jsonl" --events 100000 --nodes 5 --behaviours 6
.venv/bin/mallory analyze "$out/events.jsonl" | tee "$out/analyze.txt" | tail -n 12
echo "recording: $out/events.jsonl; per-window states: $out/analyze.txt"
