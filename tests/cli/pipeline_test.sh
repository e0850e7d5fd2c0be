#!/usr/bin/env bash
# Pipeline training across processes (mpirun, more ranks than cores): every schedule with --pp 2 and
# --pp 4 gives the per-step losses of one rank with the same global batch (1e-5 relative in fp32), with
# ZeRO-Offload too; the summary on rank 0 lists every rank, each with its predicted activation stash
# equal to the measured one byte for byte; a bad flag on every rank, or a launch with the wrong rank
# count, fails fast with one clear error instead of hanging.
source "$(dirname "$0")/common.sh"
root=$1
mpirun=${MPIRUN:-mpirun}
launch() {  # launch RANKS ARGS...: ferry under mpirun, one rank per core or more
  local ranks=$1; shift
  timeout 300 "$mpirun" --allow-run-as-root --oversubscribe -np "$ranks" "$ferry" "$@"
}
model=(--model gpt2-tiny --layers 8 --hidden 32 --heads 2 --vocab 256 --seq 16 --batch 2 --steps 3 --lr 3e-3 --threads 1)

"$ferry" train "${model[@]}" --grad-accum 4 --summary "$work/one.json" > "$work/one.txt"

compare() {  # compare SUMMARY RANKS: same losses as one rank, and a memory entry per rank
  /usr/bin/python3 - "$work/one.json" "$1" "$2" <<'PY'
import json, sys
one, pipe = (json.load(open(path)) for path in sys.argv[1:3])
ranks = int(sys.argv[3])
expected = [step["loss"] for step in one["steps"]]
actual = [step["loss"] for step in pipe["steps"]]
assert len(expected) == len(actual) == 3, (expected, actual)
for e, a in zip(expected, actual):
    assert abs(a - e) <= 1e-5 * abs(e), f"{pipe['pipeline']['schedule']} pp {ranks}: {actual} vs {expected}"
assert pipe["pipeline"]["processes"] == ranks and len(pipe["ranks"]) == ranks, pipe["pipeline"]
assert sorted(entry["rank"] for entry in pipe["ranks"]) == list(range(ranks))
for entry in pipe["ranks"]:
    assert entry["peak_allocated"] > 0 and entry["max_by_category"]["activations"] > 0, entry
# Each rank's activation stash, predicted by replaying its actions with its chunks' bytes, equals the
# measured one byte for byte.
wrong = [(e["rank"], e["activation_stash"]["predicted_peak"], e["activation_stash"]["peak"]) for e in pipe["ranks"]
         if e["activation_stash"]["predicted_peak"] != e["activation_stash"]["peak"]]
assert not wrong, f"{pipe['pipeline']['schedule']} pp {ranks}: (rank, predicted, measured) {wrong}"
PY
}

for ranks in 2 4; do
  for schedule in gpipe 1f1b 1f1b-deep interleaved:2 zb-h1; do
    launch "$ranks" train "${model[@]}" --pp "$ranks" --micro-batches 4 --schedule "$schedule" --summary "$work/pipe.json" \
      > "$work/pipe.txt" 2>&1 || { cat "$work/pipe.txt"; exit 1; }
    compare "$work/pipe.json" "$ranks"
    echo "pp $ranks $schedule: same losses as one rank"
  done
done

# The one trainer's features on a pipeline: dropout with recompute, --init-from, fp16 loss scaling (one
# scale agreed by every stage), each the losses of one rank with the same global batch.
check_losses() {  # check_losses EXPECTED ACTUAL WHAT: the same per-step losses within 1e-5
  /usr/bin/python3 - "$1" "$2" "$3" <<'PY'
import json, sys
one, pipe = (json.load(open(path)) for path in sys.argv[1:3])
expected, actual = ([s["loss"] for s in x["steps"]] for x in (one, pipe))
assert len(expected) == len(actual) > 0, (expected, actual)
for e, a in zip(expected, actual):
    assert abs(a - e) <= 1e-5 * abs(e), f"{sys.argv[3]}: {actual} vs {expected}"
PY
  echo "$3: one rank's losses"
}
small=(--model gpt2-tiny --layers 4 --hidden 32 --heads 2 --vocab 256 --seq 16 --batch 2 --lr 3e-3 --threads 1 --micro-batches 3)
"$ferry" train "${small[@]}" --steps 2 --dropout 0.1 --checkpointing full --summary "$work/drop_one.json" > /dev/null
launch 2 train "${small[@]}" --steps 2 --dropout 0.1 --checkpointing full --pp 2 --summary "$work/drop_pipe.json" > "$work/out.txt" 2>&1 \
  || { cat "$work/out.txt"; exit 1; }
check_losses "$work/drop_one.json" "$work/drop_pipe.json" "pp 2 with dropout and full recompute"
"$ferry" train "${small[@]}" --steps 1 --seed 1234 --save "$work/init" > /dev/null  # weights that are not the runs' --seed
from_file=(--seq 16 --batch 2 --lr 3e-3 --threads 1 --micro-batches 3)  # the shape comes from the file's config.json
"$ferry" train "${from_file[@]}" --steps 2 --init-from "$work/init/latest/model.safetensors" --summary "$work/init_one.json" > /dev/null
launch 4 train "${from_file[@]}" --steps 2 --init-from "$work/init/latest/model.safetensors" --pp 4 --summary "$work/init_pipe.json" > "$work/out.txt" 2>&1 \
  || { cat "$work/out.txt"; exit 1; }
check_losses "$work/init_one.json" "$work/init_pipe.json" "pp 4 --init-from (each stage loads its share)"
"$ferry" train "${small[@]}" --steps 2 --summary "$work/seeded_one.json" > /dev/null
/usr/bin/python3 -c "
import json, sys
a, b = (json.load(open(p))['steps'][0]['loss'] for p in sys.argv[1:3])
assert a != b, 'the file\'s weights were not used'
" "$work/init_one.json" "$work/seeded_one.json"
"$ferry" train "${small[@]}" --steps 3 --precision fp16 --summary "$work/fp16_one.json" > /dev/null
launch 2 train "${small[@]}" --steps 3 --precision fp16 --pp 2 --summary "$work/fp16_pipe.json" > "$work/out.txt" 2>&1 \
  || { cat "$work/out.txt"; exit 1; }
check_losses "$work/fp16_one.json" "$work/fp16_pipe.json" "pp 2 fp16"
/usr/bin/python3 -c "
import json, sys
steps = json.load(open(sys.argv[1]))['steps']
assert all(s['loss_scale'] == 65536 and s['skipped'] is False for s in steps), steps
" "$work/fp16_pipe.json"

# Checkpoints across grids: pp 2 stops at step 2 (--exit-interval) and saves one model (each stage
# writes its tensors in place); it resumes at pp 2 and at one rank, and a one-rank checkpoint resumes at
# pp 2, each with the losses of the run that never stopped.
"$ferry" train "${small[@]}" --steps 4 --summary "$work/straight.json" > /dev/null
launch 2 train "${small[@]}" --steps 4 --pp 2 --exit-interval 2 --save "$work/ck_pp2" > "$work/out.txt" 2>&1 || { cat "$work/out.txt"; exit 1; }
grep -q "stopped after step 2" "$work/out.txt" || { echo "no word of the exit interval:"; cat "$work/out.txt"; exit 1; }
launch 2 train "${small[@]}" --steps 4 --pp 2 --resume "$work/ck_pp2" --summary "$work/pp2_pp2.json" > "$work/out.txt" 2>&1 \
  || { cat "$work/out.txt"; exit 1; }
"$ferry" train "${small[@]}" --steps 4 --resume "$work/ck_pp2" --summary "$work/pp2_one.json" > /dev/null
"$ferry" train "${small[@]}" --steps 4 --exit-interval 2 --save "$work/ck_one" > /dev/null
launch 2 train "${small[@]}" --steps 4 --pp 2 --resume "$work/ck_one" --summary "$work/one_pp2.json" > "$work/out.txt" 2>&1 \
  || { cat "$work/out.txt"; exit 1; }
/usr/bin/python3 - "$work" <<'PY'
import json, sys
load = lambda name: json.load(open(f"{sys.argv[1]}/{name}.json"))
expected = [s["loss"] for s in load("straight")["steps"]][2:]
for name in ("pp2_pp2", "pp2_one", "one_pp2"):
    actual = [s["loss"] for s in load(name)["steps"]]
    assert len(actual) == 2 and all(abs(a - e) <= 1e-5 * abs(e) for a, e in zip(actual, expected)), (name, actual, expected)
PY
echo "pp 2 checkpoints: saved at pp 2, resumed at pp 2 and at one rank; a one-rank checkpoint resumed at pp 2"

# A dry run of every rank in one process (--device meta, no launcher) predicts each rank's activation
# stash, bytes sent and peaks under mpirun byte for byte: a rank's messages between two compute actions
# are one exchange, complete before the next compute, so a sent activation is freed there whenever MPI
# delivers it.
for schedule in 1f1b zb-h1; do
  "$ferry" train "${model[@]}" --pp 2 --micro-batches 4 --schedule "$schedule" --device meta --summary "$work/dry.json" > /dev/null
  launch 2 train "${model[@]}" --pp 2 --micro-batches 4 --schedule "$schedule" --summary "$work/real.json" > /dev/null 2>&1
  /usr/bin/python3 - "$work/dry.json" "$work/real.json" <<'PY'
import json, sys
dry, real = (json.load(open(path)) for path in sys.argv[1:3])
assert dry["pipeline"]["processes"] == 1 and real["pipeline"]["processes"] == 2
for d, r in zip(dry["ranks"], real["ranks"]):
    for key in ("activation_stash", "bytes_sent", "peak_allocated", "peak_reserved", "max_by_category"):
        assert d[key] == r[key], (d["rank"], key, d[key], r[key])
PY
  echo "pp 2 $schedule: the dry run's stash, bytes sent and peaks equal mpirun's, every rank"
done

# dp 2 x pp 2 (ranks in Megatron's order: dp fastest after tp, then pp): each stage's dp group averages
# its gradients (ZeRO 0: all-reduce; 1: reduce-scatter, each rank stepping its share; 2: each bucket
# reduce-scattered as soon as its parameters completed, the tied table's held whole for the stages' sum)
# after the tied table is summed between the first and last stage of each replica; with dropout the
# losses are one rank's with the whole global batch (1e-6 in fp32, bf16 within 1e-4). Saved at dp 2 x
# pp 2, resumed at one rank. The dry run of all four ranks in one process gives mpirun's peaks. With buckets small beside a stage (hidden 64, 3000 elements), stage 2 peaks below stage 1
# on every rank, its gradient bytes too, under 1f1b and interleaved:2 (whose ranks hold two stages each:
# no bucket spans two); with buckets of the whole stage, the default, its open bucket is the stage's
# size, and at hidden 32 the held tied table and the buckets eat the half saved.
grid=(--model gpt2-tiny --layers 4 --hidden 32 --heads 2 --vocab 256 --seq 16 --batch 2 --lr 3e-3 --threads 1 --dropout 0.1)
"$ferry" train "${grid[@]}" --steps 4 --grad-accum 8 --summary "$work/grid_one.json" > /dev/null
"$ferry" train "${grid[@]}" --steps 3 --grad-accum 8 --precision bf16 --summary "$work/grid_one_bf16.json" > /dev/null
for stage in 0 1 2; do
  launch 4 train "${grid[@]}" --steps 4 --pp 2 --micro-batches 4 --zero-stage "$stage" --exit-interval 2 --save "$work/grid_ck$stage" \
    --summary "$work/grid_$stage.json" > "$work/out.txt" 2>&1 || { cat "$work/out.txt"; exit 1; }
  "$ferry" train "${grid[@]}" --steps 4 --grad-accum 8 --resume "$work/grid_ck$stage" --summary "$work/grid_resumed_$stage.json" > /dev/null
done
launch 4 train "${grid[@]}" --steps 3 --pp 2 --micro-batches 4 --zero-stage 1 --precision bf16 --summary "$work/grid_bf16.json" > "$work/out.txt" 2>&1 \
  || { cat "$work/out.txt"; exit 1; }
"$ferry" train "${grid[@]}" --steps 2 --pp 2 --dp 2 --micro-batches 4 --zero-stage 1 --device meta --summary "$work/grid_dry.json" > /dev/null
# With --device-memory the split is chosen by dry runs of every rank of the grid (each pipeline rank's
# peak the fullest of its dp ranks'); it fits, so it is the cost-balanced split and the peaks are the same.
"$ferry" train "${grid[@]}" --steps 2 --pp 2 --dp 2 --micro-batches 4 --zero-stage 1 --device meta --device-memory 64MiB \
  --summary "$work/grid_dry_limited.json" > "$work/out.txt" 2>&1 || { cat "$work/out.txt"; exit 1; }
bucketed=(--steps 2 --pp 2 --micro-batches 4 --reduce-bucket-size 3000)
wide=(--model gpt2-tiny --layers 4 --hidden 64 --heads 2 --vocab 256 --seq 16 --batch 2 --lr 3e-3 --threads 1 --dropout 0.1)
"$ferry" train "${wide[@]}" --steps 2 --grad-accum 8 --summary "$work/wide_one.json" > /dev/null
for schedule in 1f1b interleaved:2; do
  for stage in 1 2; do
    launch 4 train "${wide[@]}" "${bucketed[@]}" --schedule "$schedule" --zero-stage "$stage" --summary "$work/small_${schedule%%:*}_$stage.json" \
      > "$work/out.txt" 2>&1 || { cat "$work/out.txt"; exit 1; }
  done
done
"$ferry" train "${wide[@]}" "${bucketed[@]}" --dp 2 --zero-stage 2 --device meta --summary "$work/small_dry.json" > /dev/null
/usr/bin/python3 - "$work" <<'PY'
import json, sys
load = lambda name: json.load(open(f"{sys.argv[1]}/{name}.json"))
losses = lambda s: [step["loss"] for step in s["steps"]]
def same(actual, expected, relative, what):
    assert len(actual) == len(expected) > 0 and all(abs(a - e) <= relative * abs(e) for a, e in zip(actual, expected)), (what, actual, expected)
one = losses(load("grid_one"))
for stage in (0, 1, 2):
    run = load(f"grid_{stage}")
    same(losses(run), one[:2], 1e-6, f"dp 2 x pp 2 zero {stage}")
    same(losses(load(f"grid_resumed_{stage}")), one[2:], 1e-6, f"resumed from dp 2 x pp 2 zero {stage} at one rank")
    assert [(r["dp"], r["pp"]) for r in run["ranks"]] == [(0, 0), (1, 0), (0, 1), (1, 1)], run["ranks"]
    assert run["grid"]["dp"] == 2 and run["grid"]["pp"] == 2 and run["grid"]["global_batch"] == 16, run["grid"]
same(losses(load("grid_bf16")), losses(load("grid_one_bf16")), 1e-4, "dp 2 x pp 2 bf16")
# ZeRO 1: each rank's optimizer state is its half of its stage's (within 64-element alignment).
for r in load("grid_1")["ranks"]:
    stage_states = [x for x in load("grid_0")["ranks"] if x["pp"] == r["pp"]][0]["max_by_category"]["optimizer_states"]
    assert abs(r["max_by_category"]["optimizer_states"] - stage_states / 2) <= 2 * 64 * 4 * 2, (r["rank"], r["max_by_category"], stage_states)
assert [r["peak_reserved"] for r in load("grid_dry_limited")["ranks"]] == [r["peak_reserved"] for r in load("grid_dry")["ranks"]]
for dry, measured in (("grid_dry", "grid_1"), ("small_dry", "small_1f1b_2")):
    for d, m in zip(load(dry)["ranks"], load(measured)["ranks"]):
        assert (d["dp"], d["pp"]) == (m["dp"], m["pp"]) and d["activation_stash"] == m["activation_stash"], (measured, d["rank"])
        assert d["peak_reserved"] == m["peak_reserved"] and d["peak_allocated"] == m["peak_allocated"], (measured, d["rank"], d["peak_allocated"], m["peak_allocated"])
        assert d["max_by_category"]["gradients"] == m["max_by_category"]["gradients"], (measured, d["rank"])
for schedule in ("1f1b", "interleaved"):
    same(losses(load(f"small_{schedule}_2")), losses(load("wide_one")), 1e-6, f"dp 2 x pp 2 zero 2, {schedule}, small buckets")
    for one_rank, two in zip(load(f"small_{schedule}_1")["ranks"], load(f"small_{schedule}_2")["ranks"]):
        assert two["max_by_category"]["gradients"] < one_rank["max_by_category"]["gradients"], (schedule, two["rank"], two["max_by_category"], one_rank["max_by_category"])
        assert two["peak_allocated"] < one_rank["peak_allocated"], (schedule, two["rank"], two["peak_allocated"], one_rank["peak_allocated"])
PY
echo "dp 2 x pp 2, ZeRO 0, 1 and 2, fp32 and bf16: one rank's losses; saved there, resumed at one rank; the dry run's peaks"
# ZeRO-Offload on a dp x pp grid (ZeRO 1, cpu and nvme): each rank's share of its stage's state on the
# host, stepped by CpuAdam; one rank's losses.
for tier in cpu nvme; do
  nvme=(); [[ $tier == nvme ]] && nvme=(--nvme-path "$work/grid_nvme")
  launch 4 train "${grid[@]}" --steps 4 --pp 2 --micro-batches 4 --zero-stage 1 --offload-optimizer "$tier" "${nvme[@]}" \
    --summary "$work/grid_offload_$tier.json" > "$work/out.txt" 2>&1 || { cat "$work/out.txt"; exit 1; }
done
"$ferry" train "${grid[@]}" --steps 2 --pp 2 --dp 2 --micro-batches 4 --zero-stage 1 --offload-optimizer cpu --device meta > /dev/null
/usr/bin/python3 - "$work" <<'PY'
import json, sys
load = lambda name: json.load(open(f"{sys.argv[1]}/{name}.json"))
one = [step["loss"] for step in load("grid_one")["steps"]]
for tier in ("cpu", "nvme"):
    run = load(f"grid_offload_{tier}")
    losses = [step["loss"] for step in run["steps"]]
    assert len(losses) == 4 and all(abs(a - e) <= 1e-6 * e for a, e in zip(losses, one)), (tier, losses, one)
    assert run["run"]["offload_optimizer"] == tier and all(r["max_by_category"].get("optimizer_states", 0) == 0 for r in run["ranks"]), tier
PY
echo "dp 2 x pp 2 ZeRO 1 with --offload-optimizer cpu and nvme: one rank's losses, no optimizer state on any device"

# Validation through the stages (--eval-data): every micro-batch passes the stages forward only, and
# the loss equals one rank's after every step, with one stage per rank and with two (interleaved).
head -c 20000 "$root/data/corpus/tiny-stories.txt" > "$work/validation.txt"
eval_flags=(--eval-data "$work/validation.txt" --eval-every 1 --eval-batches 3)
"$ferry" train "${model[@]}" --grad-accum 4 "${eval_flags[@]}" --summary "$work/eval_one.json" > /dev/null
launch 2 train "${model[@]}" --pp 2 --micro-batches 4 "${eval_flags[@]}" --summary "$work/eval_pp2.json" > "$work/out.txt" 2>&1 \
  || { cat "$work/out.txt"; exit 1; }
launch 2 train "${model[@]}" --pp 2 --micro-batches 4 --schedule interleaved:2 "${eval_flags[@]}" --summary "$work/eval_int.json" \
  > "$work/out.txt" 2>&1 || { cat "$work/out.txt"; exit 1; }
"$ferry" train "${model[@]}" --pp 2 --micro-batches 4 --device meta "${eval_flags[@]}" > /dev/null  # a dry run passes the same way
/usr/bin/python3 - "$work/eval_one.json" "$work/eval_pp2.json" "$work/eval_int.json" <<'PY'
import json, sys
one, *pipes = ([step["eval_loss"] for step in json.load(open(path))["steps"]] for path in sys.argv[1:])
assert len(one) == 3, one
for pipe in pipes:
    assert all(abs(a - e) <= 1e-5 * e for a, e in zip(pipe, one)) and len(pipe) == 3, (pipe, one)
PY
echo "pp 2 --eval-data (1f1b and interleaved:2): one rank's validation losses"

# Pipelines of GPUs (trained on the CUDA emulation: cuda_emulated_test.sh): a dry run of their ranks here.
"$ferry" train "${model[@]}" --pp 2 --device meta --dry-run-of cuda --summary "$work/pp_cuda_dry.json" > /dev/null
python3 -c 'import json, sys; ranks = json.load(open(sys.argv[1]))["ranks"]; assert len(ranks) == 2 and all(r["peak_allocated"] > 0 for r in ranks), ranks' \
  "$work/pp_cuda_dry.json"

# --device-memory: the cost-balanced split of a 4096-token vocabulary's model (3 + 1 blocks: its LM head
# costs about ten blocks) needs 10 MiB on rank 0 with GPipe's 32 micro-batches; every rank picks 2 + 2 by
# the same dry runs, stays within 8 MiB, and trains as one rank does.
wide=(--model gpt2-tiny --layers 4 --hidden 32 --heads 2 --vocab 4096 --seq 16 --batch 2 --steps 2 --threads 1)
"$ferry" train "${wide[@]}" --grad-accum 32 --summary "$work/wide_one.json" > /dev/null
launch 2 train "${wide[@]}" --pp 2 --micro-batches 32 --schedule gpipe --device-memory 8MiB --summary "$work/memory.json" > "$work/memory.txt" 2>&1 \
  || { cat "$work/memory.txt"; exit 1; }
grep -q "the cost-balanced split does not fit --device-memory 8.00 MiB; blocks moved for memory" "$work/memory.txt" \
  || { echo "no word of the moved split:"; cat "$work/memory.txt"; exit 1; }
/usr/bin/python3 - "$work/memory.json" "$work/wide_one.json" <<'PY'
import json, sys
s, one = (json.load(open(path)) for path in sys.argv[1:3])
assert [p["blocks"] for p in s["pipeline"]["partition"]] == [[0, 2], [2, 4]], s["pipeline"]
assert all(r["peak_reserved"] <= 8 << 20 for r in s["ranks"]), [r["peak_reserved"] for r in s["ranks"]]
for e, a in zip((x["loss"] for x in one["steps"]), (x["loss"] for x in s["steps"])):
    assert abs(a - e) <= 1e-5 * abs(e), (a, e)
PY
echo "pp 2 --device-memory 8MiB: blocks moved for memory, every rank within the limit, one rank's losses"

# ZeRO-Offload on every rank (nvme: a directory per rank under --nvme-path), the tied table's gradient
# summed between host copies: still one rank's losses.
for offload in cpu nvme; do
  nvme=(); [[ $offload == nvme ]] && nvme=(--nvme-path "$work/nvme")
  launch 2 train "${model[@]}" --pp 2 --micro-batches 4 --schedule zb-h1 --offload-optimizer "$offload" "${nvme[@]}" \
    --summary "$work/pipe.json" > "$work/pipe.txt" 2>&1 || { cat "$work/pipe.txt"; exit 1; }
  compare "$work/pipe.json" 2
  /usr/bin/python3 -c "
import json, sys
s = json.load(open(sys.argv[1]))
assert [r['optimizer']['mode'] for r in s['ranks']] == [sys.argv[2]] * 2, s['ranks']
assert s['memory']['host_pinned_peak'] == sum(r['host_pinned_peak'] for r in s['ranks']) > 0, s['memory']
" "$work/pipe.json" "$offload"
  echo "pp 2 zb-h1 --offload-optimizer $offload: same losses as one rank"
done
[[ -d $work/nvme/rank-0 && -d $work/nvme/rank-1 ]] || { echo "no NVMe directory per rank"; ls -R "$work/nvme"; exit 1; }

# A flag every rank rejects, and a launch whose rank count does not match --pp: an error, no hang.
if launch 2 train "${model[@]}" --pp 2 --schedule fastest > "$work/out.txt" 2> "$work/err.txt"; then echo "accepted --schedule fastest"; exit 1; fi
[[ $? -ne 124 ]] || { echo "mpirun hung on a bad schedule"; exit 1; }
grep -q "fastest" "$work/err.txt" || { echo "no error naming the schedule:"; cat "$work/err.txt"; exit 1; }
if launch 3 train "${model[@]}" --pp 2 > "$work/out.txt" 2> "$work/err.txt"; then echo "accepted 3 ranks for --pp 2"; exit 1; fi
grep -q "mpirun -np 2" "$work/err.txt" || { echo "no error naming the launch:"; cat "$work/err.txt"; exit 1; }
# Out of memory in a pipeline: as for one rank, the error names the rank and step, lists what would fit
# (dry runs of every stage) and saves the failing rank's profile, under mpirun and in a dry run of every
# rank in one process (--device meta; it runs the ranks last to first, so rank 1 fails first there).
oom=(train --pp 2 --micro-batches 4 --layers 4 --hidden 64 --heads 4 --seq 64 --batch 4 --steps 2 --threads 1 --device-memory 3MiB)
(cd "$work" && expect_error "out of device memory on rank 1 in step 1" "$ferry" "${oom[@]}" --device meta)
for pattern in "a dry run of this configuration peaks at [0-9.]* MiB reserved against the limit of 3.00 MiB" \
               "the cheapest changes that fit" "--checkpointing first:3 --offload-optimizer cpu .* fits" "--batch 2 --micro-batches 8 .* fits" \
               "in ferry-oom-profile/rank-1"; do
  grep -q -- "$pattern" "$work/err.txt" || { echo "the pipeline's out-of-memory error lacks '$pattern':"; cat "$work/err.txt"; exit 1; }
done
"$ferry" report "$work/ferry-oom-profile/rank-1" > /dev/null
mkdir -p "$work/mpi_oom"
if (cd "$work/mpi_oom" && launch 2 "${oom[@]}" > "$work/out.txt" 2> "$work/err.txt"); then echo "an out-of-memory pipeline succeeded"; exit 1; fi
grep -q "rank 0 of 2: out of device memory on rank 0 in step 1" "$work/err.txt" && grep -q -- "--offload-optimizer cpu" "$work/err.txt" ||
  { echo "mpirun's out-of-memory error lacks the rank or the advice:"; cat "$work/err.txt"; exit 1; }
[[ -f $work/mpi_oom/ferry-oom-profile/rank-0/profile.json ]] || { echo "no profile of the failing rank under mpirun"; ls -R "$work/mpi_oom"; exit 1; }

# --profile: one profile per rank; `ferry report` puts every rank on one timeline (a process per rank,
# rank 1's first block forward after rank 0's).
launch 2 train "${model[@]}" --pp 2 --micro-batches 4 --profile "$work/profile" > "$work/out.txt" 2>&1 || { cat "$work/out.txt"; exit 1; }
"$ferry" report "$work/profile" > "$work/report.txt"
grep -q "rank 1" "$work/report.txt" || { echo "the report lacks rank 1"; exit 1; }
/usr/bin/python3 - "$work/profile/trace.json" <<'PY'
import json, sys
events = json.load(open(sys.argv[1]))["traceEvents"]
assert sorted({e["pid"] for e in events}) == [0, 1], "one process per rank"
names = [e["args"]["name"] for e in events if e["name"] == "process_name"]
assert names[0].startswith("rank 0") and names[1].startswith("rank 1"), names
first = {pid: min(e["ts"] for e in events if e["pid"] == pid and e["ph"] == "X" and e["name"].startswith("forward h.")) for pid in (0, 1)}
assert first[0] < first[1], first
PY

# The schedules' memory benchmark (dry runs on meta): early backward's stage 0 keeps p of m micro-batches.
"$ferry" bench memory --layers 4 --hidden 32 --heads 2 --vocab 256 --seq 16 --batch 2 --pp 2 --micro-batches 4,8 \
  --schedules gpipe,1f1b --output "$work/bench" > "$work/bench.txt"
/usr/bin/python3 - "$work/bench/pipeline.json" <<'PY'
import json, sys
rows = {(r["micro_batches"], r["schedule"]): r for r in json.load(open(sys.argv[1]))["rows"]}
for m in (4, 8):
    gpipe, early = rows[(m, "gpipe")], rows[(m, "1f1b")]
    assert early["stage0_activation_vs_gpipe"] <= early["goal_vs_gpipe"], early
    for stage in gpipe["stages"] + early["stages"]:
        assert stage["stash_peak"] == stage["stash_predicted"], stage
    assert abs(gpipe["simulated_bubble"] - (2 - 1) / (m + 2 - 1)) < 1e-9, gpipe
PY
echo "cli.pipeline: ok"
