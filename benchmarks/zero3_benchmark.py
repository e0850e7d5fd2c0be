#!/usr/bin/env python3
"""ZeRO 3 beside ZeRO 2 at default settings, by dry runs of every rank on meta (rank 0 shown), from
gpt2-tiny to gpt2-xl at dp 2 and 4 in fp32 and bf16: each stage's peak reserved, stage 3's saving beside
ZeRO's formula for it (the parameters' P x psi x (1 - 1/dp), P = 4 in fp32, 2 in bf16), its parameter
bytes at most at once (partition + gathered working set) without and with --reshard-after-forward, the
model states at the peak beside DeepSpeed's stage-3 estimator (4 x the largest layer + 18 x psi / dp,
model states only), and the bytes each rank sends per step against stage 2's.
Record the output in docs/benchmarks.md.
Usage: benchmarks/zero3_benchmark.py [FERRY] [extra train flags...]"""
import json
import subprocess
import sys
import tempfile

from zero_shapes import shapes

ferry = sys.argv[1] if len(sys.argv) > 1 else "build/ferry"
extra = sys.argv[2:]
MiB = 2**20


def dry_run(work, flags):
    summary = f"{work}/summary.json"
    subprocess.run([ferry, "train", *flags, "--device", "meta", "--steps", "1", "--summary", summary, *extra], check=True, capture_output=True)
    return json.load(open(summary))


with tempfile.TemporaryDirectory() as work:
    for name, flags in shapes.items():
        for precision in ("fp32", "bf16"):
            for dp in (2, 4):
                common = [*flags, "--precision", precision, "--dp", str(dp)]
                two = dry_run(work, [*common, "--zero-stage", "2"])
                three = dry_run(work, [*common, "--zero-stage", "3"])
                kept = dry_run(work, [*common, "--zero-stage", "3", "--reshard-after-forward", "false"])
                psi = two["model"]["parameters"]
                element = 4 if precision == "fp32" else 2
                formula = element * psi * (1 - 1 / dp)
                r2, r3, rk = (run["ranks"][0] for run in (two, three, kept))
                saved = r2["peak_reserved"] - r3["peak_reserved"]
                states = sum(three["model_states"]["device_at_peak"].values())
                print(f"{name:11} {precision} dp{dp}: reserved {r2['peak_reserved'] / MiB:9.1f} {r3['peak_reserved'] / MiB:9.1f} MiB | "
                      f"stage3 saves {saved / MiB:7.1f} of {formula / MiB:7.1f} ({saved / formula:5.2f}) | "
                      f"parameters {r2['max_by_category']['parameters'] / MiB:7.1f} -> {r3['max_by_category']['parameters'] / MiB:6.1f}"
                      f" (kept {rk['max_by_category']['parameters'] / MiB:6.1f}) | "
                      f"states {states / MiB:7.1f} vs DeepSpeed {three['model_states']['deepspeed_estimate'] / MiB:7.1f} | "
                      f"sent x{r3['bytes_sent_per_step'] / r2['bytes_sent_per_step']:.2f}")
