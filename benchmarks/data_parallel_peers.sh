#!/usr/bin/env bash
# Data parallelism beside PyTorch's, on this machine's cpu ranks (issues 28, 30): ferry's ZeRO stages 0-3
# against PyTorch's real peers, one rank per process, 1 thread per rank, the same GPT, the same micro-batch
# per rank and so the same global batch (world x 4 sequences, no accumulation):
#   ZeRO 0  ferry --zero-stage 0   PyTorch DistributedDataParallel
#   ZeRO 1  ferry --zero-stage 1   PyTorch DDP + ZeroRedundancyOptimizer(AdamW)
#   ZeRO 2  ferry --zero-stage 2   PyTorch FSDP2 fully_shard(reshard_after_forward=False)
#   ZeRO 3  ferry --zero-stage 3   PyTorch FSDP2 fully_shard(reshard_after_forward=True)
# at world sizes 1 (one process, no launcher; PyTorch unwrapped), 2 and 4 (ferry under mpirun, PyTorch
# under torchrun with gloo; 4 ranks on fewer cores are oversubscribed, and the table says so).
#
# Measured, both systems alike: tokens/s = world x batch x seq over the median step time, the first step
# excluded (ferry: its summary's steps[].seconds; PyTorch: rank 0's time between barriers, see
# benchmarks/data_parallel_peers.py). Memory per rank:
#   ferry RSS growth  each rank runs under GNU time (/usr/bin/time -f %M: the rank's peak RSS) and the
#                     growth is that peak minus the peak RSS of the same rank in a run that builds next to
#                     nothing (1 block of width 8, seq 8, batch 1, 1 step) under the same launcher, world
#                     and stage: binary, libraries, MPI and the embedded corpus cancel out.
#   ferry allocator   the summary's ranks[].peak_allocated (ferry's own accounting of live bytes).
#   PyTorch RSS growth  VmHWM at the end minus VmRSS just before the model is built (after the process
#                     group and the lazily imported modules, torch._dynamo's ~160 MiB, exist).
# Ranges are min–max over ranks. Prints one table; record it in docs/benchmarks.md with the machine.
#
#   [PEERS_PYTHON=/work/venv-torch/bin/python] benchmarks/data_parallel_peers.sh [FERRY] [STEPS]
# PEERS_PYTHON: a Python with torch >= 2.6 from PyPI (FSDP2). The shape can be overridden for a quick check:
#   PEERS_LAYERS=2 PEERS_HIDDEN=64 PEERS_HEADS=4 PEERS_VOCAB=256 PEERS_SEQ=32 benchmarks/data_parallel_peers.sh build/ferry 3
# and PEERS_BATCH (4), PEERS_THREADS (1), PEERS_WORLDS ("1 2 4"; must start with 1, the scaling baseline).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
ferry=${1:-$root/build/ferry}
steps=${2:-10}
python=${PEERS_PYTHON:-/work/venv-torch/bin/python}
layers=${PEERS_LAYERS:-4}
hidden=${PEERS_HIDDEN:-512}
heads=${PEERS_HEADS:-8}
vocab=${PEERS_VOCAB:-8192}
seq=${PEERS_SEQ:-256}
batch=${PEERS_BATCH:-4}
threads=${PEERS_THREADS:-1}
worlds=${PEERS_WORLDS:-1 2 4}
[[ $worlds == 1* ]] || { echo "PEERS_WORLDS must start with 1 (the scaling baseline)" >&2; exit 2; }
(( steps >= 2 )) || { echo "STEPS must be at least 2 (the first step is not timed)" >&2; exit 2; }
[[ -x $ferry ]] || { echo "no ferry binary at $ferry" >&2; exit 2; }
"$python" -c 'import torch.distributed.fsdp; torch.distributed.fsdp.fully_shard' 2> /dev/null ||
  { echo "$python has no torch with FSDP2 (torch >= 2.6): set PEERS_PYTHON" >&2; exit 2; }
[[ -x /usr/bin/time ]] || { echo "needs GNU time at /usr/bin/time (apt-get install time)" >&2; exit 2; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# One ferry rank under GNU time: its peak RSS in KiB goes to PREFIX.<rank> (Open MPI's rank, 0 alone).
cat > "$work/rss_rank.sh" <<'SH'
#!/bin/sh
prefix=$1
shift
exec /usr/bin/time -f %M -o "$prefix.${OMPI_COMM_WORLD_RANK:-${PMI_RANK:-0}}" "$@"
SH
chmod +x "$work/rss_rank.sh"

# run LOG COMMAND...: the command's output into LOG; on failure, LOG's tail and exit.
run() {
  local log=$1
  shift
  if ! "$@" > "$log" 2>&1; then
    echo "failed: $*" >&2
    tail -n 40 "$log" >&2
    exit 1
  fi
}

# ferry_run NAME WORLD STAGE FLAGS...: ferry train with FLAGS; summary NAME.json, rank RSS NAME.rss.<rank>.
ferry_run() {
  local name=$1 world=$2 stage=$3
  shift 3
  local launch=()
  if (( world > 1 )); then
    launch=(mpirun --allow-run-as-root --oversubscribe -np "$world")
  fi
  run "$work/$name.log" "${launch[@]}" "$work/rss_rank.sh" "$work/$name.rss" "$ferry" train --model gpt2 "$@" \
    --threads "$threads" --lr 1e-4 --lr-schedule constant --log-every 1000 --zero-stage "$stage" --summary "$work/$name.json"
}

# peer_run NAME WORLD MODE: the PyTorch peer's JSON line into NAME.json.
peer_run() {
  local name=$1 world=$2 mode=$3
  local launch=("$python")
  if (( world > 1 )); then
    launch=(env OMP_NUM_THREADS="$threads" "$python" -m torch.distributed.run --standalone --nproc-per-node "$world")
  fi
  run "$work/$name.log" "${launch[@]}" "$root/benchmarks/data_parallel_peers.py" --mode "$mode" --layers "$layers" \
    --hidden "$hidden" --heads "$heads" --vocab "$vocab" --seq "$seq" --positions "$positions" --batch "$batch" \
    --steps "$steps" --threads "$threads" --lr 1e-4
  grep '^{' "$work/$name.log" | tail -n 1 > "$work/$name.json"
}

positions=
for world in $worlds; do
  if (( world == 1 )); then stages=(0); else stages=(0 1 2 3); fi
  for stage in "${stages[@]}"; do
    ferry_run "base_${world}_$stage" "$world" "$stage" --layers 1 --hidden 8 --heads 1 --vocab "$vocab" --seq 8 --batch 1 --steps 1
    ferry_run "ferry_${world}_$stage" "$world" "$stage" --layers "$layers" --hidden "$hidden" --heads "$heads" \
      --vocab "$vocab" --seq "$seq" --batch "$batch" --steps "$steps"
    if [[ -z $positions ]]; then  # the peer's position table as large as ferry's (the gpt2 preset's 1024 rows)
      positions=$(/usr/bin/python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["model"]["max_sequence"])' "$work/ferry_1_0.json")
    fi
    if (( world == 1 )); then
      mode=plain
    else
      modes=(ddp zero1 fsdp2 fsdp2-reshard)
      mode=${modes[$stage]}
    fi
    peer_run "torch_${world}_$stage" "$world" "$mode"
  done
done

/usr/bin/python3 - "$work" "$worlds" "$(nproc)" "$(lscpu | sed -n 's/^Model name: *//p' | head -n 1)" <<'PY'
import glob, json, statistics, sys
work, worlds, cores, cpu = sys.argv[1], [int(w) for w in sys.argv[2].split()], int(sys.argv[3]), sys.argv[4]
MiB = 2**20
MODES = {0: "DDP", 1: "DDP+ZeroRedundancyOpt", 2: "FSDP2 (no reshard)", 3: "FSDP2 reshard"}


def load(name):
    try:
        with open(f"{work}/{name}.json") as f:
            return json.load(f)
    except FileNotFoundError:
        return None


def rss_kib(name, world):
    """Each rank's peak RSS in bytes, from GNU time's %M (KiB; its last line, after any exit note)."""
    values = []
    for rank in range(world):
        with open(f"{work}/{name}.rss.{rank}") as f:
            values.append(int(f.read().split()[-1]) * 1024)
    return values


def span(values):
    """min–max over ranks in MiB (an en dash, as a growth can round below zero), one number if equal."""
    low, high = (round(v / MiB) for v in (min(values), max(values)))
    return f"{low}" if low == high else f"{low}–{high}"


def ferry_tokens(run, world):
    timed = [s["seconds"] for s in run["steps"][1:]]
    return world * run["run"]["micro_batch"] * run["run"]["seq"] / statistics.median(timed)


first = load("ferry_1_0")
peer_first = load("torch_1_0")
model = first["model"]
print(f"cpu: {cpu}, {cores} cores; ferry {first['run'].get('blas_kernels', '')} kernels, PyTorch {peer_first['torch_version']}")
print(f"gpt2 shape: {model['layers']} blocks of width {model['hidden']}, {model['heads']} heads, vocabulary {model['vocab']}, "
      f"{model['max_sequence']} positions, {model['parameters']:,} parameters (PyTorch's: {peer_first['parameters']:,}); fp32, "
      f"micro-batch {first['run']['micro_batch']} x seq {first['run']['seq']} per rank, global batch world x {first['run']['micro_batch']}, "
      f"{first['run']['threads']} thread per rank, {len(first['steps'])} steps (median after the first)")
print("memory per rank in MiB, min–max over ranks; ferry RSS growth: rank peak RSS minus a near-empty run's; "
      "ferry allocator: summary peak_allocated; PyTorch RSS growth: VmHWM minus VmRSS before the model")
print()
header = (f"{'world':>5} {'ZeRO':>4}  {'PyTorch peer':22} {'ferry tok/s':>11} {'PyTorch tok/s':>13} {'ferry/PT':>8}"
          f"  {'ferry RSS growth':>16} {'ferry allocator':>15} {'ferry peak RSS':>14}  {'PT RSS growth':>13} {'PT peak RSS':>11}")
print(header)
ferry_tps, peer_tps = {}, {}
for world in worlds:
    for stage in ((0,) if world == 1 else (0, 1, 2, 3)):
        peer = load(f"torch_{world}_{stage}")
        peer_tps[world, stage] = peer["tokens_per_second"]
        run = load(f"ferry_{world}_{stage}")
        if run is not None:
            ferry_tps[world, stage] = ferry_tokens(run, world)
            peak = rss_kib(f"ferry_{world}_{stage}", world)
            base = rss_kib(f"base_{world}_{stage}", world)
            allocated = [r["peak_allocated"] for r in run["ranks"]]
            ferry_cols = (f"{ferry_tps[world, stage]:11.0f} {peer_tps[world, stage]:13.0f} {ferry_tps[world, stage] / peer_tps[world, stage]:7.2f}x"
                          f"  {span([p - b for p, b in zip(peak, base)]):>16} {span(allocated):>15} {span(peak):>14}")
        else:
            ferry_cols = f"{'—':>11} {peer_tps[world, stage]:13.0f} {'—':>8}  {'—':>16} {'—':>15} {'—':>14}"
        mode = "unwrapped" if world == 1 else MODES[stage]
        note = "" if world <= cores else f"  ({world} ranks on {cores} cores)"
        print(f"{world:5d} {stage:4d}  {mode:22} {ferry_cols}  {span(peer['rank_peak_rss_growth_bytes']):>13}"
              f" {span(peer['rank_peak_rss_bytes']):>11}{note}")
print()
print("scaling: world W's tokens/s over W x world 1's (one process, ferry unlaunched, PyTorch unwrapped)")
for system, tps in (("ferry", ferry_tps), ("PyTorch", peer_tps)):
    parts = []
    for stage in (0, 1, 2, 3):
        ratios = [f"{world}: {tps[world, stage] / (world * tps[1, 0]):.2f}" for world in worlds[1:] if (world, stage) in tps]
        if ratios:
            parts.append(f"ZeRO {stage} " + ", ".join(ratios))
    print(f"  {system:8} " + "; ".join(parts))
PY
