#!/usr/bin/env bash
# `ferry train` and `ferry eval` end to end on tiny shapes: the loss falls on the embedded corpus, the
# summary holds the contract's keys, a checkpoint resumes byte-identically, broken checkpoints and
# configs are clear errors, a meta dry run needs no memory, and eval reads what train saved.
root=$1
source "$(dirname "$0")/common.sh"
shape=(--layers 2 --hidden 32 --heads 2 --seq 32 --threads 2 --log-every 100)
tiny=("${shape[@]}" --batch 2)

# 1. The loss falls on the embedded corpus (byte tokens: it starts near ln 256 = 5.55).
"$ferry" train --batch 4 --seq 64 --steps 40 --lr 3e-3 --threads 2 --log-every 10 --summary "$work/demo.json"
/usr/bin/python3 - "$work/demo.json" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
for key in ["model", "run", "steps", "final_loss", "tokens_per_second", "memory"]:
    assert key in s, key
for key in ["name", "parameters"]:
    assert key in s["model"], key
for key in ["device", "device_memory_limit", "precision", "micro_batch", "grad_accum", "steps", "checkpointing", "offload_optimizer"]:
    assert key in s["run"], key
for key in ["peak_allocated", "peak_reserved", "at_peak", "max_by_category", "host_pinned_peak", "nvme_bytes", "num_ooms", "num_alloc_retries"]:
    assert key in s["memory"], key
first, last = s["steps"][0]["loss"], s["final_loss"]
assert 5.0 < first < 6.0, first
assert last < first - 1.5, (first, last)
assert s["memory"]["at_peak"]["activations"] > 0 and s["memory"]["at_peak"]["parameters"] > 0
assert sum(s["memory"]["at_peak"].values()) == s["memory"]["peak_allocated"]
assert len(s["steps"]) == 40 and s["steps"][-1]["loss"] == last
PY

# 2. Resume is exact the way runs are stopped and restarted: --steps 6 straight == --steps 6
#    --exit-interval 3 --save D, then --steps 6 --resume D (cosine after warmup, dropout, shuffled data,
#    gradient accumulation), in fp32, bf16 and fp16 (whose dynamic scale doubles across the restart).
run=("$ferry" train "${tiny[@]}" --grad-accum 2 --dropout 0.1 --lr-schedule cosine --warmup-steps 1)
for precision in fp32 bf16 fp16; do
  flags=(--precision "$precision")
  [[ $precision == fp16 ]] && flags+=(--initial-scale-power 12 --loss-scale-window 2 --hysteresis 3)
  straight=$work/straight_$precision resumed=$work/resumed_$precision
  "${run[@]}" "${flags[@]}" --steps 6 --save "$straight" --summary "$straight.json" > /dev/null
  "${run[@]}" "${flags[@]}" --steps 6 --exit-interval 3 --save "$resumed" --summary "$resumed.first.json" > "$work/exit.txt"
  grep -q "stopped after step 3 (--exit-interval 3)" "$work/exit.txt"
  grep -q '"lr_decay_steps": 6' "$resumed/latest/trainer_state.json"
  "${run[@]}" "${flags[@]}" --steps 6 --resume "$resumed" --save "$resumed" --summary "$resumed.json" > /dev/null
  for file in model.safetensors optimizer.safetensors config.json trainer_state.json DONE; do
    cmp "$straight/latest/$file" "$resumed/latest/$file" || { echo "$precision: $file differs after the resume"; exit 1; }
  done
  /usr/bin/python3 - "$straight.json" "$resumed.first.json" "$resumed.json" "$precision" <<'PY'
import json, sys
a, first, b = (json.load(open(p)) for p in sys.argv[1:4])
keys = ["loss", "lr"] + (["loss_scale", "skipped"] if sys.argv[4] == "fp16" else [])
pick = lambda steps: [[s[k] for k in keys] for s in steps]
assert len(first["steps"]) == 3 and first["run"]["last_step"] == 3, first["run"]
assert pick(a["steps"]) == pick(first["steps"] + b["steps"]), (sys.argv[4], pick(a["steps"]), pick(first["steps"] + b["steps"]))
assert b["steps"][0]["step"] == 4
if sys.argv[4] == "fp16":
    assert [s["loss_scale"] for s in a["steps"]] == [4096, 4096, 8192, 8192, 16384, 16384], a["steps"]
    assert a["loss_scaling"] == b["loss_scaling"], (a["loss_scaling"], b["loss_scaling"])
PY
done
/usr/bin/python3 - "$work/straight_fp16.json" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
scaling = s["loss_scaling"]
assert s["run"]["precision"] == "fp16"
assert scaling["dynamic"] and scaling["hysteresis"] == 3 and scaling["skipped_steps"] == 0, scaling
assert scaling["scale"] == 32768 and scaling["scale_increases"] == 3, scaling
PY
# --save-every writes the same checkpoint on the way.
"${run[@]}" --steps 6 --save-every 3 --save "$work/every" --exit-interval 5 > /dev/null
grep -q '"step": 5' "$work/every/latest/trainer_state.json"
"${run[@]}" --steps 6 --resume "$work/every" --save "$work/every" > /dev/null
cmp "$work/straight_fp32/latest/model.safetensors" "$work/every/latest/model.safetensors"
# A directory per step and `latest` linking the newest; --keep-checkpoints removes the oldest, never latest.
[[ $(cd "$work/every" && echo step-*) == "step-00000003 step-00000005 step-00000006" ]] || { ls -l "$work/every"; exit 1; }
[[ $(readlink "$work/every/latest") == step-00000006 ]]
"${run[@]}" --steps 4 --save-every 1 --keep-checkpoints 2 --save "$work/kept" > "$work/kept.txt"
grep -q "saved checkpoint $work/kept/step-00000004 ($work/kept/latest)" "$work/kept.txt"
[[ $(cd "$work/kept" && echo step-*) == "step-00000003 step-00000004" ]] || { ls -l "$work/kept"; exit 1; }
# What a save killed at any point leaves (a staging directory, temporary files, an older checkpoint of
# the same step set aside) never changes what resumes, and the next save clears it: the set-aside
# checkpoint whose replacement never arrived is put back. A step directory ferry did not stage (no DONE,
# no marker: a user's) is left as it is.
cp -r "$work/kept/step-00000004" "$work/kept/step-00000005.tmp.999999999" && rm "$work/kept/step-00000005.tmp.999999999/DONE"
echo partial > "$work/kept/step-00000004/model.safetensors.tmp.999999998"
mkdir "$work/kept/step-00000007"
mv "$work/kept/step-00000003" "$work/kept/step-00000003.old.999999997"
"${run[@]}" --steps 5 --resume "$work/kept" --summary "$work/kept_resumed.json" > /dev/null
/usr/bin/python3 - "$work/kept_resumed.json" <<'PY'
import json, sys
assert json.load(open(sys.argv[1]))["run"]["first_step"] == 5
PY
"${run[@]}" --steps 5 --resume "$work/kept" --save "$work/kept" --keep-checkpoints 3 > "$work/kept.txt"
grep -q "removed what an interrupted save left: $work/kept/step-00000005.tmp.999999999" "$work/kept.txt"
if grep -q "step-00000007" "$work/kept.txt"; then echo "cleanup touched a step directory ferry did not stage"; exit 1; fi
grep -q "removed what an interrupted save left: $work/kept/step-00000003 (restored)" "$work/kept.txt"
[[ $(cd "$work/kept" && echo step-*) == "step-00000003 step-00000004 step-00000005 step-00000007" ]] || { ls -l "$work/kept"; exit 1; }
rmdir "$work/kept/step-00000007"
[[ ! -e "$work/kept/step-00000004/model.safetensors.tmp.999999998" ]]
rm "$work/kept/step-00000005" -r
expect_error "checkpoint root '$work/kept': \`latest\` names 'step-00000005', which is missing .* resume from one of: $work/kept/step-00000003 $work/kept/step-00000004" \
  "${run[@]}" --steps 6 --resume "$work/kept"
"${run[@]}" --steps 5 --resume "$work/kept/step-00000004" > /dev/null  # one step directory resumes too
expect_error "--keep-checkpoints needs --save" "${run[@]}" --steps 1 --keep-checkpoints 2

# A resume keeps the checkpoint's optimizer settings; an explicit flag that contradicts one names both.
expect_error "--lr 0.5 contradicts the checkpoint '$work/resumed_fp32/step-00000006', which was trained with --lr 0.001" \
  "${run[@]}" --steps 8 --resume "$work/resumed_fp32" --lr 0.5
expect_error "--lr-decay-steps 9 contradicts" "${run[@]}" --steps 8 --resume "$work/resumed_fp32" --lr-decay-steps 9
expect_error "--betas 0.8,0.95 contradicts .* with --betas 0.9,0.95" "${run[@]}" --steps 8 --resume "$work/resumed_fp32" --betas 0.8,0.95
"${run[@]}" --steps 7 --resume "$work/resumed_fp32" --lr 0.001 --warmup-steps 1 --summary "$work/longer.json" > /dev/null
/usr/bin/python3 - "$work/longer.json" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
settings = s["run"]["optimizer_settings"]
assert settings["lr_decay_steps"] == 6 and settings["warmup_steps"] == 1, settings  # the checkpoint's horizon
assert s["steps"][0]["step"] == 7 and abs(s["steps"][0]["lr"] - 1e-4) < 1e-12, s["steps"]  # past the horizon: the minimum
assert "steps 7-7 lie past the cosine schedule's horizon (lr_decay_steps 6)" in s["run"]["lr_schedule_note"], s["run"]["lr_schedule_note"]
PY
# Extending a run past its horizon is said; --override-lr-schedule stretches the schedule to --steps (or
# --lr-decay-steps), keeping the weights, moments, step and data position (the same schedule again gives
# the plain resume's files byte for byte), and trainer_state.json and the summary record the change.
expect_error "add --override-lr-schedule" "${run[@]}" --steps 8 --resume "$work/resumed_fp32" --lr-decay-steps 9
"${run[@]}" --steps 8 --resume "$work/resumed_fp32" --save "$work/plain_extended" > "$work/extended.txt"
grep -q "note: steps 7-8 lie past the cosine schedule's horizon (lr_decay_steps 6) .* resume with --override-lr-schedule" "$work/extended.txt" ||
  { cat "$work/extended.txt"; exit 1; }
"${run[@]}" --steps 8 --resume "$work/resumed_fp32" --override-lr-schedule --lr-decay-steps 6 --save "$work/same_schedule" > /dev/null
for file in model.safetensors optimizer.safetensors; do
  cmp "$work/plain_extended/latest/$file" "$work/same_schedule/latest/$file" || { echo "an override to the same schedule changed $file"; exit 1; }
done
"${run[@]}" --steps 8 --resume "$work/resumed_fp32" --override-lr-schedule --save "$work/stretched" --summary "$work/stretched.json" \
  > "$work/stretched.txt"
grep -q "note: --override-lr-schedule: from step 7 the learning rate follows cosine .* horizon 8" "$work/stretched.txt" || { cat "$work/stretched.txt"; exit 1; }
/usr/bin/python3 - "$work/stretched.json" "$work/stretched/latest/trainer_state.json" "$work/extended.txt" <<'PY'
import json, sys
s, state = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
assert s["run"]["optimizer_settings"]["lr_decay_steps"] == 8 and s["run"]["lr_schedule_note"] == "", s["run"]
assert s["steps"][0]["lr"] > 1.5e-4 and s["steps"][1]["lr"] == 1e-4, s["steps"]  # decaying to the minimum at the new horizon
for record in (s["run"]["lr_schedule_overrides"], state["schedule_overrides"]):
    assert len(record) == 1 and record[0]["step"] == 6, record
    assert record[0]["from"]["lr_decay_steps"] == 6 and record[0]["to"]["lr_decay_steps"] == 8, record
assert state["optimizer"]["lr_decay_steps"] == 8, state["optimizer"]
PY
expect_error "it needs --resume" "${run[@]}" --steps 8 --override-lr-schedule

# The data is known by its content: another path to the same file resumes; other content under the
# same name is refused.
cp "$root/data/corpus/tiny-stories.txt" "$work/data.txt"
"${run[@]}" --data "$work/data.txt" --steps 2 --exit-interval 1 --save "$work/on_data" > /dev/null
(cd "$work" && "${run[@]}" --data ./data.txt --steps 2 --resume on_data > /dev/null)
head -c 20000 "$root/data/corpus/tiny-stories.txt" > "$work/data.txt"
expect_error "the checkpoint was trained on other data ({\"tokens\":" "${run[@]}" --data "$work/data.txt" --steps 2 --resume "$work/on_data"

# Mixed precision as users expect it: over 50 steps on the built-in corpus, bf16 and fp16 (activation
# gradients in the compute dtype, fp16 guarded by the dynamic scaler) stay within 2% of fp32.
for precision in fp32 bf16 fp16; do
  "$ferry" train "${shape[@]}" --batch 4 --steps 50 --lr 3e-3 --precision "$precision" --summary "$work/mp_$precision.json" > /dev/null
done
/usr/bin/python3 - "$work/mp_fp32.json" "$work/mp_bf16.json" "$work/mp_fp16.json" <<'PY'
import json, sys
fp32, bf16, fp16 = ([s["loss"] for s in json.load(open(p))["steps"]] for p in sys.argv[1:])
assert fp32[-1] < fp32[0] - 1.0, fp32  # it trained
for name, run in (("bf16", bf16), ("fp16", fp16)):
    worst = max(abs(a - b) / b for a, b in zip(run, fp32))
    assert worst < 0.02, (name, worst)
PY

# Recompute policies give the same losses as none (dropout on); auto picks the least recompute that fits.
for policy in full selective every:2; do
  "${run[@]}" --steps 2 --checkpointing "$policy" --summary "$work/policy.json" > /dev/null
  /usr/bin/python3 - "$work/straight_fp32.json" "$work/policy.json" "$policy" <<'PY'
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
assert [s["loss"] for s in a["steps"][:2]] == [s["loss"] for s in b["steps"]], sys.argv[3]
assert b["run"]["checkpointing"] == sys.argv[3]
PY
done
"$ferry" train "${tiny[@]}" --steps 1 --checkpointing auto --device-memory 1GiB > "$work/auto.txt"
grep -q "checkpointing auto: none" "$work/auto.txt"
expect_error "no recompute policy fits --device-memory" "$ferry" train "${tiny[@]}" --steps 1 --checkpointing auto --device-memory 512KiB
expect_error "not one of none, full, selective" "$ferry" train "${tiny[@]}" --steps 1 --checkpointing some

# 3. Broken checkpoints and bad resumes are clear errors.
cp -r "$work/resumed_fp32" "$work/partial" && rm "$work/partial/latest/DONE"
expect_error "partial" "${run[@]}" --steps 8 --resume "$work/partial"
cp -r "$work/resumed_fp32" "$work/corrupt" && truncate -s 1000 "$work/corrupt/latest/model.safetensors"
expect_error "corrupt" "${run[@]}" --steps 8 --resume "$work/corrupt"
expect_error "does not exist" "${run[@]}" --steps 8 --resume "$work/missing"
mkdir "$work/empty"
expect_error "'$work/empty' is not a checkpoint (it is empty)" "${run[@]}" --steps 8 --resume "$work/empty"
expect_error "the checkpoint was trained with --batch 2, this run asks for 3; resume with --batch 2" "$ferry" train "${shape[@]}" --grad-accum 2 --dropout 0.1 --batch 3 --steps 8 --resume "$work/resumed_fp32"

# 4. Config file: DeepSpeed keys apply, flags override them, unknown keys are named.
cat > "$work/config.json" <<'JSON'
{"train_micro_batch_size_per_gpu": 3, "gradient_accumulation_steps": 2, "gradient_clipping": 0.5,
 "optimizer": {"type": "AdamW", "params": {"lr": 0.002, "betas": [0.9, 0.99], "eps": 1e-8, "weight_decay": 0.0}},
 "ferry": {"layers": 1, "hidden": 16, "heads": 2, "seq": 16, "steps": 2}}
JSON
"$ferry" train --config "$work/config.json" --batch 1 --threads 2 --summary "$work/config_run.json" > /dev/null
/usr/bin/python3 - "$work/config_run.json" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
assert s["run"]["micro_batch"] == 1 and s["run"]["grad_accum"] == 2 and s["run"]["steps"] == 2, s["run"]
assert s["run"]["lr"] == 0.002 and s["model"]["layers"] == 1
PY
echo '{"train_micro_batch_size_per_gpu": 2, "optimizer": {"params": {"learning_rate": 1}}}' > "$work/bad_config.json"
expect_error "unknown config key 'optimizer.params.learning_rate'" "$ferry" train --config "$work/bad_config.json"

# 4b. The "ferry" section takes every flag (underscored); a mistyped key names the nearest one.
cat > "$work/ferry_section.json" <<'JSON'
{"ferry": {"layers": 1, "hidden": 16, "heads": 2, "seq": 16, "steps": 2, "batch": 3, "lr": 0.002, "grad_clip": 0.5,
           "shuffle": false, "device_memory": "1GiB", "schedule": "gpipe", "lr_decay_steps": 10, "metrics": "METRICS"}}
JSON
sed -i "s|METRICS|$work/section_metrics.jsonl|" "$work/ferry_section.json"
"$ferry" train --config "$work/ferry_section.json" --batch 1 --threads 2 --summary "$work/section.json" > /dev/null
/usr/bin/python3 - "$work/section.json" "$work/section_metrics.jsonl" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
r = s["run"]
assert r["micro_batch"] == 1 and r["steps"] == 2 and r["lr"] == 0.002 and r["shuffle"] is False, r  # the flag overrides the section
assert r["device_memory_limit"] == 1 << 30 and r["optimizer_settings"]["grad_clip"] == 0.5 and r["optimizer_settings"]["lr_decay_steps"] == 10, r
assert len(open(sys.argv[2]).readlines()) == 2
PY
echo '{"ferry": {"stpes": 2}}' > "$work/typo.json"
expect_error "unknown key 'ferry.stpes': did you mean 'ferry.steps'?" "$ferry" train --config "$work/typo.json"
echo '{"ferry": {"batch": 2.7}}' > "$work/fraction.json"
expect_error "key 'ferry.batch' = 2.7" "$ferry" train --config "$work/fraction.json"

# 4c. A command line people find their way in: did-you-mean, defaults in --help, --version, the last of
#     a repeated flag, metrics as JSON lines, a validation loss, dry runs that say so.
expect_error "unknown command 'trian' for .ferry.: did you mean 'train'?" "$ferry" trian
expect_error "unknown flag '--stpes' for .ferry train.: did you mean --steps?" "$ferry" train --stpes 3
expect_error "did you mean 'memory'?" "$ferry" bench memroy
"$ferry" train --help > "$work/help.txt"  # (not piped into grep -q: pipefail would see ferry's SIGPIPE)
grep -q -- "--steps INT=300" "$work/help.txt"
grep -q -- "--lr FLOAT .*(default 1e-3)" "$work/help.txt"
"$ferry" --version > "$work/version.txt"
grep -q "^ferry [0-9.]* (commit " "$work/version.txt" && grep -q "^CUDA: \(yes\|no\)" "$work/version.txt" && grep -q "^BLAS kernels: OpenBLAS" "$work/version.txt"
"$ferry" train "${tiny[@]}" --steps 3 --steps 2 --summary "$work/twice.json" > /dev/null
/usr/bin/python3 -c "import json,sys; assert json.load(open(sys.argv[1]))['run']['steps'] == 2" "$work/twice.json"
printf 'not a header line\n' > "$work/metrics.jsonl"  # appended to, never truncated
"$ferry" train "${tiny[@]}" --steps 4 --metrics "$work/metrics.jsonl" --eval-data "$root/data/corpus/tiny-stories.txt" --eval-every 2 \
  --eval-batches 2 --precision fp16 --summary "$work/metrics_run.json" > "$work/metrics_run.txt"
grep -q "step     2/4 | loss [0-9.]* | val loss [0-9.]*" "$work/metrics_run.txt"
/usr/bin/python3 - "$work/metrics.jsonl" "$work/metrics_run.json" <<'PY'
import json, sys
lines = open(sys.argv[1]).read().splitlines()
assert lines[0] == "not a header line" and len(lines) == 5, lines
rows = [json.loads(line) for line in lines[1:]]
s = json.load(open(sys.argv[2]))
for row, step in zip(rows, s["steps"]):
    for key in ["step", "loss", "lr", "grad_norm", "tokens_per_second", "loss_scale"]:
        assert row[key] == step[key], (key, row, step)
    assert row["memory"]["allocated_by_category"]["parameters"] > 0 and row["memory"]["peak_allocated"] > 0
assert [("eval_loss" in row) for row in rows] == [False, True, False, True]
assert s["final_eval_loss"] == rows[-1]["eval_loss"] and 0 < s["final_eval_loss"] < 6
PY
# Settings this configuration leaves without effect are said, in one process and in a pipeline.
"$ferry" train "${tiny[@]}" --steps 1 --weight-copy-elements 100 --reduce-bucket-size 10 > "$work/notes.txt"
grep -q "note: --weight-copy-elements has no effect" "$work/notes.txt" && grep -q "note: reduce_bucket_size has no effect" "$work/notes.txt"
"$ferry" train "${tiny[@]}" --steps 1 --pp 2 --device meta --weight-copy-elements 100 > "$work/notes.txt"
grep -q "note: --weight-copy-elements has no effect" "$work/notes.txt"
expect_error "--eval-every needs --eval-data" "$ferry" train "${tiny[@]}" --steps 1 --eval-every 2
expect_error "cannot open the --metrics file" "$ferry" train "${tiny[@]}" --steps 1 --metrics "$work/missing/dir/m.jsonl"
# A dry run says so, is unlimited without --device-memory (gpt3-13b's step needs ~242 GiB) and dry-runs
# the checkpoint or weights a user has, reading their shapes only.
"$ferry" train --device meta --model gpt3-13b --batch 1 --seq 2048 --steps 1 --precision bf16 --summary "$work/13b.json" > "$work/13b.txt"
grep -q "dry run: no values computed" "$work/13b.txt" && ! grep -q "loss nan\|tok/s" "$work/13b.txt"
grep -q "18 bytes per parameter: bf16 parameters, f32 gradients" "$work/13b.txt"
/usr/bin/python3 - "$work/13b.json" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
assert s["memory"]["peak_allocated"] > 200 * 2**30 and s["tokens_per_second"] is None, s["memory"]
assert s["model_states"]["formula"]["bytes_per_parameter"] == 18
PY
"$ferry" train --device meta --resume "$work/resumed_fp32" --batch 2 --seq 32 --grad-accum 2 --dropout 0.1 --steps 8 --summary "$work/meta_resume.json" > /dev/null
"$ferry" train --device meta --init-from "$work/straight_fp32/latest/model.safetensors" --batch 2 --seq 32 --steps 1 --summary "$work/meta_init.json" > /dev/null
/usr/bin/python3 - "$work/meta_resume.json" "$work/meta_init.json" "$work/straight_fp32.json" <<'PY'
import json, sys
resumed, init, real = (json.load(open(p)) for p in sys.argv[1:])
assert resumed["run"]["first_step"] == 7 and resumed["run"]["dry_run"] and resumed["model"] == real["model"], resumed["run"]
assert init["model"]["parameters"] == real["model"]["parameters"] and init["run"]["dry_run"]
PY
expect_error "cannot --save" "$ferry" train --device meta "${tiny[@]}" --steps 1 --save "$work/meta_save"
expect_error "--hidden 64 contradicts the checkpoint .*, whose model has --hidden 32" "$ferry" train --resume "$work/resumed_fp32" \
  "${tiny[@]}" --grad-accum 2 --steps 8 --hidden 64

# 5. Bad flags and data.
expect_error "precision 'fp8'" "$ferry" train "${tiny[@]}" --precision fp8 --steps 1
expect_error "not one of constant, cosine" "$ferry" train "${tiny[@]}" --lr-schedule linear --steps 1
expect_error "cannot open data file" "$ferry" train "${tiny[@]}" --data "$work/none.txt" --steps 1
expect_error "use --vocab" "$ferry" train "${tiny[@]}" --vocab 100 --steps 1
printf 'x%.0s' {1..20} > "$work/short.txt"
expect_error "use a smaller --batch or --seq" "$ferry" train "${tiny[@]}" --data "$work/short.txt" --steps 1
expect_error "out of memory" "$ferry" train "${tiny[@]}" --device-memory 512KiB --steps 1

# 6. eval reads what train saved; a meta dry run of gpt2 (124M) allocates the real shapes without memory.
"$ferry" eval --init-from "$work/straight_fp32/latest/model.safetensors" --batch 2 --seq 32 --batches 3 --threads 2 --summary "$work/eval.json"
/usr/bin/python3 -c "import json,sys; s=json.load(open(sys.argv[1])); assert 0 < s['loss'] < 6 and s['batches'] == 3" "$work/eval.json"
# Hugging Face variants load: "transformer." prefix, BF16 and F16 tensors, lm_head and attn.bias buffers.
mkdir -p "$work/hf"
cp "$work/straight_fp32/latest/config.json" "$work/hf/config.json"
/usr/bin/python3 - "$work/straight_fp32/latest/model.safetensors" "$work/hf/model.safetensors" <<'PY'
import json, struct, sys
import numpy as np
source, target = sys.argv[1:]
raw = open(source, "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
header = json.loads(raw[8:8 + n]); data = raw[8 + n:]
tensors = {}
for name, meta in header.items():
    if name == "__metadata__":
        continue
    b, e = meta["data_offsets"]
    tensors[name] = np.frombuffer(data[b:e], dtype=np.float32).reshape(meta["shape"])
out_header, blobs, offset = {}, [], 0
def add(name, dtype, array_bytes, shape):
    global offset
    out_header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [offset, offset + len(array_bytes)]}
    blobs.append(array_bytes); offset += len(array_bytes)
for i, (name, array) in enumerate(tensors.items()):
    if i % 2:
        bits = (array.view(np.uint32) + 0x7FFF + ((array.view(np.uint32) >> 16) & 1)) >> 16  # round to nearest even
        add("transformer." + name, "BF16", bits.astype(np.uint16).tobytes(), array.shape)
    else:
        add("transformer." + name, "F16", array.astype(np.float16).tobytes(), array.shape)
add("lm_head.weight", "F32", tensors["wte.weight"].tobytes(), tensors["wte.weight"].shape)
add("transformer.h.0.attn.bias", "F32", np.ones((1, 1, 32, 32), np.float32).tobytes(), (1, 1, 32, 32))
text = json.dumps(out_header).encode(); text += b" " * (-len(text) % 8)
open(target, "wb").write(struct.pack("<Q", len(text)) + text + b"".join(blobs))
PY
"$ferry" eval --init-from "$work/hf/model.safetensors" --batch 2 --seq 32 --batches 3 --threads 2 --summary "$work/eval_hf.json"
/usr/bin/python3 -c "
import json,sys; a=json.load(open(sys.argv[1]))['loss']; b=json.load(open(sys.argv[2]))['loss']
assert abs(a - b) < 1e-2 * a, (a, b)" "$work/eval.json" "$work/eval_hf.json"
sed 's/"n_embd": 32/"n_embd": 64/' "$work/straight_fp32/latest/config.json" > "$work/hf/config.json"
expect_error "tensor .transformer.wte.weight. has shape" "$ferry" eval --init-from "$work/hf/model.safetensors" --batches 1
rm "$work/hf/config.json"
expect_error "pass --heads" "$ferry" eval --init-from "$work/hf/model.safetensors" --batches 1

"$ferry" train --device meta --model gpt2 --batch 4 --seq 256 --steps 1 --summary "$work/meta.json" > /dev/null
/usr/bin/python3 - "$work/meta.json" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
assert s["model"]["parameters"] == 124439808, s["model"]["parameters"]
m = s["memory"]
assert m["max_by_category"]["parameters"] >= 4 * 124439808 and m["max_by_category"]["optimizer_states"] >= 8 * 124439808
PY
echo "train CLI test passed"
