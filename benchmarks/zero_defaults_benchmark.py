#!/usr/bin/env python3
"""ZeRO 1 and 2 at their default settings: each stage's saving in peak reserved (rank 0, dry runs of
every rank on meta) beside ZeRO's formula for it, from gpt2-tiny to gpt2-xl at dp 2 and 4 in fp32 and
bf16. Stage 1's formula: the optimizer state's K x psi x (1 - 1/dp) (K = 8 with f32 parameters, 12 with
16-bit ones); stage 2's: the f32 gradients' 4 x psi x (1 - 1/dp). Record the output in docs/benchmarks.md.
Usage: benchmarks/zero_defaults_benchmark.py [FERRY] [extra train flags...]"""
import json
import subprocess
import sys
import tempfile

from zero_shapes import shapes

ferry = sys.argv[1] if len(sys.argv) > 1 else "build/ferry"
extra = sys.argv[2:]
MiB = 2**20
with tempfile.TemporaryDirectory() as work:
    summary = f"{work}/summary.json"
    for name, flags in shapes.items():
        for precision in ("fp32", "bf16"):
            for dp in (2, 4):
                peaks = {}
                for stage in (0, 1, 2):
                    subprocess.run([ferry, "train", *flags, "--precision", precision, "--dp", str(dp), "--zero-stage", str(stage),
                                    "--device", "meta", "--steps", "1", "--summary", summary, *extra], check=True, capture_output=True)
                    run = json.load(open(summary))
                    rank = run["ranks"][0]
                    peaks[stage] = (rank["peak_reserved"], run["model"]["parameters"], rank["max_by_category"].get("gradients", 0),
                                    rank["max_by_category"].get("communication", 0))
                psi = peaks[0][1]
                state = 8 if precision == "fp32" else 12
                formula1, formula2 = state * psi * (1 - 1 / dp), 4 * psi * (1 - 1 / dp)
                saved1, saved2 = peaks[0][0] - peaks[1][0], peaks[1][0] - peaks[2][0]
                print(f"{name:12} {precision} dp{dp}: reserved {peaks[0][0] / MiB:9.1f} {peaks[1][0] / MiB:9.1f} {peaks[2][0] / MiB:9.1f} MiB | "
                      f"stage1 saves {saved1 / MiB:8.1f} of {formula1 / MiB:8.1f} ({saved1 / formula1:5.2f}) | "
                      f"stage2 saves {saved2 / MiB:8.1f} of {formula2 / MiB:8.1f} ({saved2 / formula2:5.2f}) | "
                      f"grads {peaks[2][2] / MiB:.1f} comm {peaks[2][3] / MiB:.1f}")
