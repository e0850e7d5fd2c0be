#!/usr/bin/env bash
# `ferry plan` on cpu ranks (2 ranks of gpt2-tiny in 9 MiB each): the plans it calls fitting are ranked
# by predicted tokens/s; the best one's launch command trains under mpirun with every rank's peak
# exactly as planned, and so does `ferry train --plan` of the summary and `--plan auto`; a plan it calls
# too big runs out of memory; a bad plan file, an unknown device kind, an impossible global batch and an
# --plan auto that nothing fits are refused by name.
source "$(dirname "$0")/common.sh"
mpirun=${MPIRUN:-mpirun}

"$ferry" plan --model gpt2-tiny --seq 64 --global-batch 8 --cluster 1x2xcpu --device-memory 9MiB --top 3 --summary "$work/plan.json" \
  > "$work/plan.txt" 2>&1 || { cat "$work/plan.txt"; exit 1; }
grep -q "^best: " "$work/plan.txt" || { cat "$work/plan.txt"; echo "no best plan printed"; exit 1; }

# The best plan's and a too-big plan's commands, as this test runs them, and the best's config.
/usr/bin/python3 - "$work" <<'PY'
import json, sys
work = sys.argv[1]
summary = json.load(open(f"{work}/plan.json"))
plans = summary["plans"]
fits = [p for p in plans if p["status"] == "fits"]
assert len(fits) == 3, [p["status"] for p in plans]
rates = [p["tokens_per_second"] for p in fits]
assert rates == sorted(rates, reverse=True), rates
limit = summary["cluster"]["device_memory"]
for plan in fits:
    assert plan["fits"] and max(r["peak_reserved"] for r in plan["ranks"]) == plan["peak_reserved"] <= limit, plan
    assert len(plan["ranks"]) == plan["settings"]["dp"] * plan["settings"]["pp"], plan
    s = plan["settings"]
    assert s["dp"] * s["micro_batch"] * s["micro_batches"] == 8, s
    assert plan["deepspeed_config"]["train_batch_size"] == 8, plan["deepspeed_config"]
too_big = [p for p in plans if p["status"] == "too big" and "ranks" in p]  # by a dry run
assert too_big and all(p["peak_reserved"] > limit and "over the device" in p["why_not"] for p in too_big), too_big[:1]
by_formula = [p for p in plans if p["status"] == "too big" and "ranks" not in p]  # model states alone over the device
assert by_formula and all(p["model_states_floor"] > limit and "model states alone" in p["why_not"] for p in by_formula), by_formula[:1]
assert all(p["why_not"] for p in plans if p["status"] in ("refused", "not measured")), "a plan left out without a reason"
def runnable(plan, name):  # "mpirun -np N ferry train ..." -> the arguments after `ferry`, one per line
    words = plan["command"].split()
    assert words[:4] == ["mpirun", "-np", str(plan["settings"]["dp"] * plan["settings"]["pp"]), "ferry"], words
    open(f"{work}/{name}.args", "w").write("\n".join(words[4:]) + "\n")
runnable(fits[0], "best")
runnable(too_big[0], "too_big")
json.dump(fits[0]["deepspeed_config"], open(f"{work}/best_config.json", "w"))
json.dump(fits[0], open(f"{work}/best_plan.json", "w"))
PY
mapfile -t best < "$work/best.args"
mapfile -t too_big < "$work/too_big.args"
run=(--steps 2 --threads 1 --lr 1e-4)
timeout 300 "$mpirun" --allow-run-as-root --oversubscribe -np 2 "$ferry" "${best[@]}" "${run[@]}" --summary "$work/best.json" \
  > "$work/best.txt" 2>&1 || { cat "$work/best.txt"; exit 1; }
# The saved plan trains as its best plan (--plan reads the summary; its config is DeepSpeed's keys).
timeout 300 "$mpirun" --allow-run-as-root --oversubscribe -np 2 "$ferry" train --plan "$work/plan.json" --model gpt2-tiny --seq 64 \
  "${run[@]}" --summary "$work/config.json" > "$work/config.txt" 2>&1 || { cat "$work/config.txt"; exit 1; }
if timeout 300 "$mpirun" --allow-run-as-root --oversubscribe -np 2 "$ferry" "${too_big[@]}" "${run[@]}" > "$work/too_big.txt" 2>&1; then
  echo "a plan called too big trained:"; cat "$work/too_big.txt"; exit 1
fi
grep -qi "out of memory\|device memory" "$work/too_big.txt" || { cat "$work/too_big.txt"; echo "the too-big plan did not run out of memory"; exit 1; }

/usr/bin/python3 - "$work" <<'PY'
import json, sys
work = sys.argv[1]
plan = json.load(open(f"{work}/best_plan.json"))
for name in ("best", "config"):
    run = json.load(open(f"{work}/{name}.json"))
    assert run["grid"]["dp"] == plan["settings"]["dp"] and run["grid"]["zero_stage"] == plan["settings"]["zero_stage"], (name, run["grid"])
    for predicted, measured in zip(plan["ranks"], run["ranks"]):
        for key in ("peak_reserved", "peak_allocated", "max_by_category"):
            assert predicted[key] == measured[key], (name, measured["rank"], key, predicted[key], measured[key])
PY

# One rank in 4500 KiB: nothing fits but ZeRO-Infinity (stage 3, the optimizer and the parameters on the
# host); its plan trains with the rank's peaks as planned.
"$ferry" plan --model gpt2-tiny --seq 64 --global-batch 2 --cluster 1x1xcpu --device-memory 4500KiB --top 1 --summary "$work/infinity.json" \
  > "$work/infinity.txt" 2>&1 || { cat "$work/infinity.txt"; exit 1; }
"$ferry" train --plan "$work/infinity.json" --model gpt2-tiny --seq 64 "${run[@]}" --summary "$work/infinity_run.json" > "$work/infinity_run.txt" 2>&1 \
  || { cat "$work/infinity_run.txt"; exit 1; }
/usr/bin/python3 - "$work" <<'PY'
import json, sys
work = sys.argv[1]
plans = json.load(open(f"{work}/infinity.json"))["plans"]
fits = [p for p in plans if p["fits"]]
assert len(fits) == 1 and fits[0]["settings"]["offload_param"] == "cpu" and fits[0]["settings"]["zero_stage"] == 3, fits
assert fits[0]["deepspeed_config"]["zero_optimization"]["offload_param"] == {"device": "cpu"}, fits[0]["deepspeed_config"]
assert all(p["settings"]["offload_param"] == "cpu" for p in plans if p["status"] == "fits"), "a plan without parameter offload fit"
assert any(p["status"] == "too big" and p["settings"]["offload_param"] == "none" for p in plans), "no smaller offload was judged"
run = json.load(open(f"{work}/infinity_run.json"))
assert run["run"]["offload_param"] == "cpu" and run["grid"]["zero_stage"] == 3, run["run"]
for key in ("peak_reserved", "peak_allocated", "max_by_category"):
    assert fits[0]["ranks"][0][key] == run["ranks"][0][key], (key, fits[0]["ranks"][0][key], run["ranks"][0][key])
PY

# --plan auto: rank 0 plans the launched ranks at this --device-memory, every rank trains its choice, and
# each rank's peaks are the plan's (global batch: --batch 4 x 2 ranks).
timeout 300 "$mpirun" --allow-run-as-root --oversubscribe -np 2 "$ferry" train --plan auto --model gpt2-tiny --seq 64 --batch 4 \
  --device-memory 9MiB "${run[@]}" --summary "$work/auto.json" > "$work/auto.txt" 2>&1 || { cat "$work/auto.txt"; exit 1; }
grep -q "^ferry: --plan auto: dp " "$work/auto.txt" || { cat "$work/auto.txt"; echo "--plan auto did not say its plan"; exit 1; }
/usr/bin/python3 - "$work" <<'PY'
import json, sys
run = json.load(open(f"{sys.argv[1]}/auto.json"))
plan = run["plan"]
assert plan["source"] == "auto" and plan["global_batch"] == 8 and plan["device_memory"] == 9 << 20, plan
s = plan["settings"]
assert (run["grid"]["dp"], run["grid"]["pp"], run["grid"]["micro_batch"], run["grid"]["micro_batches"], run["grid"]["zero_stage"]) == \
    (s["dp"], s["pp"], s["micro_batch"], s["micro_batches"], s["zero_stage"]), (run["grid"], s)
assert run["grid"]["global_batch"] == 8 and run["grid"]["checkpointing"] == s["recompute"], run["grid"]
assert len(run["ranks"]) == len(plan["ranks"]) == 2
for predicted, measured in zip(plan["ranks"], run["ranks"]):
    assert measured["peak_reserved"] <= 9 << 20, measured
    for key in ("peak_reserved", "peak_allocated", "max_by_category"):
        assert predicted[key] == measured[key], ("auto", measured["rank"], key, predicted[key], measured[key])
PY
expect_error "no plan of .* fits .* 2.00 MiB each" "$ferry" train --plan auto --model gpt2-tiny --seq 64 --batch 4 --device-memory 2MiB --steps 1
expect_error "plans cpu ranks, not --device meta" "$ferry" train --plan auto --model gpt2-tiny --device meta --steps 1

# NVMe as a tier: 53.6M parameters in bf16 on 2 ranks of 400 MiB, where only an offloaded optimizer fits
# the device. Under a host budget between what the best NVMe plan and the best host-offload plan keep
# there, the plan puts the optimizer on NVMe, and its command trains with every rank's peak as planned.
mkdir -p "$work/nvme"
wide=(--model gpt2-tiny --layers 2 --hidden 768 --heads 12 --vocab 50257 --seq 32 --precision bf16)
tier_plan() {
  "$ferry" plan "${wide[@]}" --global-batch 2 --cluster 1x2xcpu --device-memory 400MiB --nvme-path "$work/nvme" --nvme 16GiB \
    --top 40 --max-dry-runs 200 --summary "$work/$1.json" "${@:2}" > "$work/$1.txt" 2>&1 || { cat "$work/$1.txt"; exit 1; }
}
tier_plan tiers --host-memory 64GiB
host=$(/usr/bin/python3 - "$work" <<'PY'
import json, sys
plans = [p for p in json.load(open(f"{sys.argv[1]}/tiers.json"))["plans"] if p["fits"]]
on_nvme = min(p["host_bytes"] for p in plans if p["settings"]["offload_optimizer"] == "nvme")
elsewhere = min(p["host_bytes"] for p in plans if p["settings"]["offload_optimizer"] != "nvme")
assert on_nvme < elsewhere, (on_nvme, elsewhere)
print((on_nvme + elsewhere) // 2)
PY
)
tier_plan nvme_plan --host-memory "$host"
/usr/bin/python3 - "$work" <<'PY'
import json, sys
work = sys.argv[1]
best = [p for p in json.load(open(f"{work}/nvme_plan.json"))["plans"] if p["fits"]][0]
assert best["settings"]["offload_optimizer"] == "nvme" and best["nvme_bytes"] > 0, best["settings"]
assert best["deepspeed_config"]["zero_optimization"]["offload_optimizer"]["device"] == "nvme", best["deepspeed_config"]
open(f"{work}/nvme_best.args", "w").write("\n".join(best["command"].split()[4:]) + "\n")
json.dump(best, open(f"{work}/nvme_best.json", "w"))
PY
mapfile -t nvme_best < "$work/nvme_best.args"
timeout 300 "$mpirun" --allow-run-as-root --oversubscribe -np 2 "$ferry" "${nvme_best[@]}" "${run[@]}" --summary "$work/nvme_run.json" \
  > "$work/nvme_run.txt" 2>&1 || { cat "$work/nvme_run.txt"; exit 1; }
/usr/bin/python3 - "$work" <<'PY'
import json, sys
work = sys.argv[1]
plan, run = json.load(open(f"{work}/nvme_best.json")), json.load(open(f"{work}/nvme_run.json"))
assert run["run"]["offload_optimizer"] == "nvme", run["run"]
for predicted, measured in zip(plan["ranks"], run["ranks"]):
    for key in ("peak_reserved", "peak_allocated"):
        assert predicted[key] == measured[key], ("nvme", measured["rank"], key, predicted[key], measured[key])
PY

# Refusals name the problem and the fix.
expect_error "no device kind 'TPU-v5'.*H100-80GB" "$ferry" plan --model gpt2-tiny --global-batch 8 --cluster 1x2xTPU-v5
expect_error "unknown --model 'gpt9'" "$ferry" plan --model gpt9 --global-batch 8 --cluster 1x2xcpu
expect_error "global-batch must be positive" "$ferry" plan --model gpt2-tiny --global-batch 0 --cluster 1x2xcpu
expect_error "give --nvme-path DIR too" "$ferry" plan --model gpt2-tiny --global-batch 8 --cluster 1x2xcpu --nvme 1GiB
expect_error "nvme-bandwidth: .*give --nvme-path DIR too" "$ferry" plan --model gpt2-tiny --global-batch 8 --cluster 1x2xcpu --nvme-bandwidth 1e9
expect_error "nvme-path '/no/such/dir': No such file" "$ferry" plan --model gpt2-tiny --global-batch 8 --cluster 1x2xcpu --nvme-path /no/such/dir
expect_error "is not a \`ferry plan --summary\` file" "$ferry" train --plan "$work/best_config.json"
if "$ferry" plan --model gpt2-tiny --global-batch 3 --cluster 1x4xcpu > "$work/out.txt" 2>&1; then
  grep -q "dp 1 x pp 4" "$work/out.txt" || { cat "$work/out.txt"; echo "a global batch of 3 on 4 ranks planned more than dp 1"; exit 1; }
fi
echo "plan: ok"
