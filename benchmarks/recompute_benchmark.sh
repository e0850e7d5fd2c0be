#!/usr/bin/env bash
# Activation recompute, measured for real on the cpu device: ferry's none / selective / full beside
# PyTorch without and with torch.utils.checkpoint around every block, same GPT-2 shape, batch,
# sequence and threads, in the same run. Also checks that ferry's meta dry run predicted each measured
# peak exactly. Record the output in docs/benchmarks.md.
#   benchmarks/recompute_benchmark.sh [FERRY] [THREADS] [BATCH] [SEQ] [STEPS]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
ferry=${1:-$root/build/ferry}
threads=${2:-$(nproc)}
batch=${3:-4}
seq=${4:-512}
steps=${5:-2}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
shape=(--layers 12 --hidden 768 --heads 12 --vocab 50257)

for policy in none selective full; do
  for device in cpu meta; do
    "$ferry" train "${shape[@]}" --seq "$seq" --batch "$batch" --steps "$steps" --threads "$threads" --lr-schedule constant \
      --checkpointing "$policy" --device "$device" --log-every 1000 --summary "$work/ferry_${policy}_$device.json" > /dev/null
  done
done
blas=$(/usr/bin/python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['run']['blas_kernels'])" "$work/ferry_none_cpu.json")
for mode in none checkpoint; do
  flags=()
  [[ $mode == checkpoint ]] && flags=(--checkpoint-blocks)
  OPENBLAS_CORETYPE=$blas /usr/bin/python3 "$root/benchmarks/pytorch_train_step.py" --layers 12 --hidden 768 --heads 12 --vocab 50257 \
    --seq "$seq" --batch "$batch" --steps "$steps" --threads "$threads" "${flags[@]}" \
    > "$work/torch_$mode.json"
done
/usr/bin/python3 - "$work" "$batch" "$seq" "$threads" <<'PY'
import json, sys
work, batch, seq, threads = sys.argv[1:]
mib = lambda b: b / 2**20
load = lambda name: json.load(open(f"{work}/{name}.json"))
print(f"gpt2 (124M), batch {batch} x seq {seq}, {threads} threads, fp32, cpu device")
print(f"  {'system / policy':28} {'peak':>11} {'activations':>12} {'tok/s':>8}   meta dry run == measured")
base = load("ferry_none_cpu")
for policy in ["none", "selective", "full"]:
    f, m = load(f"ferry_{policy}_cpu"), load(f"ferry_{policy}_meta")
    same = all(f["memory"][k] == m["memory"][k] for k in ["peak_allocated", "peak_reserved", "at_peak"])
    act = f["memory"]["max_by_category"]["activations"]
    print(f"  ferry {policy:22} {mib(f['memory']['peak_allocated']):8.1f} MiB {mib(act):8.1f} MiB {f['tokens_per_second']:8.1f}   {same}")
    assert same, policy
for mode in ["none", "checkpoint"]:
    t = load(f"torch_{mode}")
    print(f"  pytorch {mode:20} {mib(t['peak_rss_growth_bytes']):8.1f} MiB {'':>12} {t['tokens_per_second']:8.1f}   (peak RSS growth)")
f_full, t_ckpt = load("ferry_full_cpu"), load("torch_checkpoint")
f_none, t_none = load("ferry_none_cpu"), load("torch_none")
print(f"  full recompute: ferry peak / PyTorch checkpoint peak {f_full['memory']['peak_allocated'] / t_ckpt['peak_rss_growth_bytes']:.2f};"
      f" ferry none / PyTorch none {f_none['memory']['peak_allocated'] / t_none['peak_rss_growth_bytes']:.2f}")
print(f"  recompute cost: ferry full {f_full['tokens_per_second'] / f_none['tokens_per_second']:.2f}x of none's tok/s,"
      f" PyTorch checkpoint {t_ckpt['tokens_per_second'] / t_none['tokens_per_second']:.2f}x")
PY
