#!/usr/bin/env bash
# ZeRO-Offload on gpt2 (124M, bf16): the unlimited non-offloaded run beside --offload-optimizer cpu and
# nvme under a device limit of 1/5 of the 16 bytes per parameter, then the pipelined NVMe step beside
# its parts alone (offload_step_benchmark). Usage: benchmarks/offload_benchmark.sh BUILD_DIR NVME_DIR [STEPS]
set -euo pipefail
build=${1:?build directory}; nvme=${2:?a directory on the drive to test}; steps=${3:-3}
out=$(mktemp -d); trap 'rm -rf "$out"' EXIT
limit=$(( 124439808 * 16 / 5 ))
common=(--model gpt2 --precision bf16 --batch 1 --seq 64 --steps "$steps" --threads 2 --log-every 100)
"$build/ferry" train "${common[@]}" --summary "$out/none.json" > /dev/null
"$build/ferry" train "${common[@]}" --device-memory "$limit" --offload-optimizer cpu --summary "$out/cpu.json" > /dev/null
"$build/ferry" train "${common[@]}" --device-memory "$limit" --offload-optimizer nvme --nvme-path "$nvme" --summary "$out/nvme.json" > /dev/null
/usr/bin/python3 - "$out" "$limit" <<'PY'
import json, sys
out, limit = sys.argv[1], int(sys.argv[2])
mib = lambda b: f"{b / 2**20:,.1f} MiB"
runs = {m: json.load(open(f"{out}/{m}.json")) for m in ["none", "cpu", "nvme"]}
print(f"device limit {limit:,} B = {mib(limit)} (1/5 of 16 B x 124,439,808 parameters) for the offloaded runs")
print("| mode | device limit | peak reserved | parameters | gradients | optimizer states | host pinned peak | NVMe | tok/s | optimizer step s |")
print("|---|---|---|---|---|---|---|---|---|---|")
for mode, run in runs.items():
    m, d = run["memory"], run["model_states"]["device_at_peak"]
    step = run.get("optimizer", {}).get("last_step_seconds", {}).get("step")
    print(f"| {mode} | {'none' if mode == 'none' else mib(limit)} | {mib(m['peak_reserved'])} | {mib(d['parameters'])} | {mib(d['gradients'])} | "
          f"{mib(d['optimizer_states'])} | {mib(m['host_pinned_peak'])} | {mib(m['nvme_bytes'])} | {run['tokens_per_second']:.1f} | "
          f"{'' if step is None else f'{step:.3f}'} |")
losses = {m: [s["loss"] for s in r["steps"]] for m, r in runs.items()}
print("losses:", losses["none"])
print("bitwise equal to none:", {m: losses[m] == losses["none"] for m in ["cpu", "nvme"]})
f = runs["cpu"]["model_states"]["formula"]
print(f"ZeRO-Offload formula on the device: parameters {mib(f['parameters'])}, gradients 0, optimizer states 0; host {mib(f['host']['optimizer_states'])} state + {mib(f['host']['gradients'])} fp32 gradients")
PY
mkdir -p "$nvme/step-benchmark"
"$build/benchmarks/offload_step_benchmark" "$nvme/step-benchmark" 124439808 5592405 4 2
rmdir "$nvme/step-benchmark" 2> /dev/null || true
