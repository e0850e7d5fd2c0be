#!/usr/bin/env bash
# ZeRO-Infinity's parameter offload under mpirun (more ranks than cores): --offload-param cpu and nvme
# keep each stage-3 rank's partition in pinned host memory or an NVMe file, and the device holds only
# the gathered layers. dp 2 and 4 train one rank's losses (resharding on and off, recompute full and
# selective, bf16; a dp 2 x pp 2 pipeline in zero3_test.sh); each rank's parameter bytes at most at once are the stated
# working set exactly, with no partition on the device; the dry run of every rank predicts each rank's
# peaks byte for byte; the NVMe home holds its buffers and no more host memory; checkpoints are stage 3's
# byte for byte and resume into parameter offload; ranks that disagree and impossible settings are refused.
source "$(dirname "$0")/common.sh"
source "$(dirname "$0")/stage3_runs.sh"
nvme=(--offload-optimizer nvme --offload-param nvme --nvme-path "$work/nvme")

"$ferry" train "${model[@]}" --grad-accum 4 --summary "$work/one.json" > /dev/null
"$ferry" train "${model[@]}" --grad-accum 4 --precision bf16 --summary "$work/one_bf16.json" > /dev/null
run device 2 --grad-accum 2 --zero-stage 3 --offload-optimizer cpu
run cpu 2 --grad-accum 2 --zero-stage 3 --offload-optimizer cpu --offload-param cpu
grep -q "parameters offloaded to cpu: the partition's .* in host memory" "$work/out.txt" || { cat "$work/out.txt"; exit 1; }
run nvme 2 --grad-accum 2 --zero-stage 3 "${nvme[@]}"
grep -q "parameters offloaded to nvme: the partition's .* in a file on NVMe, read and written through .* of host buffers" "$work/out.txt" ||
  { cat "$work/out.txt"; exit 1; }
grep -q "parameters, most at once .* = partition 0 B (it lives on nvme) + gathered" "$work/out.txt" || { cat "$work/out.txt"; exit 1; }
run kept 2 --grad-accum 2 --zero-stage 3 "${nvme[@]}" --reshard-after-forward false
run full 2 --grad-accum 2 --zero-stage 3 "${nvme[@]}" --checkpointing full
run selective 2 --grad-accum 2 --zero-stage 3 --offload-optimizer cpu --offload-param cpu --checkpointing selective
run dp4 4 --grad-accum 1 --zero-stage 3 "${nvme[@]}" --offload-param-buffer-count 2 --offload-param-buffer-size 1MiB
run bf16 2 --grad-accum 2 --zero-stage 3 "${nvme[@]}" --precision bf16
run single 1 --grad-accum 4 --zero-stage 3 "${nvme[@]}"  # one rank: its partition is the whole model, off the device
"$ferry" train "${model[@]}" --grad-accum 4 --zero-stage 3 "${nvme[@]}" --summary "$work/alone.json" > "$work/out.txt" 2>&1 ||
  { cat "$work/out.txt"; exit 1; }  # without a launcher

/usr/bin/python3 - "$work" "$(dirname "$0")" <<'PY'
import sys
sys.path.insert(0, sys.argv[2])
from summaries import Summaries, round512
summaries = Summaries(sys.argv[1])
load, losses_match = summaries.load, summaries.losses_match
for name in ("cpu", "nvme", "kept", "full", "selective", "dp4", "single", "alone"):
    losses_match(name, "one", 1e-6)
losses_match("bf16", "one_bf16", 1e-4)
for key in ("peak_reserved", "max_by_category"):  # one rank without a launcher holds what one under mpirun does
    assert load("alone")["ranks"][0][key] == load("single")["ranks"][0][key], key
for name in ("cpu", "nvme", "kept", "full", "selective", "dp4", "bf16", "single"):
    run = load(name)
    home = "cpu" if name in ("cpu", "selective") else "nvme"
    element = 2 if name == "bf16" else 4
    assert run["run"]["offload_param"] == home, run["run"]
    for rank, predicted in zip(run["ranks"], load(name + ".meta")["ranks"]):
        bound, offload = rank["optimizer"]["memory_bound"]["parameters"], rank["optimizer"]["parameter_offload"]
        # No partition on the device: the parameters there are the gathered working set, exactly.
        assert bound["offloaded"] == home and bound["partition"] == 0, (name, bound)
        assert bound["exact"] and rank["max_by_category"]["parameters"] == bound["total"] == bound["gathered"], (name, rank["rank"], bound)
        # The home holds the partition's bytes; on NVMe, host memory is its buffers alone.
        partition = element * rank["optimizer"]["owned_elements"]
        assert offload["device"] == home and offload["partition_bytes"] == partition, (name, offload, partition)
        if home == "cpu":
            assert offload["host_bytes"] == partition and offload["nvme_bytes"] == 0, (name, offload)
        else:
            chunks = -(-partition // (1 << 20)) * (1 << 20)
            count, size = (2, 1 << 20) if name == "dp4" else (5, min(16 << 20, chunks))
            assert offload["host_bytes"] == count * size and offload["nvme_bytes"] == partition, (name, offload, partition)
        assert offload["host_pinned_peak"] == offload["host_bytes"], (name, offload)
        # The dry run of every rank in one process predicts every rank's memory and traffic byte for byte.
        for key in ("peak_allocated", "peak_reserved", "max_by_category", "at_peak", "bytes_sent"):
            assert predicted[key] == rank[key], (name, rank["rank"], key, predicted[key], rank[key])
# Offloading the parameters takes the partition off the device and changes nothing else there.
for device, offloaded in zip(load("device")["ranks"], load("cpu")["ranks"]):
    partition = device["optimizer"]["memory_bound"]["parameters"]["partition"]
    assert partition == round512(4 * device["optimizer"]["owned_elements"]), device["optimizer"]["memory_bound"]
    assert offloaded["max_by_category"]["parameters"] == device["max_by_category"]["parameters"] - partition, (device["max_by_category"], offloaded["max_by_category"])
    assert offloaded["peak_allocated"] == device["peak_allocated"] - partition, (device["peak_allocated"], offloaded["peak_allocated"])
    assert offloaded["bytes_sent"] == device["bytes_sent"]
PY

# ZeRO-Infinity's anchor, state per device byte (1T parameters' 16 TB on a DGX-2's 512 GB, about 31x):
# 4 ranks train a 192-block GPT of 38M parameters (610 MB of state at 16 bytes a parameter) with 4.5 MiB
# of --device-memory each, 32x the four devices together, on one rank's losses. What a rank's device
# holds: two gathered blocks, a few gradient buckets, and full recompute's block inputs (8 KiB a block).
deep=(--model gpt2-tiny --layers 192 --seq 16 --batch 1 --steps 2 --lr 1e-3 --threads 1 --log-every 100)
"$ferry" train "${deep[@]}" --grad-accum 4 --summary "$work/deep_one.json" > /dev/null
launch 4 train "${deep[@]}" --checkpointing full --zero-stage 3 "${nvme[@]}" --device-memory 4.5MiB --summary "$work/deep.json" \
  > "$work/out.txt" 2>&1 || { cat "$work/out.txt"; exit 1; }
/usr/bin/python3 - "$work" "$(dirname "$0")" <<'PY'
import sys
sys.path.insert(0, sys.argv[2])
from summaries import Summaries
summaries = Summaries(sys.argv[1])
summaries.losses_match("deep", "deep_one", 1e-6, steps=2)
run = summaries.load("deep")
device_memory = 4.5 * 2**20
assert 16 * run["model"]["parameters"] >= 32 * 4 * device_memory, run["model"]
assert all(rank["peak_reserved"] <= device_memory for rank in run["ranks"]), [rank["peak_reserved"] for rank in run["ranks"]]
PY

# Checkpoints: parameter offload's files are stage 3's byte for byte; a stage-3 checkpoint resumes into
# parameter offload on the losses one rank resumes.
ckpt=(--steps 2 --grad-accum 2 --zero-stage 3 --offload-optimizer cpu)
launch 2 train "${model[@]}" "${ckpt[@]}" --save "$work/plain" > "$work/out.txt" 2>&1 || { cat "$work/out.txt"; exit 1; }
launch 2 train "${model[@]}" "${ckpt[@]}" --offload-param cpu --save "$work/offloaded" > "$work/out.txt" 2>&1 || { cat "$work/out.txt"; exit 1; }
for file in model.safetensors optimizer.safetensors; do
  cmp "$work/plain/step-00000002/$file" "$work/offloaded/step-00000002/$file" || { echo "parameter offload's $file differs from stage 3's"; exit 1; }
done
"$ferry" train "${model[@]}" --steps 4 --grad-accum 4 --offload-optimizer cpu --resume "$work/plain" --summary "$work/resumed_one.json" > /dev/null
launch 2 train "${model[@]}" --steps 4 --grad-accum 2 --zero-stage 3 "${nvme[@]}" --resume "$work/plain" --summary "$work/resumed.json" \
  > "$work/out.txt" 2>&1 || { cat "$work/out.txt"; exit 1; }
/usr/bin/python3 - "$work" <<'PY'
import json, sys
load = lambda name: json.load(open(f"{sys.argv[1]}/{name}.json"))
one, offloaded = ([s["loss"] for s in load(name)["steps"]] for name in ("resumed_one", "resumed"))
assert len(one) == len(offloaded) == 2 and all(abs(a - b) <= 1e-6 * abs(a) for a, b in zip(one, offloaded)), (one, offloaded)
PY

# Ranks launched with and without parameter offload stop before step 1, each naming the setting.
if FERRY_COMM_TIMEOUT_SECONDS=20 timeout 120 "$mpirun" --allow-run-as-root --oversubscribe \
     -np 1 "$ferry" train "${model[@]}" --zero-stage 3 --offload-optimizer cpu --offload-param cpu : \
     -np 1 "$ferry" train "${model[@]}" --zero-stage 3 --offload-optimizer cpu > "$work/out.txt" 2> "$work/err.txt"; then
  echo "ranks with and without --offload-param trained"; exit 1
fi
grep -q -- "the ranks were launched with different settings: --offload-param" "$work/err.txt" || { cat "$work/err.txt"; exit 1; }

# DeepSpeed's offload_param section sets it (max_in_cpu, and buffers for a cpu home, said to have no effect).
cat > "$work/infinity.json" <<'JSON'
{"zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu"},
                       "offload_param": {"device": "cpu", "pin_memory": true, "buffer_count": 4, "max_in_cpu": 1e9}}}
JSON
"$ferry" train --config "$work/infinity.json" "${model[@]}" --steps 1 --device meta --dp 2 --summary "$work/config.json" > "$work/out.txt"
grep -q "note: zero_optimization.offload_param.max_in_cpu has no effect" "$work/out.txt"
grep -q "note: --offload-param-buffer-count and --offload-param-buffer-size .* have no effect without --offload-param nvme" "$work/out.txt"
/usr/bin/python3 -c "import json,sys; run = json.load(open(sys.argv[1]))['run']; assert run['offload_param'] == 'cpu', run" "$work/config.json"

# The host holds the optimizer's state once, also while it starts, saves a checkpoint and resumes from one:
# a rank's initial shard, its checkpoint's pieces and the pieces it loads go a sub-group at a time, never
# whole beside the state (then 12 bytes a parameter more: 2.41 GB resident here at the start, 2.23 GB
# with a save, 1.70 GB resuming, against 0.93 GB pinned). 53.5M parameters: the resident peak stays within
# the pinned bytes + 600 MiB (the binary, the cpu device's memory, the data).
resident=(--model gpt2 --layers 2 --precision bf16 --batch 1 --seq 64 --threads 1 --zero-stage 3 --offload-optimizer cpu --offload-param cpu)
"$ferry" train "${resident[@]}" --steps 1 --save "$work/resident_save" --summary "$work/resident.json" > /dev/null
"$ferry" train "${resident[@]}" --steps 2 --resume "$work/resident_save" --summary "$work/resident_resumed.json" > /dev/null
python3 - "$work/resident.json" "$work/resident_resumed.json" <<'PY'
import json, sys
for path, what in zip(sys.argv[1:3], ["start and save", "resume"]):
    memory = json.load(open(path))["memory"]
    resident, pinned = memory["host_peak_resident"], memory["host_pinned_peak"]
    print(f"ZeRO-Infinity host ({what}): resident peak {resident / 2**20:.0f} MiB, pinned {pinned / 2**20:.0f} MiB")
    assert 0 < pinned < resident <= pinned + 600 * 2**20, (what, resident, pinned)
PY

# Settings that cannot work name the fix.
expect_error "add --zero-stage 3" "$ferry" train "${model[@]}" --zero-stage 2 --offload-optimizer cpu --offload-param cpu --device meta --dp 2
expect_error "needs --offload-optimizer cpu or nvme" "$ferry" train "${model[@]}" --zero-stage 3 --offload-param cpu --device meta --dp 2
expect_error "offload-param nvme needs --nvme-path" "$ferry" train "${model[@]}" --zero-stage 3 --offload-optimizer cpu --offload-param nvme
expect_error "not one of none, cpu, nvme" "$ferry" train "${model[@]}" --zero-stage 3 --offload-optimizer cpu --offload-param disk
expect_error "less than one 1.00 MiB I/O chunk" "$ferry" train "${model[@]}" --zero-stage 3 "${nvme[@]}" --offload-param-buffer-size 4KiB
echo "ZeRO-Infinity: one rank's losses with the parameters on the host or NVMe, the device holding only the gathered layers"
