#!/usr/bin/env bash
# Replays GPT-2 training traces (sequence length fixed, and changing every step) through the caching
# allocator with fixed and with expandable segments: peak reserved and the smallest capacity that
# completes, each beside the trace's own peak of live requested bytes (the theoretical floor).
# Usage: benchmarks/replay_benchmark.sh [build-dir]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

python3 scripts/make_gpt_trace.py --layers 12 --hidden 768 --heads 12 --batch 8 --seq 1024 --steps 4 \
  --output "$work/gpt2-seq1024.csv"
python3 scripts/make_gpt_trace.py --layers 12 --hidden 768 --heads 12 --batch 8 --seq 128:1024 --steps 12 \
  --seed 7 --output "$work/gpt2-seq128-1024.csv"

printf '%-22s %-12s %8s %14s %14s %10s %14s %10s %9s\n' trace segments records peak_requested peak_reserved \
  reserved/req min_capacity min/req seconds
for trace in gpt2-seq1024 gpt2-seq128-1024; do
  for conf in expandable_segments:False expandable_segments:True; do
    start=$(date +%s.%N)
    "$build/ferry" replay "$work/$trace.csv" --alloc-conf "$conf" --find-min-capacity --summary "$work/s.json" > /dev/null
    end=$(date +%s.%N)
    python3 - "$work/s.json" "$trace" "${conf#expandable_segments:}" "$start" "$end" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
mib = 1 << 20
segments = "expandable" if sys.argv[3] == "True" else "fixed"
print(f"{sys.argv[2]:<22} {segments:<12} {s['records']:>8} {s['peak_requested']/mib:>10.1f} MiB "
      f"{s['peak_reserved']/mib:>10.1f} MiB {s['peak_reserved']/s['peak_requested']:>10.3f} "
      f"{s['min_capacity']/mib:>10.1f} MiB {s['min_capacity']/s['peak_requested']:>10.3f} "
      f"{float(sys.argv[5]) - float(sys.argv[4]):>9.2f}")
PY
  done
done
