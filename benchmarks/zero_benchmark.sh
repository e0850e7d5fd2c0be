#!/usr/bin/env bash
# ZeRO's memory per rank: `ferry bench memory --dp 8 --zero-stage 0,1,2` (every rank's whole step by dry
# runs on meta) for gpt2-xl and gpt3-13b in bf16, at ferry's default buckets (following the model), at
# DeepSpeed's default (5e8) and at 5e7, with and without optimizer offload, beside DeepSpeed's own estimator run in the same job (PEERS_PYTHON: a
# Python with deepspeed, e.g. a venv from PyPI). Record the output in docs/benchmarks.md.
#   [PEERS_PYTHON=/path/to/python] benchmarks/zero_benchmark.sh [FERRY]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
ferry=${1:-$root/build/ferry}
python=${PEERS_PYTHON:-}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
for model in gpt2-xl gpt3-13b; do
  "$ferry" bench memory --model "$model" --precision bf16 --batch 1 --seq 1024 --dp 8 --zero-stage 0,1,2 --checkpointing full \
    --output "$work/$model-default" | sed -n '1,6p'
  echo
  for bucket in 500000000 50000000; do
    "$ferry" bench memory --model "$model" --precision bf16 --batch 1 --seq 1024 --dp 8 --zero-stage 0,1,2 --checkpointing full \
      --reduce-bucket-size "$bucket" --allgather-bucket-size "$bucket" --output "$work/$model-$bucket" | sed -n '1,6p'
    echo
  done
  "$ferry" bench memory --model "$model" --precision bf16 --batch 1 --seq 1024 --dp 8 --zero-stage 1,2 --checkpointing full \
    --reduce-bucket-size 50000000 --allgather-bucket-size 50000000 --offload-optimizer cpu --output "$work/$model-offload" | sed -n '1,5p'
  echo
  if [[ -n $python ]]; then
    parameters=$(/usr/bin/python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['model']['parameters'])" "$work/$model-50000000/zero.json")
    echo "  DeepSpeed $("$python" -c 'import deepspeed; print(deepspeed.__version__)' 2> /dev/null | tail -1) estimate_zero2_model_states_mem_needs, $model, 8 GPUs:"
    "$python" "$root/benchmarks/deepspeed_zero_estimates.py" "$parameters" 8 2> /dev/null | tail -1 |
      /usr/bin/python3 -c "import json,sys; r=json.load(sys.stdin); g=lambda b: f'{b/2**30:.2f} GiB'; print('    GPU', g(r['device']['gpu_bytes']), '(no offload),', g(r['offload']['gpu_bytes']), '(offload); CPU', g(r['offload']['cpu_bytes']), '(offload)')"
    echo
  fi
done
