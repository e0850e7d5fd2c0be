#!/usr/bin/env bash
# Where a ferry training step spends its time on a GPU (a diagnosis, not a benchmark): every kernel of a
# short gpt2 run timed by Nsight Compute (gpu__time_duration, clocks as found), summed by kernel name,
# and the run's own op timeline (--profile: forward, backward, loss, optimizer per step) without ncu.
#   bash dev/gpu_kernel_times.sh [MODEL] [BATCH]      # on the GPU machine, build-gpu/bundle.tar.xz carried
set -uo pipefail
cd "$(dirname "$0")/.."
model=${1:-gpt2}
batch=${2:-16}
out=${OUT:-build-gpu/out}
mkdir -p "$out"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
tar -C "$work" -xJf build-gpu/bundle.tar.xz
bundle=$work/bundle
cuda_libraries=$(python3 -c 'import nvidia, os; print(os.path.join(list(nvidia.__path__)[0], "cu13", "lib"))' 2>/dev/null)
export LD_LIBRARY_PATH="$bundle/lib:/usr/local/cuda/lib64:$cuda_libraries${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
python3 benchmarks/random_token_shard.py "$work/tokens.bin" $((1 << 22))
flags=(train --model "$model" --device cuda --precision bf16 --batch "$batch" --seq 1024 --lr-schedule constant --data "$work/tokens.bin"
       --log-every 1000)
ncu=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)

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

# 2. Every kernel of 2 steps under Nsight Compute, summed by name.
if [ -n "$ncu" ]; then
  timeout 240 "$ncu" --metrics gpu__time_duration.sum --clock-control none --csv --page raw --launch-count 20000 \
    "$bundle/bin/ferry" "${flags[@]}" --steps 2 > "$work/ncu.csv" 2> "$out/ncu.log"
  echo "ncu exit $?"
  python3 - "$work/ncu.csv" <<'PY' | tee "$out/kernel_times.txt"
import collections, csv, io, sys
text = open(sys.argv[1]).read()
start = text.find('"ID"')
rows = list(csv.DictReader(io.StringIO(text[start:])))
rows = [row for row in rows if row.get("gpu__time_duration.sum", "").replace(".", "").replace(",", "").isdigit()]
total, count = collections.Counter(), collections.Counter()
for row in rows:
    name = row["Kernel Name"].split("(")[0][:90]
    value = float(row["gpu__time_duration.sum"].replace(",", ""))
    total[name] += value
    count[name] += 1
unit = "ns"
grand = sum(total.values())
print(f"{len(rows)} kernels over 2 steps, {grand / 1e6:.1f} ms of GPU time in all ({unit})")
for name, ns in total.most_common(30):
    print(f"  {ns / 1e6:9.2f} ms  {100 * ns / grand:5.1f}%  {count[name]:6d}x  {name}")
PY
  gzip -c "$work/ncu.csv" > "$out/ncu.csv.gz"
else
  echo "no ncu on this machine"
fi
