#!/usr/bin/env python3
"""The largest GPT this machine trains at a given per-rank device budget, dp 4 cpu ranks under mpirun:
ZeRO-Offload (stage 2, the optimizer state on the host), stage 3 with the optimizer state on the host, and
ZeRO-Infinity (stage 3 with the parameters and optimizer state on NVMe). For each, the deepest model of
one width whose dry run of every rank fits the budget (a binary search over --layers on meta), then one
real step under mpirun at that depth with --device-memory set to the budget, proving it fits; each rank's
model states at the peak beside DeepSpeed's estimators for the same configuration (model states only):
stage 2 offload 2 psi (its fp16 parameters; ferry's are fp32, so 4 psi), stage 3 4 x largest layer +
2 psi / dp, and with parameters offloaded 4 x largest layer alone. Then the real step's time split: the
parameter gathers' waits, the NVMe fetches not read ahead, and the optimizer's step.
Record the output in docs/benchmarks.md with `lscpu`'s model name.
Usage: benchmarks/zero_infinity_benchmark.py [FERRY] [BUDGET_MIB] [NVME_DIR] [ONLY] [START_LAYERS] [FIRST_HIGH]
(ONLY: run the configurations whose names contain it; START_LAYERS: a depth that fits, where each search
starts doubling; FIRST_HIGH: its first depth tried above that, default twice it)"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

ferry = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else "build/ferry")
budget_mib = float(sys.argv[2]) if len(sys.argv) > 2 else 32
nvme_root = sys.argv[3] if len(sys.argv) > 3 and sys.argv[3] else None
only = sys.argv[4] if len(sys.argv) > 4 else ""
start_layers = int(sys.argv[5]) if len(sys.argv) > 5 else 1
first_high = int(sys.argv[6]) if len(sys.argv) > 6 else 2 * start_layers
MiB = 2**20
budget = int(budget_mib * MiB)
dp = 4
shape = ["--model", "gpt2-tiny", "--hidden", "256", "--heads", "4", "--seq", "32", "--batch", "1", "--checkpointing", "full",
         "--threads", "1", "--lr", "1e-4", "--log-every", "100"]
configs = {
    "stage 2 + optimizer offload (ZeRO-Offload)": ["--zero-stage", "2", "--offload-optimizer", "cpu"],
    "stage 3 + optimizer offload": ["--zero-stage", "3", "--offload-optimizer", "cpu"],
    "stage 3 + parameter and optimizer offload to NVMe (ZeRO-Infinity)": ["--zero-stage", "3", "--offload-optimizer", "nvme", "--offload-param", "nvme"],
}


def dry_flags(flags):
    return [flag.replace("nvme", "cpu") if flag == "nvme" else flag for flag in flags]


def dry_run(work, layers, flags, steps=1):
    summary = f"{work}/dry.json"
    result = subprocess.run([ferry, "train", *shape, "--layers", str(layers), *dry_flags(flags), "--device", "meta", "--dp", str(dp),
                             "--steps", str(steps), "--summary", summary], capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(result.stderr)
    return json.load(open(summary))


def fits(work, layers, flags):
    # The two steps the real run takes: a second step can reserve more than the first (the cache the
    # first left), and a run that reaches the limit frees its cache and goes on, no longer as predicted.
    return max(rank["peak_reserved"] for rank in dry_run(work, layers, flags, steps=2)["ranks"]) <= budget


def deepest(work, flags):
    low, high = start_layers, first_high
    if not fits(work, low, flags):
        return 0
    while fits(work, high, flags):
        low, high = high, high * 2
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (middle, high) if fits(work, middle, flags) else (low, middle)
    return low


def deepspeed_estimate(name, psi, largest):
    if "Infinity" in name:
        return 4 * largest
    if "stage 3" in name:
        return 4 * largest + 2 * psi / dp
    return 2 * psi


with tempfile.TemporaryDirectory(dir=nvme_root) as work:
    for name, flags in configs.items():
        if only not in name:
            continue
        layers = deepest(work, flags)  # by dry runs of the real run's two steps
        predicted = dry_run(work, layers, flags, steps=2)
        psi = predicted["model"]["parameters"]
        largest = predicted["ranks"][0]["optimizer"]["memory_bound"].get("parameters", {}).get("largest_parameter_elements", 256 * 256)
        summary = f"{work}/run.json"
        nvme = ["--nvme-path", f"{work}/nvme"] if "nvme" in flags else []
        command = ["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", str(dp), ferry, "train", *shape, "--layers", str(layers), *flags,
                   *nvme, "--device-memory", f"{budget_mib}MiB", "--steps", "2", "--summary", summary]
        result = subprocess.run(command, capture_output=True, text=True)
        if result.returncode != 0:
            print(result.stdout[-3000:], result.stderr[-3000:])
            raise SystemExit(f"{name}: {layers} layers did not train in {budget_mib} MiB")
        run = json.load(open(summary))
        shutil.rmtree(f"{work}/nvme", ignore_errors=True)
        ranks = run["ranks"]
        states = max(sum(rank["max_by_category"][c] for c in ("parameters", "gradients", "optimizer_states")) for rank in ranks)
        reserved = max(rank["peak_reserved"] for rank in ranks)
        exact = all(p["peak_reserved"] == m["peak_reserved"] for p, m in zip(predicted["ranks"], ranks))
        seconds = run["ranks"][0]["optimizer"]["last_step_seconds"]
        step = run["steps"][-1]["seconds"]
        print(f"{name}: {layers} layers, {psi / 1e6:.1f}M parameters, {16 * psi / 2**30:.2f} GiB of state at 16 B/parameter "
              f"({16 * psi / (dp * budget):.1f}x the {dp} ranks' {budget_mib:g} MiB) | peak reserved {reserved / MiB:.2f} MiB "
              f"(dry run {'exact' if exact else 'DIFFERS'}) | model states (most of each category at once) {states / MiB:.2f} MiB, DeepSpeed's estimator "
              f"{deepspeed_estimate(name, psi, largest) / MiB:.2f} MiB | step {step:.2f} s: gather wait {seconds.get('parameter_gather_wait', 0):.2f}, "
              f"NVMe fetch {seconds.get('parameter_fetch', 0):.2f}, optimizer {seconds.get('step', 0):.2f} "
              f"(read wait {seconds.get('read_wait', 0):.2f}, write wait {seconds.get('write_wait', 0):.2f})", flush=True)
