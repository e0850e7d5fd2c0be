#!/usr/bin/env bash
# ZeRO 1 and 2 save memory at their defaults, for every GPT shape: dry runs of every rank (meta) from
# gpt2-tiny to gpt2-xl, dp 2 (fp32, bf16) and dp 4 (bf16), and a small model on the cpu device under
# mpirun. At default settings (no bucket flags) each rank's peak reserved falls from stage 0 to 1 to 2,
# each stage saves at least 80% of what ZeRO's formulas say (stage 1: the optimizer state's
# K x psi x (1 - 1/dp), K = 8 in fp32 and 12 with 16-bit parameters; stage 2: the f32 gradients'
# 4 x psi x (1 - 1/dp)), and every rank's most gradient and communication bytes at once stay within the
# bound the summary states in its terms; under mpirun every rank measures what its dry run predicted.
source "$(dirname "$0")/common.sh"
mpirun=${MPIRUN:-mpirun}

check() {  # check PRECISION DP SUMMARY0 SUMMARY1 SUMMARY2: the savings and the bounds
  /usr/bin/python3 - "$@" <<'PY'
import json, sys
precision, dp = sys.argv[1], int(sys.argv[2])
runs = [json.load(open(path)) for path in sys.argv[3:6]]
psi = runs[0]["model"]["parameters"]
name = runs[0]["model"]["name"]
state = 8 if precision == "fp32" else 12
saves = [state * psi * (1 - 1 / dp), 4 * psi * (1 - 1 / dp)]
for rank in range(dp):
    peaks = [run["ranks"][rank]["peak_reserved"] for run in runs]
    assert peaks[2] <= peaks[1] <= peaks[0], (name, precision, dp, rank, peaks)
    for stage in (1, 2):
        saved = peaks[stage - 1] - peaks[stage]
        assert saved >= 0.8 * saves[stage - 1], (name, precision, dp, rank, f"stage {stage} saves {saved} of {saves[stage - 1]:.0f}")
    for stage, run in enumerate(runs):
        entry = run["ranks"][rank]
        bound = entry["optimizer"]["memory_bound"]
        for category in ("gradients", "communication"):
            measured = entry["max_by_category"].get(category, 0)
            assert measured <= bound[category]["total"], (name, precision, dp, stage, rank, category, measured, bound[category])
PY
}

# Every shape on meta, the dry run of every rank in one process.
shapes=("--model gpt2-tiny" "--layers 4 --hidden 512 --heads 8 --vocab 8192" "--model gpt2" "--model gpt2-medium" "--model gpt2-large"
        "--model gpt2-xl")
for shape in "${shapes[@]}"; do
  for grid in "fp32 2" "bf16 2" "bf16 4"; do
    read -r precision dp <<< "$grid"
    for stage in 0 1 2; do
      # shellcheck disable=SC2086
      "$ferry" train $shape --precision "$precision" --dp "$dp" --zero-stage "$stage" --device meta --steps 1 \
        --summary "$work/meta_$stage.json" > /dev/null
    done
    check "$precision" "$dp" "$work/meta_0.json" "$work/meta_1.json" "$work/meta_2.json" || { echo "failed: $shape $grid"; exit 1; }
  done
done

# A small model on the cpu device: the same savings, measured; each rank what its dry run predicted.
small=(--layers 2 --hidden 128 --heads 4 --vocab 2048 --seq 64 --batch 2 --steps 2 --threads 1 --log-every 100)
for stage in 0 1 2; do
  timeout 300 "$mpirun" --allow-run-as-root --oversubscribe -np 2 "$ferry" train "${small[@]}" --zero-stage "$stage" \
    --summary "$work/cpu_$stage.json" > "$work/out.txt" 2>&1 || { cat "$work/out.txt"; exit 1; }
  "$ferry" train "${small[@]}" --zero-stage "$stage" --dp 2 --device meta --summary "$work/dry_$stage.json" > /dev/null
  /usr/bin/python3 - "$work/cpu_$stage.json" "$work/dry_$stage.json" <<'PY'
import json, sys
measured, predicted = (json.load(open(path)) for path in sys.argv[1:3])
for real, dry in zip(measured["ranks"], predicted["ranks"]):
    for key in ("peak_allocated", "peak_reserved", "max_by_category"):
        assert real[key] == dry[key], (real["rank"], key, real[key], dry[key])
    assert real["optimizer"]["memory_bound"] == dry["optimizer"]["memory_bound"], real["rank"]
PY
done
grep -q "gradients, most at once .* | bound .* = partition .* buckets of" "$work/out.txt" || { echo "no bound beside the measured bytes:"; cat "$work/out.txt"; exit 1; }
check fp32 2 "$work/cpu_0.json" "$work/cpu_1.json" "$work/cpu_2.json"
echo "ZeRO 1 and 2 save at least 80% of their formulas at default settings, gpt2-tiny to gpt2-xl and on the cpu device"
