#!/usr/bin/env bash
# Dry runs and baselines end to end: `ferry train --device meta` reports exactly the peaks a cpu run
# measures, for several shapes and every recompute policy; `ferry bench memory` writes its table, CSV,
# JSON and chart, and its baseline row is the dry run's peak (and with --kernels cuda keeps the cuda
# kernels' attention state); the recompute config keys of DeepSpeed
# and Megatron select the policies they name.
root=$1
source "$(dirname "$0")/common.sh"

# 1. meta == cpu: peak allocated, peak reserved and the breakdown at the peak, exactly.
shapes=("--layers 2 --hidden 32 --heads 2 --seq 32 --batch 2"
        "--layers 3 --hidden 48 --heads 3 --vocab 300 --seq 24 --batch 3 --grad-accum 2 --precision bf16 --dropout 0.1"
        "--layers 2 --hidden 64 --heads 4 --seq 64 --batch 1 --loss-chunk 7"
        "--layers 2 --hidden 32 --heads 2 --seq 32 --batch 2 --precision fp16 --dropout 0.1")
for shape in "${shapes[@]}"; do
  for policy in none selective full every:2 first:1; do
    for device in cpu meta; do
      # shellcheck disable=SC2086
      "$ferry" train $shape --steps 2 --threads 2 --log-every 100 --checkpointing "$policy" --device "$device" \
        --summary "$work/$device.json" > /dev/null
    done
    /usr/bin/python3 - "$work/cpu.json" "$work/meta.json" "$shape $policy" <<'PY'
import json, sys
cpu, meta = (json.load(open(p))["memory"] for p in sys.argv[1:3])
for key in ["peak_allocated", "peak_reserved", "at_peak", "max_by_category"]:
    assert cpu[key] == meta[key], (sys.argv[3], key, cpu[key], meta[key])
PY
  done
done

# 2. ferry bench memory on gpt2-tiny.
"$ferry" bench memory --model gpt2-tiny --batch 4 --seq 64 --output "$work/bench" --summary "$work/bench.json" > "$work/bench.txt"
grep -q "checkpointing selective" "$work/bench.txt"
grep -q "theory none: ZeRO 16 B/param + Korthikanti" "$work/bench.txt"
"$ferry" train --model gpt2-tiny --batch 4 --seq 64 --steps 1 --device meta --summary "$work/dry.json" > /dev/null
/usr/bin/python3 - "$work/bench" "$work/bench.json" "$work/dry.json" <<'PY'
import csv, json, sys
directory, summary, dry = sys.argv[1], json.load(open(sys.argv[2])), json.load(open(sys.argv[3]))
assert json.load(open(directory + "/memory.json")) == summary
rows = {r["checkpointing"] + "/" + r["kind"]: r for r in summary["rows"]}
# gpt2-tiny has 4 blocks: none, selective, first:1, first:2, first:3, full; then three theory rows.
assert [r["name"] for r in summary["rows"]][:6] == ["checkpointing " + p for p in ["none", "selective", "first:1", "first:2", "first:3", "full"]]
assert len(summary["rows"]) == 9
base = rows["none/measured"]
assert base["peak_allocated"] == dry["memory"]["peak_allocated"] and base["peak_reserved"] == dry["memory"]["peak_reserved"]
assert base["ratio_to_baseline"] == 1.0 and base["recompute_flops"] == 0
full, selective = rows["full/measured"], rows["selective/measured"]
assert full["peak_allocated"] < selective["peak_allocated"] < base["peak_allocated"]
assert full["activation_reduction"] > selective["activation_reduction"] > 1
assert full["recompute_flops"] > selective["recompute_flops"] > 0
params = summary["model"]["parameters"]
assert rows["none/theory"]["model_states"] == 16 * params
# fp32 model states measured: 4 (parameters) + 4 (gradients) + 8 (Adam moments) bytes per parameter.
at_peak = base["at_peak"]
states = at_peak["parameters"] + at_peak["gradients"] + at_peak["optimizer_states"]
assert 16 * params <= states < 16 * params + 512 * 3 * 4 * 40, (states, 16 * params)
with open(directory + "/memory.csv") as f:
    table = list(csv.DictReader(f))
assert len(table) == 9 and int(table[0]["peak_allocated"]) == base["peak_allocated"]
PY
grep -q "<svg" "$work/bench/memory.html"
render "$work/bench/memory.html" "$work/bench.png"
expect_error "unknown --model" "$ferry" bench memory --model gpt9 --output "$work/bench"
# --kernels cuda: the dry runs allocate what the cuda kernels would (f32 log-sum-exps, not T x T
# probabilities), on this machine without a GPU.
"$ferry" bench memory --model gpt2-tiny --batch 4 --seq 64 --kernels cuda --output "$work/bench-cuda" \
  --summary "$work/bench-cuda.json" > /dev/null
/usr/bin/python3 - "$work/bench.json" "$work/bench-cuda.json" <<'PY'
import json, sys
cpu, cuda = (json.load(open(p)) for p in sys.argv[1:3])
assert cpu["run"]["kernels"] == "cpu" and cuda["run"]["kernels"] == "cuda"
m, run = cuda["model"], cuda["run"]
L, NH, B, T = m["layers"], m["heads"], run["micro_batch"], run["seq"]
kept = lambda summary: summary["rows"][0]["activation_peak"]
assert kept(cpu) - kept(cuda) == L * (B * NH * T * T * 4 - B * NH * T * 4), (kept(cpu), kept(cuda))
assert cuda["rows"][0]["max_by_category"]["workspace"] >= 32 << 20  # cuBLASLt's workspace
PY
expect_error "--kernels: rocm not in" "$ferry" bench memory --model gpt2-tiny --kernels rocm --output "$work/bench"
expect_error "pipeline stages run on the cpu device only" "$ferry" bench memory --model gpt2-tiny --kernels cuda --pp 2 --output "$work/bench"

# 3. Recompute config keys: DeepSpeed's activation_checkpointing and Megatron's recompute_* keys.
check_policy() {  # check_policy CONFIG_JSON EXPECTED_POLICY
  printf '%s' "$1" > "$work/config.json"
  "$ferry" train --config "$work/config.json" --layers 2 --hidden 32 --heads 2 --seq 16 --batch 1 --steps 1 --device meta \
    --summary "$work/policy.json" > /dev/null
  /usr/bin/python3 -c "import json,sys; p=json.load(open(sys.argv[1]))['run']['checkpointing']; assert p == sys.argv[2], (p, sys.argv[2])" \
    "$work/policy.json" "$2"
}
check_policy '{"activation_checkpointing": {"partition_activations": false, "cpu_checkpointing": false}}' full
check_policy '{"recompute_granularity": "selective"}' selective
check_policy '{"recompute_granularity": "full", "recompute_method": "uniform", "recompute_num_layers": 1}' full
check_policy '{"recompute_granularity": "full", "recompute_method": "block", "recompute_num_layers": 1}' first:1
check_policy '{"recompute_granularity": "full", "ferry": {"checkpointing": "every:2"}}' every:2
printf '{"activation_checkpointing": {"partition_activations": true}}' > "$work/bad.json"
expect_error "ferry has no tensor parallelism yet" "$ferry" train --config "$work/bad.json" --steps 1 --device meta
printf '{"activation_checkpointing": {"cpu_checkpointing": true}}' > "$work/bad.json"
expect_error "cpu_checkpointing" "$ferry" train --config "$work/bad.json" --steps 1 --device meta
printf '{"recompute_granularity": "full", "recompute_method": "uniform", "recompute_num_layers": 2}' > "$work/bad.json"
expect_error "ferry recomputes per block" "$ferry" train --config "$work/bad.json" --steps 1 --device meta
printf '{"recompute_granularity": "some"}' > "$work/bad.json"
expect_error "is not one of full, selective" "$ferry" train --config "$work/bad.json" --steps 1 --device meta
printf '{"activation_checkpointing": {"number_checkpoints": 4}}' > "$work/noted.json"
"$ferry" train --config "$work/noted.json" --steps 1 --device meta --layers 2 --hidden 32 --heads 2 --seq 16 --batch 1 > "$work/noted.txt"
grep -q "note: activation_checkpointing.number_checkpoints has no effect in ferry" "$work/noted.txt"

# 5. --dry-run-of cuda: the meta device allocates as a cuda run does (fused attention keeps log-sum-exps,
# not [T, T] probabilities; fixed segments), and says so; it is for dry runs only.
"$ferry" train --model gpt2-tiny --batch 4 --seq 64 --steps 1 --device meta --dry-run-of cuda --summary "$work/dry_cuda.json" > /dev/null
/usr/bin/python3 - "$work/dry.json" "$work/dry_cuda.json" <<'PY'
import json, sys
cpu, cuda = (json.load(open(path)) for path in sys.argv[1:3])
assert cpu["run"]["kernels"] == "cpu" and cuda["run"]["kernels"] == "cuda", (cpu["run"]["kernels"], cuda["run"]["kernels"])
assert cuda["memory"]["at_peak"]["activations"] < cpu["memory"]["at_peak"]["activations"], "cuda's attention keeps less than the cpu's"
assert cuda["memory"]["peak_reserved"] % (2 << 20) == 0, "cuda's fixed segments are whole 2 MiB pages"
PY
expect_error "--dry-run-of cuda is for a dry run: add --device meta" "$ferry" train --model gpt2-tiny --steps 1 --dry-run-of cuda
expect_error "--dry-run-of 'tpu': a dry run predicts cpu or cuda" "$ferry" train --model gpt2-tiny --steps 1 --device meta --dry-run-of tpu
echo "memory tests passed"
