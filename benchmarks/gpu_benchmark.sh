#!/usr/bin/env bash
# The GPU benchmark of issue 6, ferry beside PyTorch eager on the same GPU in the same run:
#   1. gpt2 (124M) and gpt2-medium (350M) training at batch 8 and 16, sequence 1024, bf16: tokens/s, MFU
#      (model FLOPs over the GPU's dense bf16 peak) and peak memory (allocated, reserved); ferry with
#      --device cuda --precision bf16, PyTorch with autocast bf16 and F.scaled_dot_product_attention.
#   2. The largest GPT (presets, ascending) that trains on this one GPU: ferry with --offload-optimizer cpu
#      and nvme (full recompute, batch 1), PyTorch with its checkpointing (autocast bf16, AdamW on the GPU).
# Prints a table per part; record it in docs/benchmarks.md with the machine.
#   [PARTS="..."] benchmarks/gpu_benchmark.sh [FERRY] [STEPS] [NVME_DIR] [PEAK_TFLOPS]
# PARTS (default all): any of throughput, offload-cpu, offload-nvme, pytorch-largest, so that each fits
# one call of the device tool (10 minutes).
# PEAK_TFLOPS: the GPU's dense bf16 peak (default: 989 for H100 SXM / H200, 756 for H100 PCIe, from nvidia-smi).
set -euo pipefail
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
parts=${PARTS:-throughput offload-cpu offload-nvme pytorch-largest}
for part in $parts; do
  case "$part" in
    throughput | offload-cpu | offload-nvme | pytorch-largest) ;;
    *) echo "gpu_benchmark.sh: unknown part '$part' in PARTS; the parts: throughput offload-cpu offload-nvme pytorch-largest" >&2; exit 2 ;;
  esac
done
wanted() { [[ " $parts " == *" $1 "* ]]; }
if [ "$peak" = 0 ]; then
  echo "gpu_benchmark.sh: unknown GPU '$gpu': pass its dense bf16 peak in TFLOPS as the 4th argument" >&2
  exit 2
fi
work=$(mktemp -d)
trap 'rm -rf "$work" "$nvme_dir"' EXIT
echo "GPU: $gpu (dense bf16 peak $peak TFLOPS); $(python3 -c 'import torch; print("torch", torch.__version__)')"

# A random-token shard for vocab 50257 (throughput does not depend on the text).
python3 "$root/benchmarks/random_token_shard.py" "$work/tokens.bin" $((1 << 22))

# compare NAME FERRY_JSON TORCH_JSON: one table row pair and the ratios against the issue's goals.
compare() {
  python3 - "$1" "$2" "$3" "$peak" <<'PY'
import json, sys
name, ferry_path, torch_path, peak = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4]) * 1e12
f, t = json.load(open(ferry_path)), json.load(open(torch_path))
m = f["model"]
L, C, T, N = m["layers"], m["hidden"], f["run"]["seq"], m["parameters"]
flops_per_token = 6 * N + 12 * L * C * T  # PaLM's model FLOPs (no recompute counted)
gib = lambda b: b / 2**30
def row(system, tps, allocated, reserved):
    mfu = tps * flops_per_token / peak
    print(f"  {system:8s} {tps:10.0f} tok/s  MFU {100 * mfu:5.1f}%  peak allocated {gib(allocated):6.2f} GiB  reserved {gib(reserved):6.2f} GiB")
    return mfu
print(f"{name}: {N:,} parameters, batch {f['run']['micro_batch']} x seq {T}")
fm = row("ferry", f["tokens_per_second"], f["memory"]["peak_allocated"], f["memory"]["peak_reserved"])
if not t.get("fits"):
    print(f"  pytorch  out of memory: {t.get('error')}")
    sys.exit(0)
row("pytorch", t["tokens_per_second"], t["peak_allocated_bytes"], t["peak_reserved_bytes"])
speed = f["tokens_per_second"] / t["tokens_per_second"]
memory = f["memory"]["peak_allocated"] / t["peak_allocated_bytes"]
print(f"  ratio    {speed:.2f}x tokens/s (goal >= 1.10), {memory:.2f}x peak allocated (goal <= 0.80), "
      f"{f['memory']['peak_reserved'] / t['peak_reserved_bytes']:.2f}x reserved; ferry MFU {100 * fm:.1f}%")
PY
}

if wanted throughput; then
  echo
  echo "== 1. Throughput and memory (bf16, seq 1024, $steps steps, the first excluded)"
  for model in gpt2 gpt2-medium; do
    for batch in 8 16; do
      "$ferry" train --model "$model" --device cuda --precision bf16 --batch "$batch" --seq 1024 --steps "$steps" \
        --lr-schedule constant --data "$work/tokens.bin" --log-every 1000 --summary "$work/ferry.json" > "$work/ferry.log"
      case "$model" in
        gpt2) shape=(--layers 12 --hidden 768 --heads 12) ;;
        gpt2-medium) shape=(--layers 24 --hidden 1024 --heads 16) ;;
      esac
      python3 "$root/benchmarks/pytorch_train_step.py" "${shape[@]}" --vocab 50257 --seq 1024 --batch "$batch" --steps "$steps" \
        --device cuda --precision bf16 --attention sdpa > "$work/torch.json"
      compare "$model" "$work/ferry.json" "$work/torch.json"
    done
  done
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
  "$ferry" train --model "$preset" --device cuda --precision bf16 --batch 1 --seq 1024 --steps 2 --checkpointing full \
    --offload-optimizer "$tier" --nvme-path "$nvme_dir" --data "$work/tokens.bin" --log-every 1000 --summary "$work/offload.json"
}
torch_plain() {  # torch_plain PRESET
  local shape
  case "$1" in
    gpt2-xl) shape=(--layers 48 --hidden 1600 --heads 25) ;;
    gpt3-2.7b) shape=(--layers 32 --hidden 2560 --heads 32) ;;
    gpt3-6.7b) shape=(--layers 32 --hidden 4096 --heads 32) ;;
    gpt3-13b) shape=(--layers 40 --hidden 5120 --heads 40) ;;
    gpt3-30b) shape=(--layers 48 --hidden 7168 --heads 56) ;;
  esac
  python3 "$root/benchmarks/pytorch_train_step.py" "${shape[@]}" --vocab 50257 --seq 1024 --batch 1 --steps 2 --device cuda \
    --precision bf16 --attention sdpa --checkpoint-blocks > "$work/torch_largest.json"
  python3 -c "import json,sys; sys.exit(0 if json.load(open(sys.argv[1]))['fits'] else 1)" "$work/torch_largest.json"
}
if wanted offload-cpu || wanted offload-nvme || wanted pytorch-largest; then
  echo
  echo "== 2. The largest GPT that trains on this GPU (batch 1, seq 1024, 2 steps)"
fi
if wanted offload-cpu; then largest "ferry --offload-optimizer cpu" ferry_offload cpu; fi
if wanted offload-nvme; then largest "ferry --offload-optimizer nvme" ferry_offload nvme; fi
if wanted pytorch-largest; then largest "pytorch (checkpointing, AdamW on the GPU)" torch_plain; fi
