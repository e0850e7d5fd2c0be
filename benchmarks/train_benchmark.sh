#!/usr/bin/env bash
# Training-step throughput and memory: ferry's cpu device beside PyTorch CPU (Debian's python3-torch,
# or TORCH_PYTHON: a Python with a current torch, e.g. a venv from PyPI) on the same GPT-2 shape, batch,
# sequence and thread count, in the same run. Prints one line per system and the ratios; record the
# output in docs/benchmarks.md.
#   [TORCH_PYTHON=/path/to/python] benchmarks/train_benchmark.sh [FERRY] [THREADS] [STEPS]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
ferry=${1:-$root/build/ferry}
threads=${2:-$(nproc)}
steps=${3:-4}
torch_python=${TORCH_PYTHON:-/usr/bin/python3}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# A random-token shard for vocab 50257 (throughput does not depend on the text).
/usr/bin/python3 "$root/benchmarks/random_token_shard.py" "$work/tokens.bin"

bench() {  # bench NAME LAYERS HIDDEN HEADS VOCAB SEQ BATCH DATA
  local name=$1 layers=$2 hidden=$3 heads=$4 vocab=$5 seq=$6 batch=$7 data=$8
  /usr/bin/time -f "%M" -o "$work/ferry_rss.txt" "$ferry" train --layers "$layers" --hidden "$hidden" --heads "$heads" \
    --vocab "$vocab" --seq "$seq" --batch "$batch" --steps "$steps" --threads "$threads" --lr-schedule constant \
    ${data:+--data "$data"} --log-every 1000 --summary "$work/ferry.json" > "$work/ferry.log"
  # PyTorch gets the same OpenBLAS kernel family ferry ran with (ferry corrects OpenBLAS's fallback
  # to pre-AVX2 kernels on CPUs it does not recognise; torch would otherwise run the slow ones).
  OPENBLAS_CORETYPE=$(/usr/bin/python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['run']['blas_kernels'])" "$work/ferry.json") \
  "$torch_python" "$root/benchmarks/pytorch_train_step.py" --layers "$layers" --hidden "$hidden" --heads "$heads" \
    --vocab "$vocab" --seq "$seq" --batch "$batch" --steps "$steps" --threads "$threads" > "$work/torch.json"
  /usr/bin/python3 - "$name" "$work/ferry.json" "$work/torch.json" "$work/ferry_rss.txt" "$threads" <<'PY'
import json, sys
name, ferry_path, torch_path, rss_path, threads = sys.argv[1:]
f = json.load(open(ferry_path)); t = json.load(open(torch_path))
ferry_rss = int(open(rss_path).read().split()[-1]) * 1024
mib = lambda b: b / 2**20
at_peak = ", ".join(f"{k} {mib(v):.1f}" for k, v in f["memory"]["at_peak"].items() if v)
print(f"{name} (batch {f['run']['micro_batch']} x seq {f['run']['seq']}, {threads} threads, {f['model']['parameters']:,} parameters,"
      f" OpenBLAS {f['run']['blas_kernels']} kernels for both)")
print(f"  ferry    {f['tokens_per_second']:9.0f} tok/s  peak device {mib(f['memory']['peak_allocated']):8.1f} MiB"
      f" (at peak: {at_peak}); process max RSS {mib(ferry_rss):.1f} MiB")
print(f"  pytorch  {t['tokens_per_second']:9.0f} tok/s  peak RSS growth {mib(t['peak_rss_growth_bytes']):8.1f} MiB"
      f" (torch {t['torch_version']}, {t['threads']} threads)")
print(f"  ratio    {f['tokens_per_second'] / t['tokens_per_second']:.2f}x tokens/s; ferry peak device / torch RSS growth"
      f" {f['memory']['peak_allocated'] / t['peak_rss_growth_bytes']:.2f}")
PY
}

bench gpt2-tiny 4 128 4 256 128 8 ""
bench "gpt2 (124M)" 12 768 12 50257 256 4 "$work/tokens.bin"
