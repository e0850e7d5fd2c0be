#!/usr/bin/env bash
# ZeRO-Offload end to end: `ferry train --offload-optimizer cpu|nvme` gives the same losses as AdamW on
# the device, under a device limit the non-offloaded run does not fit (the meta dry run predicts the
# offloaded peak exactly); checkpoints resume across modes; DeepSpeed's zero_optimization keys select
# the same; bad settings and a file system too small for the state give errors that name the fix.
root=$1
source "$(dirname "$0")/common.sh"
shape=(--layers 2 --hidden 64 --heads 4 --seq 32 --batch 2 --precision bf16 --threads 2 --log-every 100 --dropout 0.1 --lr-schedule constant --steps)

# 1. The same losses in every mode (bitwise: one micro-batch, AdamW in one operation order).
"$ferry" train "${shape[@]}" 4 --summary "$work/none.json" > /dev/null
"$ferry" train "${shape[@]}" 4 --offload-optimizer cpu --summary "$work/cpu.json" > "$work/cpu.txt"
"$ferry" train "${shape[@]}" 4 --offload-optimizer nvme --nvme-path "$work/nvme" --offload-sub-group 90000 \
  --summary "$work/nvme.json" > /dev/null
grep -q "beside the formula for .* parameters, ZeRO-Offload" "$work/cpu.txt"
[[ -z "$(ls -A "$work/nvme")" ]] || { echo "the NVMe state file outlived the run"; exit 1; }
/usr/bin/python3 - "$work" <<'PY'
import json, sys
runs = {m: json.load(open(f"{sys.argv[1]}/{m}.json")) for m in ["none", "cpu", "nvme"]}
losses = {m: [s["loss"] for s in r["steps"]] for m, r in runs.items()}
assert losses["cpu"] == losses["none"] == losses["nvme"], losses
for mode in ["cpu", "nvme"]:
    memory = runs[mode]["memory"]
    assert memory["at_peak"]["optimizer_states"] == 0 and memory["max_by_category"]["optimizer_states"] == 0, memory
    assert memory["max_by_category"]["gradients"] < runs["none"]["memory"]["max_by_category"]["gradients"] / 2, memory
    assert memory["host_pinned_peak"] > 0 and runs[mode]["run"]["offload_optimizer"] == mode
assert runs["nvme"]["memory"]["nvme_bytes"] >= 12 * runs["nvme"]["model"]["parameters"], runs["nvme"]["memory"]
assert runs["cpu"]["memory"]["nvme_bytes"] == 0
PY

# 1b. Expandable segments with offload (cpu and nvme) train, write the summary and exit 0: the allocator's
# teardown once unmapped split pieces of pages (madvise EINVAL) and ended the run with SIGABRT.
for tier in cpu nvme; do
  nvme=(); [[ $tier == nvme ]] && nvme=(--nvme-path "$work/nvme")
  FERRY_ALLOC_CONF=expandable_segments:True "$ferry" train "${shape[@]}" 2 --offload-optimizer $tier "${nvme[@]}" \
    --summary "$work/expandable-$tier.json" > /dev/null 2> "$work/expandable-$tier.err"
  grep -q '"num_release_failures": 0' "$work/expandable-$tier.json"
  [[ ! -s "$work/expandable-$tier.err" ]] || { cat "$work/expandable-$tier.err"; exit 1; }
done

# 2. A limit only the offloaded run fits; the dry run on meta predicts its peaks exactly.
"$ferry" train "${shape[@]}" 4 --offload-optimizer cpu --device meta --summary "$work/meta.json" > /dev/null
limit=$(/usr/bin/python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['memory']['peak_reserved'])" "$work/meta.json")
/usr/bin/python3 - "$work/cpu.json" "$work/meta.json" <<'PY'
import json, sys
cpu, meta = (json.load(open(p))["memory"] for p in sys.argv[1:3])
for key in ["peak_allocated", "peak_reserved", "at_peak", "max_by_category"]:
    assert cpu[key] == meta[key], (key, cpu[key], meta[key])
PY
expect_error "out of device memory" "$ferry" train "${shape[@]}" 4 --device-memory "$limit" --profile "$work/oom"
grep -q -- "--offload-optimizer cpu .*fits" "$work/err.txt" || { echo "the advice does not offer the offload:"; cat "$work/err.txt"; exit 1; }
"$ferry" train "${shape[@]}" 4 --device-memory "$limit" --offload-optimizer cpu --summary "$work/fit.json" > /dev/null

# 2b. Gradient buckets bounded by bytes: few wide blocks, where one whole weight's gradient is the
#     bucket that breaks the limit; the OOM advice names a bucket that fits, and it trains there with at
#     most three such slices of gradient on the device at once (the one landing, and the two before it,
#     held by their staging slots until the host adds them: offload/host_gradients.h).
wide=(--layers 2 --hidden 768 --heads 8 --vocab 4096 --seq 64 --batch 1 --steps 2 --threads 2 --log-every 100 --offload-optimizer cpu
      --device-memory 80000000)
(cd "$work" && expect_error "reduce-bucket-size [0-9]* .* fits" "$ferry" train "${wide[@]}")
read -r -a advised < <(grep -m1 -E "^ +--.* fits, " "$work/err.txt" | sed -E 's/ +peak reserved.*//')
bucket=$(grep -oE -- "--reduce-bucket-size [0-9]+" <<< "${advised[*]}" | awk '{print $2}')
[[ -n $bucket ]] || { echo "the first advice that fits bounds no bucket:"; cat "$work/err.txt"; exit 1; }
"$ferry" train "${wide[@]}" "${advised[@]}" --summary "$work/bucket.json" > /dev/null
"$ferry" train "${wide[@]}" "${advised[@]}" --device meta --summary "$work/bucket_meta.json" > /dev/null  # the same limit: the same retries
/usr/bin/python3 - "$work/bucket.json" "$work/bucket_meta.json" "$bucket" <<'PY'
import json, sys
real, meta = (json.load(open(p)) for p in sys.argv[1:3])
bucket = int(sys.argv[3])
m = real["memory"]
assert m["peak_reserved"] <= 80000000, m
assert m["max_by_category"]["gradients"] <= bucket * 4 * 3, m["max_by_category"]
for key in ["peak_allocated", "peak_reserved", "max_by_category"]:
    assert m[key] == meta["memory"][key], (key, m[key], meta["memory"][key])
PY
echo '{"zero_optimization": {"stage": 2, "reduce_bucket_size": '"$bucket"', "offload_optimizer": {"device": "cpu"}}}' > "$work/bucket_config.json"
other_flags=$(sed -E 's/--reduce-bucket-size [0-9]+//' <<< "${advised[*]}")
# shellcheck disable=SC2086
"$ferry" train "${wide[@]}" --config "$work/bucket_config.json" $other_flags --summary "$work/bucket_config_run.json" > /dev/null
/usr/bin/python3 -c "import json,sys; assert json.load(open(sys.argv[1]))['memory']['peak_reserved'] <= 80000000" "$work/bucket_config_run.json"

# 2c. Any shape fits in a fifth of its 16 bytes per parameter: few wide bf16 blocks with a 4096 vocabulary
#     (17.4M parameters) need more with whole buckets and whole f32 weight copies than a 53.2 MiB limit;
#     the advice names bounds that fit, and with them the run fits and trains as unbounded.
fifth=(--layers 2 --hidden 768 --heads 8 --vocab 4096 --seq 64 --batch 1 --steps 2 --threads 2 --log-every 100 --precision bf16
       --offload-optimizer cpu)
limit=$(( 17421312 * 16 / 5 ))
(cd "$work" && expect_error "reduce-bucket-size [0-9]* .* fits" "$ferry" train "${fifth[@]}" --device-memory "$limit")
read -r -a advised < <(grep -m1 -E "^ +--.* fits, " "$work/err.txt" | sed -E 's/ +peak reserved.*//')
[[ " ${advised[*]} " == *" --reduce-bucket-size "* ]] || { echo "the first advice that fits bounds no bucket: ${advised[*]}"; exit 1; }
"$ferry" train "${fifth[@]}" --device-memory "$limit" "${advised[@]}" --summary "$work/fifth.json" > /dev/null
"$ferry" train "${fifth[@]}" --summary "$work/fifth_unbounded.json" > /dev/null
"$ferry" train "${fifth[@]}" "${advised[@]}" --device meta --summary "$work/fifth_meta.json" > /dev/null
/usr/bin/python3 - "$work/fifth.json" "$work/fifth_unbounded.json" "$limit" "$work/fifth_meta.json" <<'PY'
import json, sys
bounded, unbounded, limit = json.load(open(sys.argv[1])), json.load(open(sys.argv[2])), int(sys.argv[3])
meta = json.load(open(sys.argv[4]))
for key in ["peak_allocated", "peak_reserved", "max_by_category"]:
    assert bounded["memory"][key] == meta["memory"][key], (key, bounded["memory"][key], meta["memory"][key])
assert bounded["model"]["parameters"] == 17421312
assert bounded["memory"]["peak_reserved"] <= limit < unbounded["memory"]["peak_reserved"], (bounded["memory"], unbounded["memory"])
for a, b in zip(bounded["steps"], unbounded["steps"]):
    assert abs(a["loss"] - b["loss"]) < 1e-3 * b["loss"], (a["loss"], b["loss"])  # other GEMM slicing: rounding (bf16 gradients)
PY

# 2d. The advice combines changes: 6 blocks of width 512, bf16, offloaded, under 60 MiB, where no one change
#     fits (the smallest micro-batch alone needs 75 MiB) and no pair either: the cheapest that fits joins
#     three, and the run trains there at the peak the advice predicted. Under 40 MiB nothing the search
#     tries fits: it names the least it reaches, with its flags and the --device-memory that fits them.
six=(--layers 6 --hidden 512 --heads 8 --vocab 4096 --precision bf16 --offload-optimizer cpu --steps 1 --threads 2 --log-every 100)
(cd "$work" && expect_error "the cheapest changes that fit" "$ferry" train "${six[@]}" --device-memory 60MiB)
line=$(grep -m1 -E "^ +--.* fits, " "$work/err.txt")
read -r -a advised <<< "$(sed -E 's/ +peak reserved.*//' <<< "$line")"
[[ " ${advised[*]} " == *" --batch "* && " ${advised[*]} " == *" --reduce-bucket-size "* &&
   ( " ${advised[*]} " == *" --weight-copy-elements "* || " ${advised[*]} " == *" --checkpointing "* ) ]] ||
  { echo "the cheapest advice that fits 60 MiB is not the combination: ${advised[*]}"; cat "$work/err.txt"; exit 1; }
predicted=$(sed -E 's/.*peak reserved +([0-9.]+) MiB.*/\1/' <<< "$line")
"$ferry" train "${six[@]}" --device-memory 60MiB "${advised[@]}" --summary "$work/combined.json" > /dev/null
/usr/bin/python3 -c "import json,sys; m=json.load(open(sys.argv[1]))['memory']; assert abs(m['peak_reserved'] / 2**20 - float(sys.argv[2])) < 0.01, (m, sys.argv[2])" \
  "$work/combined.json" "$predicted"
(cd "$work" && expect_error "nothing tried fits" "$ferry" train "${six[@]}" --device-memory 40MiB)
needed=$(grep -oE "it fits --device-memory [0-9]+" "$work/err.txt" | awk '{print $4}')
read -r -a least <<< "$(grep -oE "comes with .*; it fits" "$work/err.txt" | sed -E 's/comes with (.*); it fits/\1/')"
[[ -n $needed && ${#least[@]} -gt 0 ]] || { echo "no least memory named:"; cat "$work/err.txt"; exit 1; }
"$ferry" train "${six[@]}" --device-memory "$needed" "${least[@]}" > /dev/null

# 3. Checkpoints move between modes: 2 steps offloaded to NVMe, 2 more on the device == 4 on the device.
"$ferry" train "${shape[@]}" 2 --offload-optimizer nvme --nvme-path "$work/nvme" --save "$work/ckpt" > /dev/null
"$ferry" train "${shape[@]}" 4 --resume "$work/ckpt" --summary "$work/resumed.json" > /dev/null
/usr/bin/python3 - "$work/none.json" "$work/resumed.json" <<'PY'
import json, sys
full, resumed = (json.load(open(p)) for p in sys.argv[1:3])
assert [s["loss"] for s in resumed["steps"]] == [s["loss"] for s in full["steps"]][2:], (resumed["steps"], full["steps"])
PY

# 4. DeepSpeed's keys.
cat > "$work/zero.json" <<'JSON'
{"zero_optimization": {"stage": 2, "offload_optimizer": {"device": "nvme", "nvme_path": "NVME", "pin_memory": true, "buffer_count": 3},
                       "sub_group_size": 30000, "overlap_comm": true},
 "aio": {"block_size": 262144, "queue_depth": 16, "thread_count": 1}}
JSON
sed -i "s|NVME|$work/nvme|" "$work/zero.json"
"$ferry" train --config "$work/zero.json" "${shape[@]}" 4 --summary "$work/zero_run.json" > "$work/zero.txt"
grep -q "overlap_comm has no effect" "$work/zero.txt"
grep -q "aio.thread_count has no effect" "$work/zero.txt"
/usr/bin/python3 - "$work/zero_run.json" "$work/none.json" <<'PY'
import json, sys
run, none = (json.load(open(p)) for p in sys.argv[1:3])
assert run["run"]["offload_optimizer"] == "nvme" and run["optimizer"]["sub_group_elements"] == 30000, run["optimizer"]
assert [s["loss"] for s in run["steps"]] == [s["loss"] for s in none["steps"]]
PY
echo '{"zero_optimization": {"stage": 3, "offload_param": {"device": "cpu"}}}' > "$work/stage3.json"
expect_error "needs --offload-optimizer cpu or nvme" "$ferry" train --config "$work/stage3.json" --steps 1
echo '{"zero_optimization": {"offload_optimizer": {"device": "nvme", "ratio": 0.3}}}' > "$work/ratio.json"
expect_error "Twin-Flow" "$ferry" train --config "$work/ratio.json" --steps 1
echo '{"zero_optimization": {"offload_optimizer": {"device": "disk"}}}' > "$work/disk.json"
expect_error "not one of none, cpu, nvme" "$ferry" train --config "$work/disk.json" --steps 1

# 5. Bad settings.
expect_error "needs --nvme-path" "$ferry" train --steps 1 --offload-optimizer nvme
expect_error "is for --offload-optimizer nvme" "$ferry" train --steps 1 --nvme-path "$work/nvme"
expect_error "buffer-count must be >= 2" "$ferry" train --steps 1 --offload-optimizer nvme --nvme-path "$work/nvme" --offload-buffer-count 1

# 6. A file system too small for the state: the error names the file and the fix, before any step,
#    and the checkpoint the run resumed from is untouched and still loads.
if mkdir -p "$work/small" && mount -t tmpfs -o size=1m tmpfs "$work/small" 2> /dev/null; then
  trap 'umount "$work/small" 2> /dev/null || true; rm -rf "$work"' EXIT
  before=$(sha256sum "$work/ckpt"/latest/* | sha256sum)
  expect_error "optimizer_states.bin" "$ferry" train "${shape[@]}" 4 --offload-optimizer nvme --nvme-path "$work/small" \
    --resume "$work/ckpt" --save "$work/ckpt"
  grep -qi "no space\|ENOSPC" "$work/err.txt" || { echo "the full disk is not named:"; cat "$work/err.txt"; exit 1; }
  [[ "$(sha256sum "$work/ckpt"/latest/* | sha256sum)" == "$before" ]] || { echo "the checkpoint changed"; exit 1; }
  "$ferry" train "${shape[@]}" 4 --resume "$work/ckpt" > /dev/null
  umount "$work/small"
else
  echo "offload_test: cannot mount a tmpfs here (no privilege); the full-disk case is covered by nvme_store_tests' fault injection"
fi
echo "offload CLI tests passed"
