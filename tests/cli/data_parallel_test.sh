#!/usr/bin/env bash
# Data parallelism under mpirun (more ranks than cores): dp 2 and 4 at ZeRO stages 0, 1 and 2 give the
# losses of one rank with the same global batch (1e-6 relative in fp32, bf16 within its rounding); each
# rank's optimizer state is its partition; stage 2 peaks below stage 1 below stage 0; bytes sent per
# step match the ring's 2Ψ(dp-1)/dp; a dry run of every rank in one process predicts each rank's peaks
# byte for byte; a checkpoint saved at dp 4 resumes at dp 2 and dp 1; bad grids fail with clear errors.
source "$(dirname "$0")/common.sh"
mpirun=${MPIRUN:-mpirun}
launch() {  # launch RANKS ARGS...: ferry under mpirun
  local ranks=$1; shift
  timeout 300 "$mpirun" --allow-run-as-root --oversubscribe -np "$ranks" "$ferry" "$@"
}
model=(--model gpt2-tiny --steps 3 --batch 2 --seq 32 --lr 1e-3 --dropout 0.1 --threads 1)

"$ferry" train "${model[@]}" --grad-accum 4 --summary "$work/one.json" > "$work/one.txt"
"$ferry" train "${model[@]}" --grad-accum 4 --precision bf16 --summary "$work/one_bf16.json" > "$work/one_bf16.txt"
for stage in 0 1 2; do
  launch 2 train "${model[@]}" --grad-accum 2 --zero-stage "$stage" --summary "$work/dp2_$stage.json" > "$work/out.txt" 2>&1 ||
    { cat "$work/out.txt"; exit 1; }
  launch 4 train "${model[@]}" --grad-accum 1 --zero-stage "$stage" --reduce-bucket-size 100000 --summary "$work/dp4_$stage.json" \
    > "$work/dp4.txt" 2>&1 || { cat "$work/dp4.txt"; exit 1; }
  # The bucket bound acts on dp ranks: no note says otherwise.
  if grep -q "reduce_bucket_size has no effect" "$work/dp4.txt"; then echo "dp 4 called its reduce buckets without effect"; exit 1; fi
  "$ferry" train "${model[@]}" --grad-accum 1 --zero-stage "$stage" --reduce-bucket-size 100000 --device meta --dp 4 \
    --summary "$work/meta4_$stage.json" > "$work/out.txt" 2>&1 || { cat "$work/out.txt"; exit 1; }
done
launch 2 train "${model[@]}" --grad-accum 2 --zero-stage 2 --precision bf16 --summary "$work/dp2_bf16.json" > "$work/out.txt" 2>&1 ||
  { cat "$work/out.txt"; exit 1; }

/usr/bin/python3 - "$work" "$(dirname "$0")" <<'PY'
import sys
sys.path.insert(0, sys.argv[2])
from summaries import Summaries, round512
summaries = Summaries(sys.argv[1])
load, losses_match = summaries.load, summaries.losses_match
for stage in (0, 1, 2):
    for dp in (2, 4):
        name = f"dp{dp}_{stage}"
        losses_match(name, "one", 1e-6)
        run = load(name)
        assert run["grid"]["dp"] == dp and run["grid"]["zero_stage"] == stage and run["grid"]["global_batch"] == 8, run["grid"]
        ranks = run["ranks"]
        assert [r["rank"] for r in ranks] == list(range(dp)) and [r["dp"] for r in ranks] == list(range(dp)), ranks
        assert ranks[1]["groups"]["dp"] == list(range(dp)) and ranks[1]["groups"]["tp"] == [1], ranks[1]["groups"]
        # Optimizer state: both moments of the rank's share (everything at stage 0), in allocator granules.
        parameters = run["model"]["parameters"]
        owned = parameters if stage == 0 else run["optimizer"]["partition_elements"]
        if stage > 0:
            assert owned == -(-parameters // dp // 64) * 64, (owned, parameters)  # ceil(Ψ/dp), aligned to 64
        for r in ranks:
            assert r["max_by_category"]["optimizer_states"] == 2 * round512(4 * owned), (name, r["rank"], r["max_by_category"])
    # Bytes sent per step beside the ring's 2Ψ(dp-1)/dp in f32 (plus the loss's and the norm's scalars).
    theory = 2 * 4 * load("dp4_0")["model"]["parameters"] * 3 / 4
    for r in load(f"dp4_{stage}")["ranks"]:
        assert 0 <= r["bytes_sent_per_step"] - theory <= 64, (stage, r["bytes_sent_per_step"], theory)
    # The contract's memory section is the fullest rank's.
    run = load(f"dp4_{stage}")
    fullest = max(run["ranks"], key=lambda r: r["peak_reserved"])
    assert run["memory"]["peak_reserved"] == fullest["peak_reserved"] and run["memory"]["rank"] == fullest["rank"], run["memory"]
    # The dry run of every rank in one process predicts every rank's memory and traffic byte for byte.
    for predicted, measured in zip(load(f"meta4_{stage}")["ranks"], load(f"dp4_{stage}")["ranks"]):
        for key in ("peak_allocated", "peak_reserved", "max_by_category", "at_peak", "bytes_sent"):
            assert predicted[key] == measured[key], (stage, measured["rank"], key, predicted[key], measured[key])
# Stage 2 holds a partition of the gradients and the buckets in flight: below stage 1, below stage 0.
peak = lambda name: max(r["peak_allocated"] for r in load(name)["ranks"])
gradients = lambda name: max(r["max_by_category"]["gradients"] for r in load(name)["ranks"])
assert peak("dp4_2") < peak("dp4_1") < peak("dp4_0"), (peak("dp4_2"), peak("dp4_1"), peak("dp4_0"))
assert gradients("dp4_2") < gradients("dp4_1"), (gradients("dp4_2"), gradients("dp4_1"))
losses_match("dp2_bf16", "one_bf16", 1e-4)
PY

# fp16 across ranks: an overflow anywhere skips the step on every rank, and the scale follows one rank's.
fp16=(--precision fp16 --initial-scale-power 40 --steps 4)
"$ferry" train "${model[@]}" "${fp16[@]}" --grad-accum 4 --summary "$work/one_fp16.json" > /dev/null
launch 2 train "${model[@]}" "${fp16[@]}" --grad-accum 2 --zero-stage 2 --metrics "$work/metrics.jsonl" --summary "$work/dp2_fp16.json" \
  > "$work/out.txt" 2>&1 || { cat "$work/out.txt"; exit 1; }
/usr/bin/python3 - "$work" <<'PY'
import json, sys
work = sys.argv[1]
steps = lambda name: [(s["loss"], s["loss_scale"], s["skipped"]) for s in json.load(open(f"{work}/{name}.json"))["steps"]]
one, dp = steps("one_fp16"), steps("dp2_fp16")
assert any(skipped for _, _, skipped in one), one
assert [(scale, skipped) for _, scale, skipped in dp] == [(scale, skipped) for _, scale, skipped in one], (dp, one)
assert all(abs(a[0] - b[0]) <= 1e-6 * abs(b[0]) for a, b in zip(dp, one)), (dp, one)
assert len(open(f"{work}/metrics.jsonl").read().splitlines()) == 4  # rank 0's lines only
PY

# ZeRO-Offload per rank: each rank's share stepped by CpuAdam in pinned memory or on NVMe (a directory
# per rank); the same losses; no optimizer state on the device; the dry run predicts the device's part.
for offload in cpu nvme; do
  nvme=(); [[ $offload == nvme ]] && nvme=(--nvme-path "$work/nvme")
  launch 2 train "${model[@]}" --grad-accum 2 --zero-stage 2 --offload-optimizer "$offload" "${nvme[@]}" \
    --summary "$work/offload_$offload.json" > "$work/out.txt" 2>&1 || { cat "$work/out.txt"; exit 1; }
  # The host figures are the job's, summed over its ranks: the line says so.
  grep -q "offload $offload: host pinned peak .*, NVMe .* (sums over 2 ranks), resident peak .* (the largest rank.s); " "$work/out.txt" || { cat "$work/out.txt"; exit 1; }
  # nvme: the model-state line says the optimizer state is on NVMe, not on the host.
  grep -q "of optimizer state $([[ $offload == nvme ]] && echo "on NVMe" || echo "on the host"), " "$work/out.txt" || { cat "$work/out.txt"; exit 1; }
done
[[ -d $work/nvme/rank-0 && -d $work/nvme/rank-1 ]] || { echo "no NVMe directory per rank"; ls -R "$work/nvme"; exit 1; }
"$ferry" train "${model[@]}" --grad-accum 2 --zero-stage 2 --offload-optimizer cpu --device meta --dp 2 \
  --summary "$work/offload_meta.json" > "$work/out.txt" 2>&1 || { cat "$work/out.txt"; exit 1; }
launch 2 train "${model[@]}" --grad-accum 2 --zero-stage 1 --offload-optimizer cpu --exit-interval 2 --save "$work/ck_offload" \
  > "$work/out.txt" 2>&1 || { cat "$work/out.txt"; exit 1; }
"$ferry" train "${model[@]}" --grad-accum 4 --resume "$work/ck_offload" --summary "$work/r_offload.json" > "$work/out.txt"
/usr/bin/python3 - "$work" <<'PY'
import json, sys
work = sys.argv[1]
load = lambda name: json.load(open(f"{work}/{name}.json"))
expected = [s["loss"] for s in load("one")["steps"]]
for offload in ("cpu", "nvme"):
    run = load(f"offload_{offload}")
    actual = [s["loss"] for s in run["steps"]]
    assert all(abs(a - e) <= 1e-6 * abs(e) for a, e in zip(actual, expected)) and len(actual) == 3, (offload, actual, expected)
    assert run["optimizer"]["mode"] == offload and run["optimizer"]["zero_stage"] == 2, run["optimizer"]
    for r in run["ranks"]:
        assert r["max_by_category"]["optimizer_states"] == 0, (offload, r)
for predicted, measured in zip(load("offload_meta")["ranks"], load("offload_cpu")["ranks"]):
    for key in ("peak_allocated", "peak_reserved", "max_by_category", "bytes_sent"):
        assert predicted[key] == measured[key], ("offload", measured["rank"], key, predicted[key], measured[key])
steps = load("r_offload")["steps"]
assert [s["step"] for s in steps] == [3] and abs(steps[0]["loss"] - expected[2]) <= 1e-6 * expected[2], (steps, expected)
PY

# A checkpoint saved at dp 4 (stage 2), each rank writing its partition, resumes at dp 2 (stage 1, and
# stage 2 under ZeRO-Offload, each rank reading its partition) and on one rank: the next loss of a run
# that never stopped, and after that step the master weights and moments of a resume at dp 4.
launch 4 train "${model[@]}" --grad-accum 1 --zero-stage 2 --exit-interval 2 --save "$work/ck" > "$work/out.txt" 2>&1 ||
  { cat "$work/out.txt"; exit 1; }
launch 4 train "${model[@]}" --grad-accum 1 --zero-stage 2 --resume "$work/ck" --save "$work/ck_unchanged" > "$work/out.txt" 2>&1 ||
  { cat "$work/out.txt"; exit 1; }
launch 2 train "${model[@]}" --grad-accum 2 --zero-stage 1 --resume "$work/ck" --summary "$work/r2.json" --save "$work/ck_r2" \
  > "$work/out.txt" 2>&1 || { cat "$work/out.txt"; exit 1; }
launch 2 train "${model[@]}" --grad-accum 2 --zero-stage 2 --offload-optimizer cpu --resume "$work/ck" --summary "$work/r2o.json" \
  --save "$work/ck_r2o" > "$work/out.txt" 2>&1 || { cat "$work/out.txt"; exit 1; }
"$ferry" train "${model[@]}" --grad-accum 4 --resume "$work/ck" --summary "$work/r1.json" --save "$work/ck_r1" > "$work/out.txt"
/usr/bin/python3 - "$work" <<'PY'
import json, struct, sys
import numpy as np
work = sys.argv[1]
straight = json.load(open(f"{work}/one.json"))["steps"][2]["loss"]
def tensors(path):
    data = open(path, "rb").read()
    size = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + size])
    header.pop("__metadata__", None)
    return {name: np.frombuffer(data[8 + size + e["data_offsets"][0]:8 + size + e["data_offsets"][1]], dtype=np.float32)
            for name, e in header.items()}
expected = {f: tensors(f"{work}/ck_unchanged/latest/{f}.safetensors") for f in ("model", "optimizer")}
for name in ("r2", "r2o", "r1"):
    steps = json.load(open(f"{work}/{name}.json"))["steps"]
    assert [s["step"] for s in steps] == [3] and abs(steps[0]["loss"] - straight) <= 1e-6 * straight, (name, steps, straight)
    for f in ("model", "optimizer"):
        actual = tensors(f"{work}/ck_{name}/latest/{f}.safetensors")
        assert actual.keys() == expected[f].keys(), (name, f)
        for tensor, values in expected[f].items():
            difference = np.abs(actual[tensor] - values)
            if tensor.endswith("attn.c_attn.bias"):
                # The key bias (the middle third): its gradient is zero in exact arithmetic (softmax ignores a
                # shift shared by a row's scores), so AdamW moves it by rounding noise, of the order of lr,
                # whose sign any other summation order flips.
                third = difference.size // 3
                difference = np.concatenate([difference[:third], difference[2 * third:]])
            worst = float(np.max(difference))
            assert worst <= 1e-5 * max(float(np.max(np.abs(values))), 1e-30), (name, tensor, worst, float(np.max(np.abs(values))))
PY
# Resuming with a different global batch is refused.
# The error names the flags and values that would resume, not an internal name (micro_batches_per_step).
expect_error "the checkpoint's steps are 4 micro-batches each (--grad-accum x data-parallel ranks), this run's --grad-accum 2 x 1 ranks = 2; resume with --grad-accum 4 at these 1 data-parallel ranks, or 2 data-parallel ranks with --grad-accum 2" \
  "$ferry" train "${model[@]}" --grad-accum 2 --resume "$work/ck"

# torchrun's environment (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT, as
# torchrun sets them for each process it starts; Debian's torch 1.13 torchrun cannot start processes on
# Python 3.11): the ranks join through ompi-server and train as under mpirun, one rank's losses. A rank
# that never comes makes rank 0 fail within the timeout, naming it.
# Ports below Linux's ephemeral range (32768-60999, where MPI's own TCP connections bind) and apart from
# cli.rank_agreement's (10000-18999), which may run at the same time.
torchrun_like() {  # torchrun_like RANKS ARGS...: ferry once per rank with torchrun's variables
  local ranks=$1 port=$((20000 + RANDOM % 12000)) pids=() status=0; shift
  for ((rank = 0; rank < ranks; ++rank)); do
    RANK=$rank WORLD_SIZE=$ranks LOCAL_RANK=$rank LOCAL_WORLD_SIZE=$ranks MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
      timeout 300 "$ferry" "$@" > "$work/torchrun_$rank.txt" 2>&1 &
    pids+=($!)
  done
  for pid in "${pids[@]}"; do wait "$pid" || status=1; done
  return $status
}
torchrun_like 2 train "${model[@]}" --grad-accum 2 --zero-stage 1 --summary "$work/torchrun.json" ||
  { cat "$work"/torchrun_*.txt; exit 1; }
/usr/bin/python3 - "$work" <<'PY'
import json, sys
work = sys.argv[1]
expected = [s["loss"] for s in json.load(open(f"{work}/one.json"))["steps"]]
run = json.load(open(f"{work}/torchrun.json"))
actual = [s["loss"] for s in run["steps"]]
assert len(actual) == 3 and all(abs(a - e) <= 1e-6 * e for a, e in zip(actual, expected)), (actual, expected)
assert [r["dp"] for r in run["ranks"]] == [0, 1] and run["grid"]["world"] == 2, run["ranks"]
PY
if FERRY_COMM_TIMEOUT_SECONDS=3 RANK=0 WORLD_SIZE=2 LOCAL_RANK=0 LOCAL_WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 \
   MASTER_PORT=$((20000 + RANDOM % 12000)) timeout 60 "$ferry" train "${model[@]}" > "$work/out.txt" 2> "$work/err.txt"; then
  echo "rank 0 of 2 trained without rank 1"; exit 1
fi
grep -q "torchrun rendezvous: timed out waiting for rank 1 of 2 to connect" "$work/err.txt" || { echo "no error naming rank 1:"; cat "$work/err.txt"; exit 1; }
if pgrep -x ompi-server > /dev/null; then echo "ompi-server outlived the job"; exit 1; fi

# One rank gathers nothing: its all-gather bucket is said to have no effect.
"$ferry" train "${model[@]}" --steps 1 --allgather-bucket-size 1000 > "$work/one_rank.txt"
grep -q "note: allgather_bucket_size has no effect on one data-parallel rank" "$work/one_rank.txt"

# Bad grids: each error names the settings and the fix.
expect_error "needs 2 ranks, one process each: launch with \`mpirun -np 2" "$ferry" train "${model[@]}" --dp 2
expect_error "tensor parallelism is not built yet" "$ferry" train "${model[@]}" --tp 2
"$ferry" train "${model[@]}" --steps 1 --zero-stage 3 > "$work/one_rank.txt"  # ZeRO 3 itself: tests/cli/zero3_test.sh
grep -q "note: --zero-stage 3 (zero_optimization.stage) partitions nothing on one data-parallel rank" "$work/one_rank.txt"
# --device cuda on ranks without a GPU: a CPU-only build says it has no NCCL, a CUDA build that no GPU
# is visible (scripts/cuda_emulation.sh trains it on the emulated CUDA and NCCL).
if launch 2 train "${model[@]}" --device cuda > "$work/out.txt" 2> "$work/err.txt"; then echo "trained --device cuda on 2 ranks without a GPU"; exit 1; fi
grep -q -E -- "--device cuda on 2 ranks: this ferry was built without NCCL|no CUDA device" "$work/err.txt" || { echo "no error naming NCCL or the GPU:"; cat "$work/err.txt"; exit 1; }
echo '{"train_batch_size": 16, "train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 2}' > "$work/batch.json"
expect_error "train_batch_size 16 != .* 2 x 2 data-parallel ranks = 8" "$ferry" train --config "$work/batch.json" "${model[@]}" --device meta --dp 2
echo '{"zero_optimization": {"stage": 2, "reduce_bucket": 5}}' > "$work/zero.json"
expect_error "reduce_bucket" "$ferry" train --config "$work/zero.json" "${model[@]}"
if launch 2 train "${model[@]}" --dp 3 > "$work/out.txt" 2> "$work/err.txt"; then echo "accepted --dp 3 on 2 ranks"; exit 1; fi
grep -q -- "--dp 3 contradicts the job: 2 ranks" "$work/err.txt" || { echo "no error naming --dp:"; cat "$work/err.txt"; exit 1; }
# A rank killed mid-step ends the job at once, named by mpirun; a rank that stops answering makes the
# others fail within FERRY_COMM_TIMEOUT_SECONDS with an error naming the collective and the group.
rank_pid() {  # the process of world rank $1 among the running ferry trainings
  local pid
  for pid in $(pgrep -f "$ferry train" || true); do
    if tr '\0' '\n' < "/proc/$pid/environ" 2> /dev/null | grep -q "^OMPI_COMM_WORLD_RANK=$1\$"; then echo "$pid"; return; fi
  done
}
# State larger than one of the pieces a checkpoint moves between the device and the files (4M elements: this
# model has 14.2M): saved and read a piece at a time, at dp 1 (AdamW on the device) and dp 2 (ZeRO 1's
# partitions), the resumed steps' losses equal those of the run that never stopped, bit for bit (the third
# step's depends on the moments).
pieces=(--model gpt2 --layers 1 --vocab 8192 --batch 2 --seq 32 --lr 1e-3 --threads 1)
"$ferry" train "${pieces[@]}" --steps 3 --summary "$work/pieces_whole.json" > /dev/null
"$ferry" train "${pieces[@]}" --steps 3 --exit-interval 1 --save "$work/pieces_ck" > /dev/null
"$ferry" train "${pieces[@]}" --steps 3 --resume "$work/pieces_ck" --summary "$work/pieces_resumed.json" > /dev/null
launch 2 train "${pieces[@]}" --batch 1 --zero-stage 1 --steps 3 --summary "$work/pieces_dp_whole.json" > /dev/null
launch 2 train "${pieces[@]}" --batch 1 --zero-stage 1 --steps 3 --exit-interval 1 --save "$work/pieces_dp_ck" > /dev/null
launch 2 train "${pieces[@]}" --batch 1 --zero-stage 1 --steps 3 --resume "$work/pieces_dp_ck" --summary "$work/pieces_dp_resumed.json" > /dev/null
python3 - "$work" <<'PY'
import json, sys
def losses(name): return [s["loss"] for s in json.load(open(f"{sys.argv[1]}/{name}.json"))["steps"]]
for name, whole in (("pieces_resumed", "pieces_whole"), ("pieces_dp_resumed", "pieces_dp_whole")):
    assert len(losses(whole)) == 3 and losses(name) == losses(whole)[1:], (name, losses(name), losses(whole))
PY

interrupt_rank_1() {  # interrupt_rank_1 SIGNAL: starts a long dp 2 run, sends SIGNAL to rank 1, waits for the job
  local signal=$1 pid="" started
  FERRY_COMM_TIMEOUT_SECONDS=3 timeout 120 "$mpirun" --allow-run-as-root --oversubscribe -x FERRY_COMM_TIMEOUT_SECONDS -np 2 "$ferry" train \
    "${model[@]}" --steps 100000 --zero-stage 2 > "$work/long.out" 2> "$work/long.err" &
  local job=$!
  for _ in $(seq 100); do pid=$(rank_pid 1); [[ -n $pid ]] && grep -q "step" "$work/long.out" && break; sleep 0.2; done
  [[ -n $pid ]] || { echo "rank 1 never started"; cat "$work/long.err"; exit 1; }
  started=$SECONDS
  kill "-$signal" "$pid"
  status=0
  wait "$job" || status=$?
  [[ $status -ne 0 && $status -ne 124 ]] || { echo "after SIG$signal to rank 1 the job ended with $status"; cat "$work/long.err"; exit 1; }
  (( SECONDS - started <= 30 )) || { echo "the job took $((SECONDS - started)) s to fail after SIG$signal"; exit 1; }
}
interrupt_rank_1 KILL
grep -q "process rank 1 .* exited on signal 9" "$work/long.err" || { echo "no error naming the killed rank:"; cat "$work/long.err"; exit 1; }
interrupt_rank_1 STOP
grep -q "rank 0 of 2: .* over 2 ranks of the group of world ranks 0, 1 did not complete within 3000 ms" "$work/long.err" ||
  { echo "no error naming the stuck collective:"; cat "$work/long.err"; exit 1; }
echo "data parallel: ok"
