#!/usr/bin/env bash
# What the LM head's chunk costs on a GPU (an experiment, not a benchmark): ferry's gpt2 bf16 run at several
# --loss-chunk values, tokens/s and peak reserved side by side. Each chunk re-reads and re-writes the f32
# table gradient ([vocab, hidden]) once, so short chunks make that product bandwidth-bound.
#   bash dev/gpu_loss_chunk_sweep.sh [MODEL] [BATCH] [CHUNK...]   # on the GPU machine, build-gpu/bundle.tar.xz carried
set -uo pipefail
cd "$(dirname "$0")/.."
model=${1:-gpt2}
batch=${2:-16}
shift 2 2> /dev/null
chunks=("$@")
[ ${#chunks[@]} = 0 ] && chunks=(0 336 672 1344 2688)
# shellcheck source=dev/gpu_bundle_env.sh
source dev/gpu_bundle_env.sh
python3 benchmarks/random_token_shard.py "$work/tokens.bin" $((1 << 22))
for chunk in "${chunks[@]}"; do
  timeout 90 "$bundle/bin/ferry" train --model "$model" --device cuda --precision bf16 --batch "$batch" --seq 1024 --lr-schedule constant \
    --data "$work/tokens.bin" --log-every 1000 --steps 6 --loss-chunk "$chunk" --summary "$out/loss_chunk_$chunk.json" \
    > "$out/loss_chunk_$chunk.log" 2>&1 || echo "loss chunk $chunk: exit $? ($(tail -1 "$out/loss_chunk_$chunk.log"))"
  python3 - "$out/loss_chunk_$chunk.json" "$chunk" <<'PY' || true
import json, sys
s = json.load(open(sys.argv[1]))
print(f"loss chunk {sys.argv[2]:>5s}: {s['tokens_per_second']:9.0f} tok/s  peak allocated {s['memory']['peak_allocated']:>14,}"
      f"  reserved {s['memory']['peak_reserved']:>14,}")
PY
done
