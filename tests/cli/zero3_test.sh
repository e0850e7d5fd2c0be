#!/usr/bin/env bash
# ZeRO stage 3 under mpirun (more ranks than cores): each rank keeps a partition of the parameters and
# gathers a block's before it runs. dp 2 and 4 give one rank's losses with the same global batch (1e-6
# relative in fp32, bf16 within its rounding), with --reshard-after-forward true and false, with every
# recompute policy and with ZeRO-Offload (cpu, nvme); each rank's parameter bytes at most at once equal
# the stated partition + gathered working set, exactly, and the dry run of every rank predicts each rank's peaks byte for byte; stage 3
# peaks below stage 2; a pipeline (dp 2 x pp 2, also with parameters on NVMe) and --init-from train stage 2's losses; a stage-3
# checkpoint is byte for byte stage 2's and resumes across stages and grids.
source "$(dirname "$0")/common.sh"
source "$(dirname "$0")/stage3_runs.sh"

"$ferry" train "${model[@]}" --grad-accum 4 --summary "$work/one.json" > /dev/null
"$ferry" train "${model[@]}" --grad-accum 4 --precision bf16 --summary "$work/one_bf16.json" > /dev/null
run stage2 2 --grad-accum 2 --zero-stage 2
run reshard 2 --grad-accum 2 --zero-stage 3
grep -q "parameters, most at once .* | bound .* = partition .* + gathered .* the layer running and the next one's prefetch" "$work/out.txt" ||
  { echo "no parameter bound in the summary lines:"; cat "$work/out.txt"; exit 1; }
run kept 2 --grad-accum 2 --zero-stage 3 --reshard-after-forward false
# DeepSpeed's stage-3 keys: no prefetch (a config's stage3_prefetch_bucket_size 0), and a bound on what
# stays gathered beyond the running layer (stage3_max_live_parameters, 2 of gpt2-tiny's blocks' elements).
echo '{"zero_optimization": {"stage": 3, "stage3_prefetch_bucket_size": 0, "stage3_max_live_parameters": "auto"}}' > "$work/ds_no_prefetch.json"
run no_prefetch 2 --grad-accum 2 --config "$work/ds_no_prefetch.json"
run kept_bounded 2 --grad-accum 2 --zero-stage 3 --reshard-after-forward false --stage3-max-live-parameters 400000
expect_error "stage3-prefetch-bucket-size (zero_optimization.stage3_prefetch_bucket_size) is ZeRO stage 3's" \
  "$ferry" train "${model[@]}" --zero-stage 2 --stage3-prefetch-bucket-size 0
expect_error "stage3-max-live-parameters (zero_optimization.stage3_max_live_parameters) must be 0 or more elements, got -1" \
  "$ferry" train "${model[@]}" --zero-stage 3 --stage3-max-live-parameters -1
run dp4 4 --grad-accum 1 --zero-stage 3 --reduce-bucket-size 100000
run full 2 --grad-accum 2 --zero-stage 3 --checkpointing full
run selective 2 --grad-accum 2 --zero-stage 3 --checkpointing selective
run bf16 2 --grad-accum 2 --zero-stage 3 --precision bf16
for stage in 2 3; do  # fp16: one loss scale over the ranks, stage 3's as stage 2's
  launch 2 train "${model[@]}" --grad-accum 2 --zero-stage "$stage" --precision fp16 --summary "$work/fp16_$stage.json" > "$work/out.txt" 2>&1 ||
    { cat "$work/out.txt"; exit 1; }
done
run offload 2 --grad-accum 2 --zero-stage 3 --offload-optimizer cpu
launch 2 train "${model[@]}" --grad-accum 2 --zero-stage 3 --offload-optimizer nvme --nvme-path "$work/nvme" --summary "$work/nvme.json" \
  > "$work/out.txt" 2>&1 || { cat "$work/out.txt"; exit 1; }

/usr/bin/python3 - "$work" "$(dirname "$0")" <<'PY'
import sys
sys.path.insert(0, sys.argv[2])
from summaries import Summaries, round512
summaries = Summaries(sys.argv[1])
load, losses_match = summaries.load, summaries.losses_match
for name in ("reshard", "kept", "no_prefetch", "kept_bounded", "dp4", "full", "selective", "offload", "nvme"):
    losses_match(name, "one", 1e-6)
losses_match("bf16", "one_bf16", 1e-4)
losses_match("fp16_3", "fp16_2", 0)
# ZeRO-Offload at stage 3: the optimizer state off the device, none of it on the device.
for name in ("offload", "nvme"):
    assert load(name)["optimizer"]["state"] == ("host" if name == "offload" else "nvme"), load(name)["optimizer"]
    for rank in load(name)["ranks"]:
        assert rank["max_by_category"]["optimizer_states"] == 0, (name, rank["max_by_category"])
for name in ("reshard", "kept", "no_prefetch", "dp4", "full", "selective", "bf16", "offload"):
    run = load(name)
    assert run["grid"]["zero_stage"] == 3, run["grid"]
    element = 2 if name == "bf16" else 4
    # Each layer (the token table, the position table, every block, the final LayerNorm) is a unit of
    # the partition, sharded across the ranks: every rank owns its share of each, all ranks alike but
    # for the last ranks' short shards (fewer than dp x 64 elements a unit: each shard is aligned to 64).
    units, dp = run["optimizer"]["partition_units"], run["optimizer"]["dp"]
    assert units == 4 + 3, run["optimizer"]  # gpt2-tiny's 4 blocks
    owned = [rank["optimizer"]["owned_elements"] for rank in run["ranks"]]
    assert sum(owned) == run["model"]["parameters"] and max(owned) - min(owned) < 64 * dp * units, (name, owned)
    for rank in run["ranks"]:
        bound = rank["optimizer"]["memory_bound"]["parameters"]
        partition = rank["optimizer"]["owned_elements"]
        # The partition in the parameters' dtype, and at most the stated working set beside it, exactly.
        assert bound["partition"] == round512(element * partition), (name, rank["rank"], bound, partition)
        assert bound["exact"] and rank["max_by_category"]["parameters"] == bound["total"] == bound["partition"] + bound["gathered"], (name, rank["rank"], bound)
        assert rank["optimizer"]["parameter_gathers"] > 0 and rank["optimizer"]["last_step_seconds"]["parameter_gather_wait"] >= 0, rank["optimizer"]
        for category in ("gradients", "communication"):  # within their stated bounds, the offload's staging slots included
            measured, stated = rank["max_by_category"].get(category, 0), rank["optimizer"]["memory_bound"][category]
            assert measured <= stated["total"], (name, rank["rank"], category, measured, stated)
    # The dry run of every rank in one process predicts every rank's memory and traffic byte for byte.
    for predicted, measured in zip(load(name + ".meta")["ranks"], run["ranks"]):
        for key in ("peak_allocated", "peak_reserved", "max_by_category", "at_peak", "bytes_sent"):
            assert predicted[key] == measured[key], (name, measured["rank"], key, predicted[key], measured[key])
        assert predicted["optimizer"]["memory_bound"] == measured["optimizer"]["memory_bound"], (name, measured["rank"])
# Resharding after forward holds two blocks at most; keeping them holds every block from forward to backward.
gathered = lambda name: load(name)["ranks"][0]["optimizer"]["memory_bound"]["parameters"]
block = gathered("reshard")["block"]
assert gathered("reshard")["gathered"] < gathered("kept")["gathered"], (gathered("reshard"), gathered("kept"))
assert gathered("kept")["gathered"] >= 4 * block, gathered("kept")  # gpt2-tiny's 4 blocks
# Without prefetch each layer is gathered when it starts: one block less than resharding with prefetch.
assert gathered("no_prefetch")["gathered"] == gathered("reshard")["gathered"] - block, (gathered("no_prefetch"), block)
assert load("no_prefetch")["ranks"][0]["optimizer"]["parameter_gathers"] == load("reshard")["ranks"][0]["optimizer"]["parameter_gathers"]
# The bound (400,000 elements: two blocks of 198,272) keeps two blocks for their backward where keeping
# holds all four: the most at once is the running layer and two blocks, beside the partition, and the
# dry run says so byte for byte; the stated formula is then a bound.
bounded = load("kept_bounded")
for rank, predicted in zip(bounded["ranks"], load("kept_bounded.meta")["ranks"]):
    parameters, bound = rank["max_by_category"]["parameters"], rank["optimizer"]["memory_bound"]["parameters"]
    assert not bound["exact"] and bound["max_live_elements"] == 400000 and parameters <= bound["total"], bound
    assert parameters < load("kept")["ranks"][rank["rank"]]["max_by_category"]["parameters"], parameters
    assert parameters - bound["partition"] <= 3 * block + gathered("reshard")["gathered"], (parameters, bound)
    assert predicted["max_by_category"] == rank["max_by_category"] and predicted["peak_reserved"] == rank["peak_reserved"], rank["rank"]
# Stage 3 holds less than stage 2 on every rank, and sends more (every block gathered twice a micro-batch).
for s2, s3 in zip(load("stage2")["ranks"], load("reshard")["ranks"]):
    assert s3["peak_reserved"] <= s2["peak_reserved"] and s3["max_by_category"]["parameters"] < s2["max_by_category"]["parameters"], (s2, s3)
    assert s3["bytes_sent_per_step"] > s2["bytes_sent_per_step"], (s2["bytes_sent_per_step"], s3["bytes_sent_per_step"])
PY

# Checkpoints: stage 3's files are stage 2's byte for byte; each resumes at the other stage and at one rank.
ckpt=(--steps 2 --grad-accum 2)
launch 2 train "${model[@]}" "${ckpt[@]}" --zero-stage 3 --save "$work/ck3" > "$work/out.txt" 2>&1 || { cat "$work/out.txt"; exit 1; }
launch 2 train "${model[@]}" "${ckpt[@]}" --zero-stage 2 --save "$work/ck2" > "$work/out.txt" 2>&1 || { cat "$work/out.txt"; exit 1; }
for file in model.safetensors optimizer.safetensors; do
  cmp "$work/ck3/step-00000002/$file" "$work/ck2/step-00000002/$file" || { echo "stage 3's $file differs from stage 2's"; exit 1; }
done
"$ferry" train "${model[@]}" --steps 4 --grad-accum 4 --resume "$work/ck3" --summary "$work/resumed_one.json" > /dev/null
launch 2 train "${model[@]}" --steps 4 --grad-accum 2 --zero-stage 3 --resume "$work/ck2" --summary "$work/resumed_3.json" \
  > "$work/out.txt" 2>&1 || { cat "$work/out.txt"; exit 1; }
/usr/bin/python3 - "$work" <<'PY'
import json, sys
load = lambda name: json.load(open(f"{sys.argv[1]}/{name}.json"))
one, three = ([s["loss"] for s in load(name)["steps"]] for name in ("resumed_one", "resumed_3"))
assert len(one) == len(three) == 2 and all(abs(a - b) <= 1e-6 * abs(a) for a, b in zip(one, three)), (one, three)
PY

# A pipeline of dp 2 x pp 2: stage 3 trains stage 2's losses (the tied table's gradient summed between
# the stages as there), each rank's parameter bytes within the stated bound (a pipeline rank's layers
# run in its schedule's order, so the bound is not exact there).
# With the parameters and optimizer state on NVMe (ZeRO-Infinity) the pipeline trains them too.
for variant in 2 3 infinity; do
  case $variant in
    infinity) flags=(--zero-stage 3 --offload-optimizer nvme --offload-param nvme --nvme-path "$work/nvme") ;;
    *) flags=(--zero-stage "$variant") ;;
  esac
  launch 4 train "${model[@]}" --grad-accum 4 --dp 2 --pp 2 "${flags[@]}" --summary "$work/pipeline_$variant.json" \
    > "$work/out.txt" 2>&1 || { cat "$work/out.txt"; exit 1; }
done
/usr/bin/python3 - "$work" <<'PY'
import json, sys
load = lambda name: json.load(open(f"{sys.argv[1]}/{name}.json"))
two, three, infinity = load("pipeline_2"), load("pipeline_3"), load("pipeline_infinity")
assert [s["loss"] for s in three["steps"]] == [s["loss"] for s in two["steps"]], (three["steps"], two["steps"])
assert all(abs(a["loss"] - b["loss"]) <= 1e-6 * b["loss"] for a, b in zip(infinity["steps"], three["steps"])), (infinity["steps"], three["steps"])
for rank in three["ranks"] + infinity["ranks"]:
    bound = rank["optimizer"]["memory_bound"]["parameters"]
    assert not bound["exact"] and rank["max_by_category"]["parameters"] <= bound["total"], (rank["rank"], rank["max_by_category"], bound)
assert all(rank["optimizer"]["memory_bound"]["parameters"]["partition"] == 0 for rank in infinity["ranks"])
PY

# --init-from at stage 3: each rank reads its partition's elements from the file, piece by piece, and
# trains stage 2's losses (fp32, and bf16 rounded as a whole model rounds). (A file that does not fit the
# model fails as at stage 0: GptParameterReader checks it with load_gpt_parameters' own checks.)
for precision in fp32 bf16; do
  for stage in 2 3; do
    launch 2 train "${model[@]}" --grad-accum 2 --zero-stage "$stage" --precision "$precision" \
      --init-from "$work/ck2/step-00000002/model.safetensors" --summary "$work/init_${stage}_$precision.json" > "$work/out.txt" 2>&1 ||
      { cat "$work/out.txt"; exit 1; }
  done
  /usr/bin/python3 - "$work/init_2_$precision.json" "$work/init_3_$precision.json" <<'PY'
import json, sys
two, three = ([s["loss"] for s in json.load(open(path))["steps"]] for path in sys.argv[1:3])
assert two == three, (two, three)
PY
done

# Ranks that would gather differently (another recompute policy or loss chunk: DeepSpeed's stage-3 hangs)
# stop before step 1, every rank naming the setting.
for flags in "--checkpointing full" "--loss-chunk 16" "--stage3-prefetch-bucket-size 0"; do
  # shellcheck disable=SC2086  # a word list
  if FERRY_COMM_TIMEOUT_SECONDS=20 timeout 120 "$mpirun" --allow-run-as-root --oversubscribe -np 1 "$ferry" train "${model[@]}" --zero-stage 3 \
       : -np 1 "$ferry" train "${model[@]}" --zero-stage 3 $flags > "$work/out.txt" 2> "$work/err.txt"; then
    echo "ranks with and without '$flags' trained at stage 3"; exit 1
  fi
  for rank in 0 1; do
    grep -q -- "rank $rank of 2: the ranks were launched with different settings: ${flags%% *}" "$work/err.txt" ||
      { echo "rank $rank does not name '${flags%% *}':"; cat "$work/err.txt"; exit 1; }
  done
done

# DeepSpeed's stage-3 keys: "auto" is ferry's default, a number is taken (the plan records it); the keys
# ferry has no use for are said to have no effect, with what ferry does instead.
echo '{"zero_optimization": {"stage": 3, "stage3_prefetch_bucket_size": "auto", "stage3_max_live_parameters": 1e9,
       "stage3_param_persistence_threshold": "auto", "stage3_max_reuse_distance": 1e9}}' > "$work/stage3.json"
"$ferry" train --config "$work/stage3.json" "${model[@]}" --steps 1 --device meta --dp 2 --summary "$work/stage3_keys.json" > "$work/out.txt"
grep -q "note: zero_optimization.stage3_param_persistence_threshold has no effect: ferry gathers a layer's" "$work/out.txt"
grep -q "note: zero_optimization.stage3_max_reuse_distance has no effect" "$work/out.txt"
if grep -q "stage3_prefetch_bucket_size has no effect\|stage3_max_live_parameters has no effect" "$work/out.txt"; then echo "a stage-3 key ferry takes is said to have no effect"; exit 1; fi
/usr/bin/python3 -c "
import json, sys
plan = json.load(open(sys.argv[1]))['grid']
assert plan['stage3_prefetch'] is True and plan['stage3_max_live_parameters'] == 1000000000, plan
" "$work/stage3_keys.json"

# ferry bench memory dry-runs stage 3 beside stage 2 with both formulas: ZeRO's 16 psi / dp and
# DeepSpeed's stage-3 estimator (4 x the largest layer, the token table, + 18 psi / dp).
"$ferry" bench memory --model gpt2-tiny --batch 2 --seq 32 --dp 2 --zero-stage 2,3 --output "$work/bench" > /dev/null
/usr/bin/python3 - "$work/bench/zero.json" <<'PY'
import json, sys
two, three = json.load(open(sys.argv[1]))["rows"]
psi = 842496  # gpt2-tiny
assert three["zero_stage"] == 3 and three["model_states_measured"] < two["model_states_measured"], (two, three)
assert three["zero_paper_model_states"] == 16 * psi / 2 and three["deepspeed_estimate_model_states"] == 4 * 256 * 128 + 18 * psi / 2, three
PY

# The reshard switch is stage 3's alone.
expect_error "reshard-after-forward is ZeRO stage 3's" "$ferry" train "${model[@]}" --zero-stage 2 --reshard-after-forward false
echo "ZeRO 3: one rank's losses at dp 2 and 4, parameter bytes as stated, dry runs exact, checkpoints stage 2's"
