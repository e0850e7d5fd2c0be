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

# 2. Resume is exact: 6 steps straight == 3 steps, save, resume to 6 (shuffled data, grad accumulation, dropout).
run=("$ferry" train "${tiny[@]}" --grad-accum 2 --dropout 0.1 --lr-schedule cosine --warmup-steps 2)
"${run[@]}" --steps 6 --save "$work/straight" --summary "$work/straight.json" > /dev/null
"${run[@]}" --steps 3 --save "$work/resumed" > /dev/null
"${run[@]}" --steps 6 --resume "$work/resumed" --save "$work/resumed" --summary "$work/resumed.json" > /dev/null
for file in model.safetensors optimizer.safetensors config.json DONE; do
  cmp "$work/straight/$file" "$work/resumed/$file"
done
/usr/bin/python3 - "$work/straight.json" "$work/resumed.json" <<'PY'
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:])
assert [s["loss"] for s in a["steps"][3:]] == [s["loss"] for s in b["steps"]], "resumed losses differ"
assert b["steps"][0]["step"] == 4
PY

# The same for bf16 (bf16 parameters are the rounded f32 master weights the checkpoint holds).
"${run[@]}" --precision bf16 --steps 4 --save "$work/bf16_straight" > /dev/null
"${run[@]}" --precision bf16 --steps 2 --save "$work/bf16_resumed" > /dev/null
"${run[@]}" --precision bf16 --steps 4 --resume "$work/bf16_resumed" --save "$work/bf16_resumed" > /dev/null
cmp "$work/bf16_straight/model.safetensors" "$work/bf16_resumed/model.safetensors"
cmp "$work/bf16_straight/optimizer.safetensors" "$work/bf16_resumed/optimizer.safetensors"
# And for fp16 with dynamic loss scaling (the flags reach the scaler; power-of-two scales unscale exactly,
# so a resumed run that restarts the scale without an overflow is byte-identical).
fp16=(--precision fp16 --initial-scale-power 12 --hysteresis 3 --loss-scale-window 3)
"${run[@]}" "${fp16[@]}" --steps 4 --save "$work/fp16_straight" --summary "$work/fp16.json" > /dev/null
"${run[@]}" "${fp16[@]}" --steps 2 --save "$work/fp16_resumed" > /dev/null
"${run[@]}" "${fp16[@]}" --steps 4 --resume "$work/fp16_resumed" --save "$work/fp16_resumed" > /dev/null
cmp "$work/fp16_straight/model.safetensors" "$work/fp16_resumed/model.safetensors"
cmp "$work/fp16_straight/optimizer.safetensors" "$work/fp16_resumed/optimizer.safetensors"
/usr/bin/python3 - "$work/fp16.json" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
scaling = s["loss_scaling"]
assert s["run"]["precision"] == "fp16"
assert scaling["dynamic"] and scaling["hysteresis"] == 3 and scaling["skipped_steps"] == 0, scaling
assert [step["loss_scale"] for step in s["steps"]] == [4096, 4096, 4096, 8192], s["steps"]  # doubled after 3 clean steps
assert scaling["scale"] == 8192 and scaling["scale_increases"] == 1, scaling
PY

# Recompute policies give the same losses as none (dropout on); auto picks the least recompute that fits.
for policy in full selective every:2; do
  "${run[@]}" --steps 2 --checkpointing "$policy" --summary "$work/policy.json" > /dev/null
  /usr/bin/python3 - "$work/straight.json" "$work/policy.json" "$policy" <<'PY'
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
assert [s["loss"] for s in a["steps"][:2]] == [s["loss"] for s in b["steps"]], sys.argv[3]
assert b["run"]["checkpointing"] == sys.argv[3]
PY
done
"$ferry" train "${tiny[@]}" --steps 1 --checkpointing auto --device-memory 1GiB > "$work/auto.txt"
grep -q "checkpointing auto: none" "$work/auto.txt"
expect_error "no recompute policy fits --device-memory" "$ferry" train "${tiny[@]}" --steps 1 --checkpointing auto --device-memory 1MiB
expect_error "not one of none, full, selective" "$ferry" train "${tiny[@]}" --steps 1 --checkpointing some

# 3. Broken checkpoints and bad resumes are clear errors.
cp -r "$work/resumed" "$work/partial" && rm "$work/partial/DONE"
expect_error "partial" "${run[@]}" --steps 8 --resume "$work/partial"
cp -r "$work/resumed" "$work/corrupt" && truncate -s 1000 "$work/corrupt/model.safetensors"
expect_error "corrupt" "${run[@]}" --steps 8 --resume "$work/corrupt"
expect_error "does not exist" "${run[@]}" --steps 8 --resume "$work/missing"
expect_error "batch = 2" "$ferry" train "${shape[@]}" --grad-accum 2 --dropout 0.1 --batch 3 --steps 8 --resume "$work/resumed"

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

# 5. Bad flags and data.
expect_error "precision 'fp8'" "$ferry" train "${tiny[@]}" --precision fp8 --steps 1
expect_error "not one of constant, cosine" "$ferry" train "${tiny[@]}" --lr-schedule linear --steps 1
expect_error "cannot open data file" "$ferry" train "${tiny[@]}" --data "$work/none.txt" --steps 1
expect_error "use --vocab" "$ferry" train "${tiny[@]}" --vocab 100 --steps 1
printf 'x%.0s' {1..20} > "$work/short.txt"
expect_error "use a smaller --batch or --seq" "$ferry" train "${tiny[@]}" --data "$work/short.txt" --steps 1
expect_error "out of memory" "$ferry" train "${tiny[@]}" --device-memory 1MiB --steps 1

# 6. eval reads what train saved; a meta dry run of gpt2 (124M) allocates the real shapes without memory.
"$ferry" eval --init-from "$work/straight/model.safetensors" --batch 2 --seq 32 --batches 3 --threads 2 --summary "$work/eval.json"
/usr/bin/python3 -c "import json,sys; s=json.load(open(sys.argv[1])); assert 0 < s['loss'] < 6 and s['batches'] == 3" "$work/eval.json"
# Hugging Face variants load: "transformer." prefix, BF16 and F16 tensors, lm_head and attn.bias buffers.
mkdir -p "$work/hf"
cp "$work/straight/config.json" "$work/hf/config.json"
/usr/bin/python3 - "$work/straight/model.safetensors" "$work/hf/model.safetensors" <<'PY'
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
sed 's/"n_embd": 32/"n_embd": 64/' "$work/straight/config.json" > "$work/hf/config.json"
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
