#!/usr/bin/env bash
# ferry beside PyTorch on the same GPU in the same call (issue 32), one part per concern:
#   throughput  gpt2 and gpt2-medium training at sequence 1024, bf16 (CONFIGS: model:batch ...): tokens/s,
#               MFU against the GPU's dense bf16 peak, peak allocated and reserved; ferry --device cuda
#               beside PyTorch eager (autocast bf16, F.scaled_dot_product_attention)
#   compile     the first CONFIGS entry beside PyTorch with torch.compile (compiled in an untimed first step)
#   memory      each throughput run's peaks beside ferry's dry run of it (--device meta --dry-run-of cuda),
#               and the first entry again with expandable segments (ferry's virtual-memory source) beside its
#               dry run
#   offload     ZeRO-Offload (cpu, nvme) training gpt2-large in --device-memory 2300MiB (its 16 bytes per
#               parameter are 5.1x that), beside the run without offload; the cpu run beside its dry run
#   snapshot    PyTorch's own memory snapshot of gpt2 training (batch 8) read by `ferry report` and `ferry
#               replay` (peaks beside torch.cuda.memory_stats'), and the trace replayed through ferry's
#               allocator beside PyTorch's, with default settings and with expandable segments
#   offload-cpu offload-nvme pytorch-largest   the largest preset that trains (long: not in the default)
# Prints a table per part; record it in docs/benchmarks.md with the machine.
#   [PARTS="..."] [CONFIGS="..."] [RESULTS=DIR] [DEADLINE=epoch seconds] benchmarks/gpu_benchmark.sh [FERRY] [STEPS] [NVME_DIR] [PEAK_TFLOPS]
# RESULTS keeps every JSON and log (default: a temporary folder, removed). DEADLINE: a run that cannot
# finish before it is skipped or cut short, so the whole fits one call of the device tool.
# PEAK_TFLOPS: the GPU's dense bf16 peak (default: 989 for H100 SXM / H200, 756 for H100 PCIe, from nvidia-smi).
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
ferry=${1:-$root/build/ferry}
steps=${2:-6}
nvme_dir=${3:-${TMPDIR:-/tmp}/ferry_gpu_benchmark_nvme}
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
case "$gpu" in
  *H100*PCIe*) default_peak=756 ;;
  *H100*|*H200*) default_peak=989 ;;
  *) default_peak=0 ;;
esac
peak=${4:-$default_peak}
parts=${PARTS:-throughput memory offload snapshot compile}
configs=${CONFIGS:-gpt2:16 gpt2-medium:16 gpt2:32}
deadline=${DEADLINE:-$(($(date +%s) + 86400))}
all_parts="throughput compile memory offload snapshot offload-cpu offload-nvme pytorch-largest"
for part in $parts; do
  if [[ " $all_parts " != *" $part "* ]]; then
    echo "gpu_benchmark.sh: unknown part '$part' in PARTS; the parts: $all_parts" >&2
    exit 2
  fi
done
wanted() { [[ " $parts " == *" $1 "* ]]; }
if [ "$peak" = 0 ]; then
  echo "gpu_benchmark.sh: unknown GPU '$gpu': pass its dense bf16 peak in TFLOPS as the 4th argument" >&2
  exit 2
fi
if [ -n "${RESULTS:-}" ]; then
  work=$RESULTS
  mkdir -p "$work"
  trap 'rm -rf "$nvme_dir" "$work/tokens.bin"' EXIT
else
  work=$(mktemp -d)
  trap 'rm -rf "$work" "$nvme_dir"' EXIT
fi
echo "GPU: $gpu (dense bf16 peak $peak TFLOPS); $(python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)')"
status=0

# limited SECONDS LOG COMMAND...: runs COMMAND (output to LOG) for at most SECONDS and never past DEADLINE;
# returns 124 when cut short or skipped (said on stdout).
limited() {
  local seconds=$1 log=$2
  shift 2
  local left=$((deadline - $(date +%s) - 5))
  if [ "$left" -lt 20 ]; then
    echo "  skipped (deadline): $*" | tee "$log"
    return 124
  fi
  [ "$left" -lt "$seconds" ] && seconds=$left
  timeout --signal=TERM --kill-after=10 "$seconds" "$@" > "$log" 2>&1
  local rc=$?
  if [ "$rc" = 124 ]; then echo "  cut short after ${seconds}s: $*"; fi
  if [ "$rc" != 0 ]; then echo "  failed ($rc): $(basename "$log"): $(grep -iE 'error:|what\(\)' "$log" | tail -1 || tail -1 "$log")"; fi
  return "$rc"
}

shape_of() {
  case "$1" in
    gpt2) echo "--layers 12 --hidden 768 --heads 12" ;;
    gpt2-medium) echo "--layers 24 --hidden 1024 --heads 16" ;;
    gpt2-large) echo "--layers 36 --hidden 1280 --heads 20" ;;
    gpt2-xl) echo "--layers 48 --hidden 1600 --heads 25" ;;
    gpt3-2.7b) echo "--layers 32 --hidden 2560 --heads 32" ;;
    gpt3-6.7b) echo "--layers 32 --hidden 4096 --heads 32" ;;
    gpt3-13b) echo "--layers 40 --hidden 5120 --heads 40" ;;
    gpt3-30b) echo "--layers 48 --hidden 7168 --heads 56" ;;
  esac
}

# A random-token shard for vocab 50257 (throughput does not depend on the text).
python3 "$root/benchmarks/random_token_shard.py" "$work/tokens.bin" $((1 << 22))
ferry_train() {  # ferry_train NAME SECONDS MODEL BATCH FLAGS...: ferry's run, summary in $work/NAME.json
  local name=$1 seconds=$2 model=$3 batch=$4
  shift 4
  limited "$seconds" "$work/$name.log" "$ferry" train --model "$model" --precision bf16 --batch "$batch" --seq 1024 \
    --lr-schedule constant --data "$work/tokens.bin" --log-every 1000 --summary "$work/$name.json" "$@"
}
torch_train() {  # torch_train NAME SECONDS MODEL BATCH FLAGS...: PyTorch's run, its JSON line in $work/NAME.json
  local name=$1 seconds=$2 model=$3 batch=$4
  shift 4
  # shellcheck disable=SC2046
  limited "$seconds" "$work/$name.log" python3 "$root/benchmarks/pytorch_train_step.py" $(shape_of "$model") --vocab 50257 --seq 1024 \
    --batch "$batch" --device cuda --precision bf16 --attention sdpa "$@" && tail -1 "$work/$name.log" > "$work/$name.json"
}

# compare NAME FERRY_JSON TORCH_JSON LABEL: one table row pair and the ratios against the issue's goals.
compare() {
  python3 - "$1" "$2" "$3" "$peak" "$4" <<'PY'
import json, os, sys
name, ferry_path, torch_path, peak, label = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4]) * 1e12, sys.argv[5]
if not os.path.exists(ferry_path):
    sys.exit(f"{name}: ferry did not finish (see its log)")
f = json.load(open(ferry_path))
m = f["model"]
L, C, T, N = m["layers"], m["hidden"], f["run"]["seq"], m["parameters"]
flops_per_token = 6 * N + 12 * L * C * T  # PaLM's model FLOPs (no recompute counted)
gib = lambda b: b / 2**30
def row(system, tps, allocated, reserved):
    mfu = tps * flops_per_token / peak
    print(f"  {system:16s} {tps:10.0f} tok/s  MFU {100 * mfu:5.1f}%  peak allocated {gib(allocated):6.2f} GiB  reserved {gib(reserved):6.2f} GiB")
    return mfu
print(f"{name}: {N:,} parameters, batch {f['run']['micro_batch']} x seq {T}, losses ferry {f['steps'][0]['loss']:.3f} -> {f['final_loss']:.3f}")
fm = row("ferry", f["tokens_per_second"], f["memory"]["peak_allocated"], f["memory"]["peak_reserved"])
if not os.path.exists(torch_path):
    print(f"  {label:16s} did not finish (see its log)")
    sys.exit(0)
t = json.load(open(torch_path))
if not t.get("fits"):
    print(f"  {label:16s} out of memory: {t.get('error')}")
    sys.exit(0)
row(label, t["tokens_per_second"], t["peak_allocated_bytes"], t["peak_reserved_bytes"])
speed = f["tokens_per_second"] / t["tokens_per_second"]
print(f"  ratio            {speed:.2f}x tokens/s (goal >= 1.10 eager, >= 1.00 compiled), "
      f"{f['memory']['peak_reserved'] / t['peak_reserved_bytes']:.2f}x peak reserved (goal <= 0.90), "
      f"{f['memory']['peak_allocated'] / t['peak_allocated_bytes']:.2f}x allocated; ferry MFU {100 * fm:.1f}% (goal >= 40%)"
      + (f"; torch.compile took {t['compile_seconds']:.0f} s" if t.get("compile_seconds") else ""))
PY
}

if wanted throughput; then
  echo
  echo "== 1. Throughput and memory (bf16, seq 1024, $steps steps, the first excluded)"
  for config in $configs; do
    model=${config%%:*} batch=${config##*:}
    ferry_train "ferry_${model}_b$batch" 150 "$model" "$batch" --device cuda --steps "$steps" || status=1
    torch_train "torch_${model}_b$batch" 120 "$model" "$batch" --steps "$steps" || status=1
    compare "$model" "$work/ferry_${model}_b$batch.json" "$work/torch_${model}_b$batch.json" "pytorch eager" || status=1
  done
fi

# same_peaks LABEL MEASURED_JSON PREDICTED_JSON: the run's peaks beside its dry run's, byte for byte.
same_peaks() {
  python3 - "$@" <<'PY'
import json, os, sys
label, measured_path, predicted_path = sys.argv[1:4]
if not (os.path.exists(measured_path) and os.path.exists(predicted_path)):
    sys.exit(f"  {label}: a run did not finish (see its log)")
m, p = json.load(open(measured_path))["memory"], json.load(open(predicted_path))["memory"]
ok = True
for key in ("peak_allocated", "peak_reserved"):
    same = m[key] == p[key]
    ok &= same
    print(f"  {label:34s} {key:15s} measured {m[key]:>13,}  dry run {p[key]:>13,}  {'exact' if same else f'differs by {m[key] - p[key]:+,}'}")
if not ok:
    for category in sorted(set(m["at_peak"]) | set(p["at_peak"])):
        a, b = m["at_peak"].get(category, 0), p["at_peak"].get(category, 0)
        if a != b:
            print(f"    at the peak, {category}: measured {a:,} dry run {b:,}")
sys.exit(0 if ok else 1)
PY
}

if wanted memory; then
  echo
  echo "== 3a. The dry run on meta (--dry-run-of cuda) beside the GPU's peaks"
  for config in $configs; do
    model=${config%%:*} batch=${config##*:}
    [ -f "$work/ferry_${model}_b$batch.json" ] || continue
    ferry_train "meta_${model}_b$batch" 60 "$model" "$batch" --device meta --dry-run-of cuda --steps 2 || status=1
    same_peaks "$model batch $batch" "$work/ferry_${model}_b$batch.json" "$work/meta_${model}_b$batch.json" || status=1
  done
  first=${configs%% *}
  model=${first%%:*} batch=${first##*:}
  export FERRY_ALLOC_CONF=expandable_segments:True
  ferry_train "ferry_expandable" 120 "$model" "$batch" --device cuda --steps 3 || status=1
  ferry_train "meta_expandable" 60 "$model" "$batch" --device meta --dry-run-of cuda --steps 2 || status=1
  unset FERRY_ALLOC_CONF
  same_peaks "$model batch $batch, expandable segments" "$work/ferry_expandable.json" "$work/meta_expandable.json" || status=1
fi

if wanted offload; then
  echo
  echo "== 3b. ZeRO-Offload: gpt2-large (774M parameters: 16 bytes each are 5.1x --device-memory 2300MiB), batch 1, full recompute;"
  echo "   ZeRO-Infinity (stage 3, parameters offloaded too) in 700MiB: 17.6x"
  offload_flags=(--checkpointing full --steps 3)
  ferry_train offload_none 120 gpt2-large 1 --device cuda "${offload_flags[@]}" || status=1
  ferry_train offload_cpu 150 gpt2-large 1 --device cuda --device-memory 2300MiB --offload-optimizer cpu "${offload_flags[@]}" || status=1
  ferry_train offload_cpu_meta 60 gpt2-large 1 --device meta --dry-run-of cuda --offload-optimizer cpu "${offload_flags[@]}" || status=1
  mkdir -p "$nvme_dir"
  ferry_train offload_nvme 120 gpt2-large 1 --device cuda --device-memory 2300MiB --offload-optimizer nvme --nvme-path "$nvme_dir" \
    --checkpointing full --steps 2 || status=1
  # ZeRO-Infinity (issue 30): the parameters too live on the host or on NVMe, fetched a layer at a time.
  infinity_flags=(--zero-stage 3 --device-memory 700MiB --checkpointing full)
  ferry_train infinity_cpu 150 gpt2-large 1 --device cuda "${infinity_flags[@]}" --offload-param cpu --offload-optimizer cpu --steps 3 || status=1
  ferry_train infinity_cpu_meta 60 gpt2-large 1 --device meta --dry-run-of cuda "${infinity_flags[@]}" --offload-param cpu --offload-optimizer cpu \
    --steps 3 || status=1
  ferry_train infinity_nvme 150 gpt2-large 1 --device cuda "${infinity_flags[@]}" --offload-param nvme --offload-optimizer nvme \
    --nvme-path "$nvme_dir" --steps 2 || status=1
  python3 - "$work" <<'PY' || status=1
import json, os, statistics, sys
work = sys.argv[1]
budget = 2300 * 2**20
for name in ("offload_none", "offload_cpu", "offload_nvme", "infinity_cpu", "infinity_nvme"):
    path = os.path.join(work, name + ".json")
    if not os.path.exists(path):
        print(f"  {name:13s} did not finish (see {name}.log)")
        continue
    s = json.load(open(path))
    seconds = statistics.median(step["seconds"] for step in s["steps"][1:]) if len(s["steps"]) > 1 else s["steps"][0]["seconds"]
    m = s["memory"]
    print(f"  {name:13s} step {seconds:6.2f} s  peak allocated {m['peak_allocated'] / 2**30:5.2f} GiB  reserved {m['peak_reserved'] / 2**30:5.2f} GiB"
          f"  pinned host {m.get('host_pinned_peak', 0) / 2**30:5.2f} GiB  resident {m.get('host_peak_resident', 0) / 2**30:5.2f} GiB"
          f"  nvme {m.get('nvme_bytes', 0) / 2**30:5.2f} GiB"
          f"  losses {s['steps'][0]['loss']:.3f} -> {s['final_loss']:.3f}"
          + (f"  (16 bytes x {s['model']['parameters']:,} = {16 * s['model']['parameters'] / (700 * 2**20 if name.startswith('infinity') else budget):.2f}x the limit)"
             if name != "offload_none" else ""))
PY
  same_peaks "gpt2-large offloaded to cpu" "$work/offload_cpu.json" "$work/offload_cpu_meta.json" || status=1
  same_peaks "gpt2-large, ZeRO-Infinity to cpu" "$work/infinity_cpu.json" "$work/infinity_cpu_meta.json" || status=1
fi

if wanted snapshot; then
  echo
  echo "== 4/5. PyTorch's memory snapshot of gpt2 training (batch 8, 3 steps) read by ferry; its trace through both allocators"
  torch_train torch_snapshot 120 gpt2 8 --steps 3 --memory-snapshot "$work/torch_snapshot.pickle" || status=1
  export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True
  torch_train torch_expandable 120 gpt2 8 --steps 3 || status=1
  unset PYTORCH_CUDA_ALLOC_CONF
  if [ -f "$work/torch_snapshot.pickle" ]; then
    limited 120 "$work/report_snapshot.log" "$ferry" report "$work/torch_snapshot.pickle" --output "$work/snapshot_report" \
      --summary "$work/report_snapshot.json" || status=1
    limited 120 "$work/replay_default.log" "$ferry" replay "$work/torch_snapshot.pickle" --alloc-conf expandable_segments:False \
      --summary "$work/replay_default.json" || status=1
    limited 120 "$work/replay_expandable.log" "$ferry" replay "$work/torch_snapshot.pickle" --alloc-conf expandable_segments:True \
      --summary "$work/replay_expandable.json" || status=1
    # The same trace on the GPU's memory: ferry's allocator (cudaMalloc segments, or virtual memory) beside
    # PyTorch's replaying it (benchmarks/torch_replay_snapshot.py), each setting in its own process.
    for setting in False True; do
      limited 120 "$work/replay_cuda_$setting.log" "$ferry" replay "$work/torch_snapshot.pickle" --device cuda \
        --alloc-conf "expandable_segments:$setting" --summary "$work/replay_cuda_$setting.json" || status=1
      limited 120 "$work/torch_replay_$setting.log" env "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:$setting" \
        python3 "$root/benchmarks/torch_replay_snapshot.py" "$work/torch_snapshot.pickle" &&
        tail -1 "$work/torch_replay_$setting.log" > "$work/torch_replay_$setting.json" || status=1
    done
    rm -rf "$work/snapshot_report"
  fi
  python3 - "$work" <<'PY' || status=1
import json, os, sys
work = sys.argv[1]
load = lambda name: json.load(open(os.path.join(work, name))) if os.path.exists(os.path.join(work, name)) else None
torch_run, expandable, report = load("torch_snapshot.json"), load("torch_expandable.json"), load("report_snapshot.json")
replay_default, replay_expandable = load("replay_default.json"), load("replay_expandable.json")
if not torch_run or not report:
    sys.exit("  the snapshot or its report is missing (see torch_snapshot.log, report_snapshot.log)")
stats = torch_run["memory_stats"]
ok = True
for label, value, stat in (("ferry report peak requested", report["peak_requested"], "requested_bytes"),
                           ("ferry report peak reserved", report["peak_reserved"], "reserved_bytes"),
                           ("ferry replay peak allocated", (replay_default or {}).get("peak_allocated", -1), "allocated_bytes"),
                           ("ferry replay peak reserved", (replay_default or {}).get("peak_reserved", -1), "reserved_bytes")):
    same = value == stats[stat]
    ok &= same
    print(f"  {label:28s} {value:>15,}  torch.cuda.memory_stats {stat}.all.peak {stats[stat]:>15,}  "
          + ("equal" if same else f"differs by {value - stats[stat]:+,} ({(value - stats[stat]) / stats[stat]:+.3%})"))
print(f"  snapshot events read: {report['events']:,}")
gib = lambda b: b / 2**30
def line(label, live, reserved):
    print(f"  {label:38s} live peak {gib(live):6.2f} GiB  reserved peak {gib(reserved):6.2f} GiB  ({reserved / live:.3f}x)")
line("pytorch, default (this run)", torch_run["peak_allocated_bytes"], torch_run["peak_reserved_bytes"])
if replay_default:
    line("ferry replay, fixed segments", replay_default["peak_allocated"], replay_default["peak_reserved"])
if expandable and expandable.get("fits"):
    line("pytorch, expandable_segments:True", expandable["peak_allocated_bytes"], expandable["peak_reserved_bytes"])
if replay_expandable:
    line("ferry replay, expandable segments", replay_expandable["peak_allocated"], replay_expandable["peak_reserved"])
print("  the trace replayed on the GPU's memory:")
for setting, label in (("False", "fixed segments"), ("True", "expandable segments")):
    for name, system in ((f"replay_cuda_{setting}.json", "ferry"), (f"torch_replay_{setting}.json", "pytorch")):
        result = load(name)
        if result:
            line(f"{system} replay on the GPU, {label}", result["peak_allocated"], result["peak_reserved"])
        else:
            print(f"  {system} replay on the GPU, {label}: did not finish (see {name.replace('.json', '.log')})")
sys.exit(0 if ok else 1)
PY
fi

if wanted compile; then
  echo
  echo "== 2b. Beside torch.compile (compiled in the untimed first step)"
  first=${configs%% *}
  model=${first%%:*} batch=${first##*:}
  torch_train "torch_compiled_${model}_b$batch" 300 "$model" "$batch" --steps "$steps" --compile || status=1
  compare "$model" "$work/ferry_${model}_b$batch.json" "$work/torch_compiled_${model}_b$batch.json" "torch.compile" || status=1
fi

presets=(gpt2-xl gpt3-2.7b gpt3-6.7b gpt3-13b gpt3-30b)
largest() {  # largest LABEL COMMAND...: the last preset whose run succeeds (ascending; stops at the first failure)
  local label=$1 fits=none preset
  shift
  for preset in "${presets[@]}"; do
    if "$@" "$preset" > "$work/largest.log" 2>&1; then
      fits=$preset
    else
      echo "  $label: $preset does not train: $(grep -m1 -iE 'error|out of memory|fits' "$work/largest.log" || tail -1 "$work/largest.log")"
      break
    fi
  done
  echo "  $label: largest that trains: $fits"
}
ferry_offload() {  # ferry_offload TIER PRESET
  local tier=$1 preset=$2
  mkdir -p "$nvme_dir"
  ferry_train "largest_$tier" 600 "$preset" 1 --device cuda --steps 2 --checkpointing full --offload-optimizer "$tier" --nvme-path "$nvme_dir"
}
torch_plain() {  # torch_plain PRESET
  torch_train torch_largest 600 "$1" 1 --steps 2 --checkpoint-blocks &&
    python3 -c "import json,sys; sys.exit(0 if json.load(open(sys.argv[1]))['fits'] else 1)" "$work/torch_largest.json"
}
if wanted offload-cpu || wanted offload-nvme || wanted pytorch-largest; then
  echo
  echo "== The largest GPT that trains on this GPU (batch 1, seq 1024, 2 steps)"
fi
if wanted offload-cpu; then largest "ferry --offload-optimizer cpu" ferry_offload cpu; fi
if wanted offload-nvme; then largest "ferry --offload-optimizer nvme" ferry_offload nvme; fi
if wanted pytorch-largest; then largest "pytorch (checkpointing, AdamW on the GPU)" torch_plain; fi
exit "$status"
