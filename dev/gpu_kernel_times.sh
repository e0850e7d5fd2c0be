#!/usr/bin/env bash
# Where a ferry training step spends its time on a GPU (a diagnosis, not a benchmark): every kernel of a
# short gpt2 run timed by CUPTI activity records (dev/cuda_kernel_timer.cpp), summed by kernel name,
# and the run's own op timeline (--profile: forward, backward, loss, optimizer per step).
#   bash dev/gpu_kernel_times.sh [MODEL] [BATCH]      # on the GPU machine, build-gpu/bundle.tar.xz carried
set -uo pipefail
cd "$(dirname "$0")/.."
model=${1:-gpt2}
batch=${2:-16}
# shellcheck source=dev/gpu_bundle_env.sh
source dev/gpu_bundle_env.sh
python3 benchmarks/random_token_shard.py "$work/tokens.bin" $((1 << 22))
flags=(train --model "$model" --device cuda --precision bf16 --batch "$batch" --seq 1024 --lr-schedule constant --data "$work/tokens.bin"
       --log-every 1000)

# 1. The op timeline of 3 steps (no profiler attached): each op kind's share of the last step.
timeout 120 "$bundle/bin/ferry" "${flags[@]}" --steps 3 --profile "$work/profile" --summary "$work/summary.json" > "$out/profile_run.log" 2>&1
python3 - "$work/profile/profile.json" "$work/summary.json" <<'PY' | tee "$out/op_times.txt"
import collections, json, sys
profile, summary = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
print("steps (s):", [round(step["seconds"], 3) for step in summary["steps"]])
ops = [dict(zip(profile["ops_columns"], op)) for op in profile["ops"]]
steps = [op for op in ops if op["kind"] == "step"]
last = steps[-1]
inside = [op for op in ops if op["start_ns"] >= last["start_ns"] and op["end_ns"] <= last["end_ns"] and op["kind"] != "step"]
total = collections.Counter()
count = collections.Counter()
for op in inside:
    if op["depth"] == 1 or op["kind"] == "copy":
        total[(op["kind"], op["depth"])] += op["end_ns"] - op["start_ns"]
        count[(op["kind"], op["depth"])] += 1
span = last["end_ns"] - last["start_ns"]
print(f"last step: {span / 1e6:.1f} ms of host time; by op kind (host time, depth):")
for (kind, depth), ns in total.most_common():
    print(f"  {kind:12s} depth {depth}  {count[(kind, depth)]:5d} ops  {ns / 1e6:9.2f} ms  {100 * ns / span:5.1f}%")
PY

# 2. Every kernel, copy and memset of 4 steps timed by CUPTI (dev/cuda_kernel_timer.cpp, injected), summed by
# name; the raw table (mangled names: c++filt them here) in kernel_times.tsv.
CUDA_INJECTION64_PATH=$bundle/lib/cuda_kernel_timer.so FERRY_KERNEL_TIMES=$out/kernel_times.tsv \
  timeout 150 "$bundle/bin/ferry" "${flags[@]}" --steps 4 > "$out/kernel_timer_run.log" 2>&1
echo "kernel timer run exit $?"
python3 - "$out/kernel_times.tsv" 4 <<'PY' | tee "$out/kernel_times.txt"
import sys
lines = open(sys.argv[1]).read().splitlines()
span = int(lines[0].split("\t")[1])
rows = [line.split("\t") for line in lines[2:]]
rows = [(name, int(count), int(ns), int(nbytes)) for name, count, ns, nbytes in rows]
steps = int(sys.argv[2])
grand = sum(ns for _, _, ns, _ in rows)
print(f"GPU busy {grand / 1e6:.1f} ms over a span of {span / 1e6:.1f} ms ({steps} steps, the first with warm-up)")
for name, count, ns, nbytes in sorted(rows, key=lambda row: -row[2])[:40]:
    print(f"  {ns / 1e6 / steps:9.2f} ms/step {100 * ns / grand:5.1f}% {count // steps:6d}x/step  {name[:110]}")
PY
