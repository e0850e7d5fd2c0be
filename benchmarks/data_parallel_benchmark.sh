#!/usr/bin/env bash
# Data parallelism on this machine's cpu ranks: the step time of dp 2 at ZeRO stages 0, 1 and 2 beside
# dp 1 with the same global batch and the same cores (dp 1 gets all threads, each dp rank its share), and
# how much of the gradient reduction hides behind backward: the time blocked on reductions with
# --overlap-comm true beside false. Prints a table; record it in docs/benchmarks.md.
#   benchmarks/data_parallel_benchmark.sh [FERRY] [STEPS] [LAYERS]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
ferry=${1:-$root/build/ferry}
steps=${2:-6}
layers=${3:-6}
cores=$(nproc)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
shape=(--model gpt2 --layers "$layers" --seq 256 --batch 2 --steps "$steps" --lr 1e-4 --lr-schedule constant --log-every 1000)

"$ferry" train "${shape[@]}" --grad-accum 4 --threads "$cores" --summary "$work/dp1.json" > /dev/null
for stage in 0 1 2; do
  for overlap in true false; do
    mpirun --allow-run-as-root --oversubscribe -np 2 "$ferry" train "${shape[@]}" --grad-accum 2 --threads $((cores / 2 > 0 ? cores / 2 : 1)) \
      --zero-stage "$stage" --overlap-comm "$overlap" --reduce-bucket-size 10000000 --summary "$work/dp2_${stage}_$overlap.json" > /dev/null
  done
done
/usr/bin/python3 - "$work" "$cores" <<'PY'
import json, statistics, sys
work, cores = sys.argv[1], sys.argv[2]
load = lambda name: json.load(open(f"{work}/{name}.json"))
median = lambda run: statistics.median(s["seconds"] for s in run["steps"][1:])
one = load("dp1")
print(f"gpt2 shape, {one['model']['parameters']:,} parameters, global batch 8 x seq 256, {cores} cores; median step after the first")
print(f"  dp 1 (grad-accum 4, {cores} threads): {median(one):.3f} s/step")
print("  ZeRO  overlap   s/step   vs dp 1   blocked on reductions   MiB sent/step   peak MiB")
for stage in (0, 1, 2):
    waits = {}
    for overlap in ("true", "false"):
        run = load(f"dp2_{stage}_{overlap}")
        wait = run["optimizer"]["last_step_seconds"]["gradient_reduction_wait"]
        waits[overlap] = wait
        rank = run["ranks"][0]
        print(f"  {stage:4d}  {overlap:7s} {median(run):7.3f}   {median(one) / median(run):6.2f}x   {wait:8.3f} s (last step)"
              f"        {rank['bytes_sent_per_step'] / 2**20:8.1f}   {rank['peak_allocated'] / 2**20:8.1f}")
    hidden = 1 - waits["true"] / waits["false"] if waits["false"] > 0 else float("nan")
    print(f"        hidden behind backward: {100 * hidden:.0f}% of the blocked time without overlap")
PY
