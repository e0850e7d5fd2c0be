#!/usr/bin/env bash
# `ferry train --device cuda` on the emulated CUDA and NCCL (build-sanitize/ferry-emulated, from
# scripts/cuda_emulation.sh): one GPU, and data-parallel GPUs under mpirun at ZeRO 0, 1 and 2, with fp16
# loss scaling, bf16, ZeRO-Offload and a checkpoint resumed, pipelines of GPUs (pp 2, dp 2 x pp 2), a trace
# replayed through the GPU's allocator, each against the cpu device's losses from the same
# binary (the kernel twins' tolerance), and each rank's peaks against the dry run with cuda kernel sizes,
# byte for byte. Usage: FERRY=build-sanitize/ferry-emulated tests/cli/cuda_emulated_test.sh
source "$(dirname "$0")/common.sh"
# The emulator runs each launch once, in order (the kernel tests try the other orders); Open MPI's
# allocations at MPI_Init are kept to exit (scripts/cuda_emulation.sh says why leaks are not checked).
export FERRY_CUDA_EMULATION_ORDERS=forward ASAN_OPTIONS=detect_leaks=0:abort_on_error=1
launch() {  # launch RANKS ARGS...: ferry-emulated under mpirun
  local ranks=$1; shift
  timeout 600 mpirun --allow-run-as-root --oversubscribe -np "$ranks" -x FERRY_CUDA_EMULATION_ORDERS -x ASAN_OPTIONS -x FERRY_CUDA_COLLECTIVES "$ferry" "$@"
}
model=(--model gpt2-tiny --steps 2 --batch 2 --seq 32 --lr 1e-3 --threads 1)

"$ferry" --version | grep -q "CUDA: emulated"

# same_losses TOLERANCE A.json B.json: every step's loss within TOLERANCE relative.
same_losses() {
  python3 - "$@" <<'PY'
import json, sys
tolerance, a, b = float(sys.argv[1]), json.load(open(sys.argv[2])), json.load(open(sys.argv[3]))
la, lb = [s["loss"] for s in a["steps"]], [s["loss"] for s in b["steps"]]
assert len(la) == len(lb) and la, (la, lb)
for x, y in zip(la, lb):
    assert abs(x - y) <= tolerance * abs(y), f"{sys.argv[2]} {la} against {sys.argv[3]} {lb}: beyond {tolerance} relative"
PY
}

# same_peaks MEASURED.json DRY.json: each rank's peaks and per-category maxima equal the dry run's.
same_peaks() {
  python3 - "$@" <<'PY'
import json, sys
measured, dry = json.load(open(sys.argv[1]))["ranks"], json.load(open(sys.argv[2]))["ranks"]
assert len(measured) == len(dry), (len(measured), len(dry))
for m, d in zip(measured, dry):
    for key in ("peak_allocated", "peak_reserved", "max_by_category"):
        assert m[key] == d[key], f"{sys.argv[1]} rank {m.get('dp')}: {key} {m[key]} measured, {d[key]} by the dry run"
PY
}

# One GPU against the cpu device.
"$ferry" train "${model[@]}" --device cuda --summary "$work/cuda.json" > /dev/null
"$ferry" train "${model[@]}" --device cpu --summary "$work/cpu.json" > /dev/null
same_losses 1e-5 "$work/cuda.json" "$work/cpu.json"

# One GPU at ZeRO 3 with the parameters and the optimizer offloaded (ZeRO-Infinity at dp 1): its one-rank
# collectives are copies on the device (a host memcpy of device memory crashed a real GPU), the cpu's losses.
"$ferry" train "${model[@]}" --device cuda --zero-stage 3 --offload-param cpu --offload-optimizer cpu --summary "$work/infinity_cuda.json" > /dev/null
"$ferry" train "${model[@]}" --device cpu --zero-stage 3 --offload-param cpu --offload-optimizer cpu --summary "$work/infinity_cpu.json" > /dev/null
same_losses 1e-5 "$work/infinity_cuda.json" "$work/infinity_cpu.json"
python3 -c 'import json, sys; r = json.load(open(sys.argv[1]))["ranks"]; assert [e["communication_backend"] for e in r] == ["host-staged"], r' "$work/infinity_cuda.json"

# dp 2 at each ZeRO stage (3: parameters gathered by NCCL from the ranks' partitions): the cpu device's losses;
# the dry run's peaks on every rank.
for stage in 0 1 2 3; do
  launch 2 train "${model[@]}" --device cuda --zero-stage "$stage" --summary "$work/cuda_$stage.json" > /dev/null
  launch 2 train "${model[@]}" --device cpu --zero-stage "$stage" --summary "$work/cpu_$stage.json" > /dev/null
  same_losses 1e-5 "$work/cuda_$stage.json" "$work/cpu_$stage.json"
  "$ferry" train "${model[@]}" --device meta --dry-run-of cuda --dp 2 --zero-stage "$stage" --summary "$work/dry_$stage.json" > /dev/null
  same_peaks "$work/cuda_$stage.json" "$work/dry_$stage.json"
done
# Each GPU rank's communication stream time is in the summary (NCCL's; the cpu device's MPI groups have none).
python3 - "$work/cuda_2.json" "$work/cpu_2.json" <<'PY'
import json, sys
cuda, cpu = (json.load(open(path))["ranks"] for path in sys.argv[1:])
assert all(isinstance(r["communication_stream_seconds"], float) and r["communication_stream_seconds"] > 0 for r in cuda), cuda
assert all(r["communication_stream_seconds"] is None for r in cpu), cpu
PY
# ... and in the profile: each rank's NCCL operations are ops on a communication track of their own
# (the dp group's, stream 101), inside the run, and trace.json names the track.
launch 2 train "${model[@]}" --device cuda --zero-stage 2 --profile "$work/nccl_profile" > /dev/null
"$ferry" report "$work/nccl_profile" > /dev/null
python3 - "$work/nccl_profile" <<'PY'
import json, os, sys
for rank in (0, 1):
    profile = json.load(open(os.path.join(sys.argv[1], f"rank-{rank}", "profile.json")))
    ops = [dict(zip(profile["ops_columns"], op)) for op in profile["ops"]]
    sent = [op for op in ops if op["kind"] == "communication"]
    assert sent and all(op["stream"] == 101 and op["start_ns"] <= op["end_ns"] for op in sent), sent[:3]
    compute = [op for op in ops if op["kind"] != "communication"]
    first, last = min(op["start_ns"] for op in compute), max(op["end_ns"] for op in compute)
    assert all(first <= op["start_ns"] and op["end_ns"] <= last + 10**9 for op in sent), (first, last, sent[:3])
events = json.load(open(os.path.join(sys.argv[1], "trace.json")))["traceEvents"]
tracks = {(e["pid"], e["tid"]) for e in events if e["name"] == "thread_name" and e["args"]["name"] == "stream 101 (communication)"}
assert tracks == {(0, 101), (1, 101)}, tracks
assert any(e["ph"] == "X" and e["tid"] == 101 and e["cat"] == "communication" for e in events)
PY
# The gradients did cross: one rank's losses alone are another run's.
python3 - "$work/cuda_0.json" "$work/cuda.json" <<'PY'
import json, sys
two, one = ([s["loss"] for s in json.load(open(p))["steps"]] for p in sys.argv[1:])
assert two[1:] != one[1:], "dp 2 trained as one rank"
PY

# Device buffers through host memory over MPI (FERRY_CUDA_COLLECTIVES=host: ranks may share a GPU, as on
# a one-GPU machine): dp 2 at ZeRO 2 and pp 2 give the NCCL runs' losses and the dry run's peaks.
FERRY_CUDA_COLLECTIVES=host launch 2 train "${model[@]}" --device cuda --zero-stage 2 --summary "$work/staged_2.json" > /dev/null
same_losses 1e-6 "$work/staged_2.json" "$work/cuda_2.json"
same_peaks "$work/staged_2.json" "$work/dry_2.json"
FERRY_CUDA_COLLECTIVES=host launch 2 train "${model[@]}" --device cuda --pp 2 --summary "$work/staged_pp.json" > /dev/null
launch 2 train "${model[@]}" --device cuda --pp 2 --summary "$work/nccl_pp.json" > /dev/null
same_losses 1e-6 "$work/staged_pp.json" "$work/nccl_pp.json"
python3 - "$work/staged_2.json" "$work/staged_pp.json" "$work/cuda_2.json" <<'PY'
import json, sys
for path, backend in zip(sys.argv[1:], ("host-staged", "host-staged", "nccl")):
    ranks = json.load(open(path))["ranks"]
    assert [r["communication_backend"] for r in ranks] == [backend] * 2, (path, [r["communication_backend"] for r in ranks])
    assert all(r["bytes_sent"] > 0 for r in ranks), (path, [r["bytes_sent"] for r in ranks])
PY
expect_error "FERRY_CUDA_COLLECTIVES=shm is not a choice" env FERRY_CUDA_COLLECTIVES=shm mpirun --allow-run-as-root --oversubscribe -np 2 -x FERRY_CUDA_COLLECTIVES "$ferry" train "${model[@]}" --device cuda

# fp16 with loss scaling, and ZeRO-Offload to pinned host memory, at stage 2.
launch 2 train "${model[@]}" --device cuda --precision fp16 --zero-stage 2 --summary "$work/fp16_cuda.json" > /dev/null
launch 2 train "${model[@]}" --device cpu --precision fp16 --zero-stage 2 --summary "$work/fp16_cpu.json" > /dev/null
same_losses 1e-4 "$work/fp16_cuda.json" "$work/fp16_cpu.json"
# bf16 (the LM head reads the bf16 table in place, backward products on bf16 operands): one GPU (the
# table's gradient whole) and dp 2 at stage 2 (streamed in slices), the cpu's losses within bf16's
# reach, the dry run's peaks on every rank.
"$ferry" train "${model[@]}" --device cuda --precision bf16 --summary "$work/bf16_cuda.json" > /dev/null
"$ferry" train "${model[@]}" --device cpu --precision bf16 --summary "$work/bf16_cpu.json" > /dev/null
same_losses 2e-3 "$work/bf16_cuda.json" "$work/bf16_cpu.json"
"$ferry" train "${model[@]}" --device meta --dry-run-of cuda --precision bf16 --summary "$work/bf16_dry.json" > /dev/null
same_peaks "$work/bf16_cuda.json" "$work/bf16_dry.json"
launch 2 train "${model[@]}" --device cuda --precision bf16 --zero-stage 2 --summary "$work/bf16_dp_cuda.json" > /dev/null
launch 2 train "${model[@]}" --device cpu --precision bf16 --zero-stage 2 --summary "$work/bf16_dp_cpu.json" > /dev/null
same_losses 2e-3 "$work/bf16_dp_cuda.json" "$work/bf16_dp_cpu.json"
"$ferry" train "${model[@]}" --device meta --dry-run-of cuda --precision bf16 --dp 2 --zero-stage 2 --summary "$work/bf16_dp_dry.json" > /dev/null
same_peaks "$work/bf16_dp_cuda.json" "$work/bf16_dp_dry.json"
launch 2 train "${model[@]}" --device cuda --offload-optimizer cpu --zero-stage 2 --summary "$work/offload_cuda.json" > /dev/null
launch 2 train "${model[@]}" --device cpu --offload-optimizer cpu --zero-stage 2 --summary "$work/offload_cpu.json" > /dev/null
same_losses 1e-5 "$work/offload_cuda.json" "$work/offload_cpu.json"

# A checkpoint saved by two GPUs resumes, as the cpu device's does.
for device in cuda cpu; do
  launch 2 train "${model[@]}" --device "$device" --steps 1 --zero-stage 1 --save "$work/ckpt_$device" > /dev/null
  launch 2 train "${model[@]}" --device "$device" --zero-stage 1 --resume "$work/ckpt_$device" --summary "$work/resumed_$device.json" > /dev/null
done
same_losses 1e-5 "$work/resumed_cuda.json" "$work/resumed_cpu.json"

# Pipelines of GPUs: pp 2, and dp 2 x pp 2 at ZeRO 1, give the cpu device's losses and the dry run's peaks
# on every rank (stage tensors by NCCL's send and receive, the tied table's gradient summed through host
# memory); pp 2 with fp16 scaling and the optimizer offloaded to the host gives the cpu device's losses.
for grid in "2 --pp 2" "4 --pp 2 --dp 2 --zero-stage 1 --micro-batches 4"; do
  read -r ranks flags <<< "$grid"
  # shellcheck disable=SC2086
  launch "$ranks" train "${model[@]}" --device cuda $flags --summary "$work/pipe_cuda.json" > /dev/null
  # shellcheck disable=SC2086
  launch "$ranks" train "${model[@]}" --device cpu $flags --summary "$work/pipe_cpu.json" > /dev/null
  same_losses 1e-5 "$work/pipe_cuda.json" "$work/pipe_cpu.json"
  # shellcheck disable=SC2086
  "$ferry" train "${model[@]}" --device meta --dry-run-of cuda $flags --summary "$work/pipe_dry.json" > /dev/null
  same_peaks "$work/pipe_cuda.json" "$work/pipe_dry.json"
done
for device in cuda cpu; do
  launch 2 train "${model[@]}" --device "$device" --pp 2 --precision fp16 --offload-optimizer cpu --summary "$work/pipe_fp16_$device.json" > /dev/null
done
same_losses 1e-4 "$work/pipe_fp16_cuda.json" "$work/pipe_fp16_cpu.json"
# A dp 2 x pp 2 checkpoint (ZeRO 2) of GPUs resumes on pp 2 alone, as the cpu device's does.
for device in cuda cpu; do
  launch 4 train "${model[@]}" --device "$device" --pp 2 --dp 2 --zero-stage 2 --steps 1 --save "$work/pipe_ckpt_$device" > /dev/null
  launch 2 train "${model[@]}" --device "$device" --pp 2 --grad-accum 2 --resume "$work/pipe_ckpt_$device" \
    --summary "$work/pipe_resumed_$device.json" > /dev/null
done
same_losses 1e-5 "$work/pipe_resumed_cuda.json" "$work/pipe_resumed_cpu.json"
# A trace replayed through the GPU's own allocator (--device cuda: cudaMalloc segments) peaks as on meta.
trace="$(dirname "$0")/../../data/traces/gpt2-tiny-train.csv"
for device in cuda meta; do
  "$ferry" replay "$trace" --device "$device" --alloc-conf expandable_segments:False --summary "$work/replay_$device.json" > /dev/null
done
python3 - "$work/replay_cuda.json" "$work/replay_meta.json" <<'PY'
import json, sys
cuda, meta = (json.load(open(path)) for path in sys.argv[1:])
assert cuda["device"] == "cuda" and cuda["completed"] and cuda["num_device_alloc"] > 0, cuda
for key in ("peak_requested", "peak_allocated", "peak_reserved", "num_device_alloc"):
    assert cuda[key] == meta[key], f"replay on cuda: {key} {cuda[key]}, on meta {meta[key]}"
PY
echo "cuda_emulated_test: passed"
