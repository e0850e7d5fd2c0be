#!/usr/bin/env bash
# Hostile and careless input (issue 19): every case is a clear error naming the file, key or flag and
# what is allowed, never a crash, a hang, an endless read or a silently wrapped number. Each command
# runs under `timeout`, so a hang fails the test instead of stalling CI.
source "$(dirname "$0")/common.sh"
root=$1
run=(timeout 60 "$ferry")
tiny=(--model gpt2-tiny --layers 2 --hidden 32 --heads 2 --vocab 256 --seq 16 --batch 2 --threads 1)

# JSON nested a million levels deep (it used to overflow the stack when an error dumped the value): the
# config, a checkpoint's trainer_state.json and a profile's profile.json are refused while parsing.
/usr/bin/python3 -c "
import sys
n = 1000000
open(sys.argv[1], 'w').write('{\"train_batch_size\": ' + '[' * n + ']' * n + '}')
" "$work/deep.json"
expect_error "config '$work/deep.json' is not valid JSON: JSON nested deeper than 64 levels" "${run[@]}" train --config "$work/deep.json" --device meta
"$ferry" train "${tiny[@]}" --steps 1 --save "$work/ck" > /dev/null
cp "$work/deep.json" "$work/ck/latest/trainer_state.json"
expect_error "trainer_state.json: JSON nested deeper than 64 levels" "${run[@]}" train "${tiny[@]}" --steps 2 --resume "$work/ck"
mkdir -p "$work/profile" && cp "$work/deep.json" "$work/profile/profile.json"
expect_error "profile.json is not valid JSON (JSON nested deeper than 64 levels" "${run[@]}" report "$work/profile"

# Numbers in the config are whole and in range, or refused with the range (they used to wrap or truncate).
for pair in "train_micro_batch_size_per_gpu 1e30" "train_micro_batch_size_per_gpu 2.7" "gradient_accumulation_steps 9223372036854775808" \
            "tensor_model_parallel_size 4294967297"; do
  set -- $pair
  echo "{\"$1\": $2}" > "$work/number.json"
  expect_error "config key '$1' is .*whole number from" "${run[@]}" train --config "$work/number.json" --device meta
done
echo '{"ferry": {"threads": 4294967297}}' > "$work/threads.json"
expect_error "key 'ferry.threads' = 4294967297" "${run[@]}" train --config "$work/threads.json" --device meta
# Flags past their ranges (products of them would overflow 64 bits; 10000 threads would start).
expect_error "--batch must be at most 16777216, got 9223372036854775807" "${run[@]}" train --batch 9223372036854775807 --device meta
expect_error "--grad-accum must be at most 16777216" "${run[@]}" train --grad-accum 9223372036854775807 --device meta
expect_error "--steps must be at most" "${run[@]}" train --steps 9223372036854775807 --device meta
expect_error "--threads must be from 0 (all cores) to" "${run[@]}" train --threads 10000 --steps 1 --device meta
expect_error "--pp must be at least 1, got 0" "${run[@]}" train --pp 0 --device meta
expect_error "--pp must be at least 1, got -2" "${run[@]}" train --pp -2 --device meta

# Files that are not files: a device that never ends, a directory.
expect_error "data file: '/dev/zero' (offset 0): is not a regular file" "${run[@]}" train --data /dev/zero --steps 1
expect_error "is a directory, not a file" "${run[@]}" train --config "$work" --steps 1
ln -sf /dev/zero "$work/ck/latest/trainer_state.json"
expect_error "trainer_state.json' (offset 0): is not a regular file" "${run[@]}" train "${tiny[@]}" --steps 2 --resume "$work/ck"

# The allocator's settings and sizes: no division by zero, no wrapped size, no capacity that wraps.
expect_error "roundup_power2_divisions: expected a power of two from 1 to 1024" \
  env FERRY_ALLOC_CONF=roundup_power2_divisions:36028797018963968 "${run[@]}" train --steps 1 --device meta
expect_error "max_split_size_mb: expected a size in MiB greater than 20 (the large-segment size) and at most" \
  env FERRY_ALLOC_CONF=max_split_size_mb:99999999999999999 "${run[@]}" train --steps 1 --device meta
expect_error "trace_entries: expected a number of trace entries from 0 to 1000000" \
  env FERRY_ALLOC_CONF=trace_entries:200000000 "${run[@]}" train --steps 1 --device meta
expect_error "more than ferry manages" "${run[@]}" train --steps 1 --device meta --device-memory 2305843009213693952
printf 'Thread,Time,Action,Pointer,Size,Stream\n1,t,allocate,0x10,18446744073709551615,0\n1,t,free,0x10,18446744073709551615,0\n' > "$work/huge.csv"
"${run[@]}" replay "$work/huge.csv" > "$work/out.txt"
grep -q "line 2: out of memory allocating 18446744073709551615 bytes" "$work/out.txt" || { echo "a 2^64-1 byte allocation did not fail:"; cat "$work/out.txt"; exit 1; }
expect_error "the trace does not fit even .* no capacity is the minimum" "${run[@]}" replay "$work/huge.csv" --find-min-capacity

# Schedules past a bound (they used to grow memory without end), and 32-bit stage numbers in a file.
expect_error "is past ferry's bound of 4194304 cells" "${run[@]}" schedule --pp 100000 --micro-batches 100000 --schedule 1f1b
# interleaved:100000 on 4 ranks grew past 800 MB (minutes); pp 64 x 4096 micro-batches was quadratic.
expect_error "a schedule of 4 ranks, 400000 stages and 8 micro-batches is past ferry's bound of 4194304 cells" \
  "${run[@]}" schedule --pp 4 --micro-batches 8 --schedule interleaved:100000
printf '# ferry pipeline schedule: name=x ranks=1 stages=100000000 micro_batches=100000000\nrank 0: 0F0 0B0\n' > "$work/big.txt"
expect_error "big.txt: a schedule of 1 ranks, 100000000 stages" "${run[@]}" schedule --from "$work/big.txt"
printf 'rank 0: 2147483647F2147483647\n' > "$work/stage.txt"
expect_error "stage.txt: a schedule of 1 ranks, 2147483648 stages and 2147483648 micro-batches" "${run[@]}" schedule --from "$work/stage.txt"
expect_error "a dry run of 100000 ranks in one process: at most 4096" "${run[@]}" train --pp 100000 --device meta
# Checkpoints users can trust: DONE records each file's XXH64 (as xxhsum -H1 prints it); a flipped byte
# or an edited config.json is named on resume; an impossible step count is refused.
"$ferry" train "${tiny[@]}" --steps 1 --save "$work/trust" > /dev/null
grep -q "  model.safetensors$" "$work/trust/latest/DONE" || { echo "DONE lacks the model's checksum:"; cat "$work/trust/latest/DONE"; exit 1; }
cp -r "$work/trust/step-00000001" "$work/flipped"
/usr/bin/python3 -c "
import sys
path = sys.argv[1]
data = bytearray(open(path, 'rb').read())
data[-5] ^= 0x40
open(path, 'wb').write(data)
" "$work/flipped/model.safetensors"
expect_error "checkpoint is corrupt: $work/flipped/model.safetensors has XXH64 .*, but DONE recorded" \
  "${run[@]}" train "${tiny[@]}" --steps 2 --resume "$work/flipped"
cp -r "$work/trust/step-00000001" "$work/edited"
sed -i 's/"n_layer": 2/"n_layer": 1/' "$work/edited/config.json"
expect_error "checkpoint is corrupt: $work/edited/config.json has XXH64" "${run[@]}" train --seq 16 --batch 2 --threads 1 --steps 2 --resume "$work/edited"
# DONE holds every file's checksum or the checkpoint is partial (an empty DONE is what a crash leaves on
# ext4; one without checksums let a damaged model load), and the error lists the intact checkpoints.
"$ferry" train "${tiny[@]}" --steps 2 --save-every 1 --save "$work/done" > /dev/null
for text in "" "step 2" "$(head -c 64 /dev/urandom | base64)"; do
  printf '%s' "$text" > "$work/done/step-00000002/DONE"
  expect_error "checkpoint '$work/done/step-00000002' is partial: its DONE marker .*; resume from one of the intact checkpoints beside it: $work/done/step-00000001" \
    "${run[@]}" train "${tiny[@]}" --steps 3 --resume "$work/done"
done
# A broken `latest` names `latest` and the intact steps (before: "partial: no DONE").
rm "$work/done/latest" && echo "my notes" > "$work/done/latest"
expect_error "\`latest\` is a file, not the link ferry keeps to the newest checkpoint; resume from one of: $work/done/step-00000001" \
  "${run[@]}" train "${tiny[@]}" --steps 3 --resume "$work/done"
rm "$work/done/latest" && mkdir "$work/done/latest"
expect_error "\`latest\` is a directory, not the link" "${run[@]}" train "${tiny[@]}" --steps 3 --resume "$work/done"
rmdir "$work/done/latest"
expect_error "checkpoint root '$work/done' has no \`latest\` link; resume from one of: $work/done/step-00000001" \
  "${run[@]}" train "${tiny[@]}" --steps 3 --resume "$work/done"
"${run[@]}" train "${tiny[@]}" --steps 2 --resume "$work/trust" > /dev/null  # the untouched one resumes
# A profile directory with rank-0 and rank-5 only: the missing ranks are named, not silently dropped.
"$ferry" train "${tiny[@]}" --steps 1 --profile "$work/ranks/rank-0" > /dev/null
cp -r "$work/ranks/rank-0" "$work/ranks/rank-5"
expect_error "holds the profiles of ranks up to rank-5 but not rank-1, rank-2, rank-3, rank-4" "${run[@]}" report "$work/ranks"

# Reports do not trust or destroy their inputs (issue 29): events that cannot have happened are named
# by index (a profile with its events repeated reported a 120 MiB peak for a 1 MiB run), columns in
# another order are refused, and an output that names an input is refused before anything is read.
"$ferry" train "${tiny[@]}" --steps 1 --profile "$work/events" > /dev/null
cp -r "$work/events" "$work/repeated"
/usr/bin/python3 - "$work/repeated/profile.json" "$work/events/profile.json" "$work/columns.json" <<'PY'
import json, sys
profile = json.load(open(sys.argv[2]))
repeated = dict(profile, events=profile["events"] + profile["events"])
json.dump(repeated, open(sys.argv[1], "w"))
reversed_columns = dict(profile, events_columns=list(reversed(profile["events_columns"])))
json.dump(reversed_columns, open(sys.argv[3], "w"))
PY
expect_error "event [0-9]* of the profile \(maps\|allocates\) .*, which \(are mapped already\|is live\).*: the profile is corrupt (events repeated" \
  "${run[@]}" report "$work/repeated"
cp "$work/columns.json" "$work/repeated/profile.json"
expect_error "\"events_columns\" is \[\"stream\",\"size\"" "${run[@]}" report "$work/repeated"
"${run[@]}" report "$work/events" --torch-snapshot "$work/events.pickle" > /dev/null
# A snapshot whose trace unmaps a segment its segments still hold at the end, or unmaps one twice.
/usr/bin/python3 - "$work/events.pickle" "$work/unknown_unmap.pickle" "$work/twice_unmap.pickle" <<'PY'
import pickle, sys
snapshot = pickle.load(open(sys.argv[1], "rb"))
trace = snapshot["device_traces"][0]
segment = snapshot["segments"][0]
unmap = dict(trace[-1], action="segment_unmap", addr=segment["address"], size=segment["total_size"])
trace.append(unmap)
pickle.dump(snapshot, open(sys.argv[2], "wb"))
trace.append(dict(unmap))
trace.append(dict(unmap, action="segment_map"))
pickle.dump(snapshot, open(sys.argv[3], "wb"))
PY
expect_error "unmaps 0x[0-9a-f]* of the segment at 0x[0-9a-f]*, which the snapshot's segments still hold at the end" "${run[@]}" report "$work/unknown_unmap.pickle"
expect_error "unmaps 0x[0-9a-f]*, which the trace unmapped at event [0-9]* and never mapped again (events repeated?)" \
  "${run[@]}" report "$work/twice_unmap.pickle"
before=$(sha256sum < "$work/events.pickle")
expect_error "--torch-snapshot '$work/events.pickle' is the report's input '$work/events.pickle': it would be overwritten" \
  "${run[@]}" report "$work/events.pickle" --torch-snapshot "$work/events.pickle"
expect_error "--summary '$work/./events.pickle' is the report's input" "${run[@]}" report "$work/events.pickle" --summary "$work/./events.pickle"
[[ $(sha256sum < "$work/events.pickle") == "$before" ]] || { echo "a refused report changed its input"; exit 1; }
expect_error "--compare takes two runs" "${run[@]}" report --compare "$work/events"
expect_error "--output '$work/events' is the report's input" "${run[@]}" report --compare "$work/events" "$work/events.pickle" --output "$work/events"
# A report that cannot be written fails before it prints (before: the whole report, then a raw
# "filesystem error").
touch "$work/a-file"
expect_error "cannot write the report into '$work/a-file/out'" "${run[@]}" report "$work/events" --output "$work/a-file/out"
[[ ! -s "$work/out.txt" ]] || { echo "the report printed before failing:"; cat "$work/out.txt"; exit 1; }
expect_error "cannot write the report into '$work/a-file/cmp'" "${run[@]}" report --compare "$work/events" "$work/events.pickle" --output "$work/a-file/cmp"
[[ ! -s "$work/out.txt" ]] || { echo "the comparison printed before failing:"; cat "$work/out.txt"; exit 1; }

# Outputs are checked before a run starts, not lost at its end.
expect_error "--summary '$work/missing/s.json': its directory '$work/missing' does not exist" \
  "${run[@]}" train "${tiny[@]}" --steps 1 --summary "$work/missing/s.json"
if grep -q "step " "$work/out.txt"; then echo "the run trained before its --summary target was refused"; exit 1; fi
expect_error "--summary '$work' is a directory" "${run[@]}" train "${tiny[@]}" --steps 1 --summary "$work"
touch "$work/a-file"
expect_error "--save '$work/a-file/ck': '$work/a-file' is not a directory" "${run[@]}" train "${tiny[@]}" --steps 1 --save "$work/a-file/ck"

# Pinned host memory is a budget: --offload-buffer-count buffers of one sub-group must fit
# --offload-buffer-size, and that size is bounded by the machine.
wide=(--model gpt2-tiny --layers 2 --hidden 128 --heads 2 --vocab 256 --seq 16 --batch 2 --threads 1 --steps 1
      --offload-optimizer nvme --nvme-path "$work/nvme")
expect_error "--offload-buffer-size 256.00 MiB cannot hold --offload-buffer-count 300 buffers of at least one 1.00 MiB I/O chunk" \
  "${run[@]}" train "${wide[@]}" --offload-buffer-count 300
expect_error "need 8.00 MiB of host memory, past --offload-buffer-size 4.00 MiB: lower the sub-group to at most 174762 elements" \
  "${run[@]}" train "${wide[@]}" --offload-buffer-size 4MiB --offload-buffer-count 2 --offload-sub-group 300000
expect_error "--offload-buffer-size 100TiB is more than half of this machine's" "${run[@]}" train "${wide[@]}" --offload-buffer-size 100TiB
"${run[@]}" train "${wide[@]}" --offload-buffer-size 8MiB --offload-buffer-count 2 --offload-sub-group 300000 > /dev/null

# The cpu device's default limit leaves the machine room (three quarters of the RAM, so
# ferry's out-of-memory advice comes before the kernel's OOM killer); a limit past the RAM is said.
"${run[@]}" train "${tiny[@]}" --steps 1 --summary "$work/default_limit.json" > /dev/null
/usr/bin/python3 - "$work/default_limit.json" <<'PY'
import json, sys
limit = json.load(open(sys.argv[1]))["memory"]["device_memory_limit"]
total = next(int(line.split()[1]) * 1024 for line in open("/proc/meminfo") if line.startswith("MemTotal:"))
assert 0 < limit <= total * 3 // 4, (limit, total)
PY
"${run[@]}" train "${tiny[@]}" --steps 1 --device-memory 1TiB > /dev/null 2> "$work/warning.txt"
grep -q "warning: --device-memory 1.00 TiB exceeds this machine's .* of RAM" "$work/warning.txt" || { cat "$work/warning.txt"; exit 1; }
expect_error "--device-memory 100.00 TiB: this machine cannot reserve the address space for a device that large" \
  "${run[@]}" train "${tiny[@]}" --steps 1 --device-memory 100TiB

# SIGKILL at moments spread over a run that saves every step (most of its time is in saves: writes,
# fsyncs, renames): whenever it dies, the save root resumes, and the next save clears what was left.
for delay in 0.4 0.7 1.0 1.3 1.6; do
  "$ferry" train "${tiny[@]}" --steps 100000 --save-every 1 --save "$work/killed" --overwrite-checkpoints > /dev/null 2>&1 &
  pid=$!
  sleep "$delay"
  kill -9 "$pid" 2> /dev/null || true
  wait "$pid" 2> /dev/null || true
  [[ -e "$work/killed/latest" ]] || continue  # killed before the first checkpoint
  "${run[@]}" train "${tiny[@]}" --steps 100000 --exit-interval 1 --resume "$work/killed" --save "$work/killed" \
    > "$work/resumed.txt" 2>&1 || { echo "no resume after a SIGKILL at ${delay}s:"; cat "$work/resumed.txt"; ls -la "$work/killed"; exit 1; }
  if compgen -G "$work/killed/*.tmp.*" > /dev/null || compgen -G "$work/killed/*/*.tmp.*" > /dev/null; then
    echo "temporaries left after the next save:"; ls -laR "$work/killed"; exit 1
  fi
done

# No value is silently replaced (issue 29). An empty value (an unset shell variable) is an error for
# every flag and config key; before, --save "" saved nothing, --resume "" started from scratch and
# --steps "" ran no step, each exiting 0.
for flag in --save --resume --steps --data --lr --model --checkpointing --metrics; do
  expect_error "^$flag: an empty value (an unset shell variable?)" "${run[@]}" train "${tiny[@]}" --steps 1 "$flag" ""
done
expect_error "an empty value" "${run[@]}" report ""
expect_error "an empty value" "${run[@]}" replay --capacity "" "$work/huge.csv"
echo '{"ferry": {"save": ""}}' > "$work/empty.json"
expect_error "key 'ferry.save' = : --save: an empty value" "${run[@]}" train --config "$work/empty.json" "${tiny[@]}" --steps 1
echo '{"zero_optimization": {"offload_optimizer": {"device": "nvme", "nvme_path": ""}}}' > "$work/empty.json"
expect_error "config key 'zero_optimization.offload_optimizer.nvme_path' is empty" "${run[@]}" train --config "$work/empty.json" "${tiny[@]}" --steps 1
# --model beside --resume: no preset, or another shape than the checkpoint's, is refused (it was ignored).
"$ferry" train --model gpt2-tiny --steps 1 --batch 2 --seq 16 --threads 1 --save "$work/preset" > /dev/null
expect_error "unknown --model 'gpt-9000' beside --resume" "${run[@]}" train --model gpt-9000 --steps 2 --batch 2 --seq 16 --resume "$work/preset"
expect_error "--model gpt2 contradicts the checkpoint '.*', whose model has 4 layers of width 128" \
  "${run[@]}" train --model gpt2 --steps 2 --batch 2 --seq 16 --resume "$work/preset"
"${run[@]}" train --model gpt2-tiny --steps 2 --batch 2 --seq 16 --threads 1 --resume "$work/preset" > /dev/null
# config.json values ferry does not compute are refused, not ignored.
cp -r "$work/preset/step-00000001" "$work/hf_other"
for pair in 'activation_function "relu"' 'layer_norm_epsilon 1e-6' 'n_inner 100' 'tie_word_embeddings false'; do
  set -- $pair
  /usr/bin/python3 -c "import json,sys; c=json.load(open(sys.argv[1])); c[sys.argv[2]]=json.loads(sys.argv[3]); json.dump(c, open(sys.argv[1],'w'))" \
    "$work/hf_other/config.json" "$1" "$2"
  expect_error "\"$1\" is .*, but ferry computes .*; it would train another model" \
    "${run[@]}" train --init-from "$work/hf_other/model.safetensors" --steps 1 --batch 2 --seq 16
  cp "$work/preset/step-00000001/config.json" "$work/hf_other/config.json"
done
# Recompute policies past the model's blocks are refused with the bound (first:100 on 2 blocks was full).
expect_error "--checkpointing first:100: the model has 2 blocks, so first:2 is the most" "${run[@]}" train "${tiny[@]}" --steps 1 --checkpointing first:100
expect_error "--checkpointing every:5: the model has 2 blocks, so every:5 recomputes none of them" \
  "${run[@]}" train "${tiny[@]}" --steps 1 --checkpointing every:5
# DeepSpeed configs as people write them: whole numbers written as floats are those integers (2.5 is
# not); "type": "Adam" is AdamW (adam_w_mode true, DeepSpeed's default), with adam_w_mode false refused;
# train_batch_size derives the factor not given, as DeepSpeed does.
echo '{"zero_optimization": {"stage": 1, "reduce_bucket_size": 5e8, "allgather_bucket_size": 2e4, "sub_group_size": 1e9},
       "optimizer": {"type": "Adam", "params": {"lr": 1e-3}}, "train_batch_size": 8, "train_micro_batch_size_per_gpu": 2}' > "$work/ds.json"
"${run[@]}" train --config "$work/ds.json" "${tiny[@]}" --steps 1 --device meta --dp 2 --summary "$work/ds_summary.json" > "$work/ds.txt"
grep -q "note: train_batch_size 8 = micro-batch 2 x accumulation 2 x 2 data-parallel ranks" "$work/ds.txt" || { cat "$work/ds.txt"; exit 1; }
/usr/bin/python3 - "$work/ds_summary.json" <<'PY'
import json, sys
grid = json.load(open(sys.argv[1]))["grid"]
assert grid["reduce_bucket_elements"] == 500000000 and grid["allgather_bucket_elements"] == 20000, grid
assert grid["micro_batches"] == 2 and grid["global_batch"] == 8, grid
PY
echo '{"zero_optimization": {"reduce_bucket_size": 2500.5}}' > "$work/ds.json"
expect_error "config key 'zero_optimization.reduce_bucket_size' is 2500.5: it must be a whole number" "${run[@]}" train --config "$work/ds.json" --device meta
echo '{"optimizer": {"type": "Adam", "params": {"adam_w_mode": false}}}' > "$work/ds.json"
expect_error "optimizer 'Adam' with adam_w_mode false is Adam with L2 regularization" "${run[@]}" train --config "$work/ds.json" --device meta
echo '{"optimizer": {"type": "SGD"}}' > "$work/ds.json"
expect_error "config key 'optimizer.type' is 'SGD': ferry trains with AdamW" "${run[@]}" train --config "$work/ds.json" --device meta
echo '{"train_batch_size": 8}' > "$work/ds.json"
"${run[@]}" train --config "$work/ds.json" --model gpt2-tiny --seq 16 --steps 1 --device meta > "$work/ds.txt"
grep -q "note: train_batch_size 8 = micro-batch 8 x accumulation 1 x 1 data-parallel ranks" "$work/ds.txt" || { cat "$work/ds.txt"; exit 1; }
echo '{"train_batch_size": 7, "gradient_accumulation_steps": 2}' > "$work/ds.json"
expect_error "train_batch_size 7 is not a multiple of gradient_accumulation_steps (--grad-accum) 2 x 1 data-parallel ranks = 2" \
  "${run[@]}" train --config "$work/ds.json" --device meta

# Bounded work from small inputs. A sub-group of one element padded to a 1 MiB NVMe chunk each (a 40 GB
# file for a small model) is refused with the smallest that is not mostly padding; the NVMe file has no
# name while the run holds it, so SIGTERM (or any end) leaves nothing in --nvme-path.
mkdir -p "$work/nvme"
expect_error "--offload-sub-group 1: each sub-group's state (12 B) is padded on NVMe to a whole 1.00 MiB I/O chunk, so the file would hold .*; give at least 87382 elements" \
  "${run[@]}" train "${tiny[@]}" --steps 1 --offload-optimizer nvme --nvme-path "$work/nvme" --offload-sub-group 1
"$ferry" train "${tiny[@]}" --steps 100000 --offload-optimizer nvme --nvme-path "$work/nvme" > /dev/null 2>&1 &
pid=$!
sleep 2
kill -TERM "$pid"; wait "$pid" 2> /dev/null || true
[[ -z "$(ls -A "$work/nvme")" ]] || { echo "SIGTERM left files in --nvme-path:"; ls -la "$work/nvme"; exit 1; }
expect_error "data file: '/dev/zero' (offset 0): is not a regular file\|'/dev/zero' (offset 0): is not a regular file" "${run[@]}" replay /dev/zero

# A save never destroys what it did not write (issue 29). Two runs into one root at once: the second is
# refused, naming the first's PID, and the first goes on saving.
"$ferry" train "${tiny[@]}" --steps 100000 --save-every 50 --save "$work/shared" > /dev/null 2>&1 &
first=$!
for _ in $(seq 100); do [[ -e "$work/shared/latest" ]] && break; sleep 0.1; done
expect_error "--save '$work/shared' is in use by another ferry run (PID $first on host" \
  "${run[@]}" train "${tiny[@]}" --steps 2 --save "$work/shared" --overwrite-checkpoints
kill "$first" && wait "$first" 2> /dev/null || true
# A new run into a root with another run's checkpoints is refused (it overwrote them, and with
# --keep-checkpoints 1 deleted them at its first save); resuming from it or --overwrite-checkpoints saves.
"$ferry" train "${tiny[@]}" --steps 2 --save "$work/theirs" > /dev/null
before=$(cd "$work/theirs" && sha256sum step-*/* | sha256sum)
expect_error "--save '$work/theirs' holds 1 checkpoint of another run (the newest step-00000002): a new run would overwrite them" \
  "${run[@]}" train "${tiny[@]}" --steps 2 --seed 5 --save "$work/theirs" --keep-checkpoints 1
[[ $(cd "$work/theirs" && sha256sum step-*/* | sha256sum) == "$before" ]] || { echo "a refused run changed the root"; exit 1; }
expect_error "--overwrite-checkpoints needs --save" "${run[@]}" train "${tiny[@]}" --steps 1 --overwrite-checkpoints
"${run[@]}" train "${tiny[@]}" --steps 3 --resume "$work/theirs" --save "$work/theirs" > /dev/null
"${run[@]}" train "${tiny[@]}" --steps 2 --seed 5 --save "$work/theirs" --overwrite-checkpoints > /dev/null
# A user's own step-N directory and file named `latest` are never replaced, nor removed by cleanup.
mkdir -p "$work/user/step-00000002" "$work/user/step-00000009" && echo mine > "$work/user/step-00000002/notes.txt"
expect_error "'$work/user/step-00000002' exists and is not a checkpoint ferry wrote" "${run[@]}" train "${tiny[@]}" --steps 2 --save "$work/user"
[[ $(cat "$work/user/step-00000002/notes.txt") == mine && -d "$work/user/step-00000009" ]] || { echo "a user's step directory was touched"; exit 1; }
rm -r "$work/user/step-00000002" && echo "my notes" > "$work/user/latest"
expect_error "its \`latest\` is a file ferry did not write" "${run[@]}" train "${tiny[@]}" --steps 2 --save "$work/user"
[[ $(cat "$work/user/latest") == "my notes" && -d "$work/user/step-00000009" ]] || { echo "a user's latest was touched"; exit 1; }

# --metrics on a full disk (a tmpfs of 8 KiB, in a mount namespace of its own): each line whole or not
# at all, said once, and the run trains on (before: a half line, and the run died).
mkdir -p "$work/full"
unshare -m bash -c '
  set -euo pipefail
  mount -t tmpfs -o size=8k tmpfs "$1"
  shift
  out=$1; shift
  "$@" --metrics "$(dirname "$out")/full/metrics.jsonl" --summary "$out.json" > /dev/null 2> "$out.err"
  cp "$(dirname "$out")/full/metrics.jsonl" "$out.jsonl"
' _ "$work/full" "$work/metrics_full" "${run[@]}" train "${tiny[@]}" --steps 40 --log-every 1000 ||
  { echo "a full --metrics disk ended the run:"; cat "$work/metrics_full.err"; exit 1; }
[[ $(grep -c "warning: --metrics '$work/full/metrics.jsonl' stopped: writing step .*'s line failed" "$work/metrics_full.err") == 1 ]] ||
  { echo "metrics stopping not said once:"; cat "$work/metrics_full.err"; exit 1; }
/usr/bin/python3 - "$work/metrics_full" <<'PY'
import json, sys
lines = open(sys.argv[1] + ".jsonl", "rb").read()
assert lines.endswith(b"\n"), lines[-80:]
steps = [json.loads(line)["step"] for line in lines.splitlines()]
assert 0 < len(steps) < 40 and steps == list(range(1, len(steps) + 1)), steps
summary = json.load(open(sys.argv[1] + ".json"))
assert len(summary["steps"]) == 40 and "the file ends with the last whole line" in summary["metrics_stopped"], summary.get("metrics_stopped")
PY

# Paths that are not UTF-8 (a Latin-1 name): every output is written, JSON names them with U+FFFD, and
# the checkpoint resumes and the profile reports.
odd=$work/$'caf\xe9'
mkdir -p "$odd"
head -c 30000 "$root/data/corpus/tiny-stories.txt" > "$odd/data.txt"
"${run[@]}" train "${tiny[@]}" --steps 2 --data "$odd/data.txt" --save "$odd/ck" --summary "$odd/summary.json" \
  --metrics "$odd/metrics.jsonl" --profile "$odd/profile" > /dev/null
[[ -e "$odd/ck/latest/DONE" && $(wc -l < "$odd/metrics.jsonl") == 2 ]]
/usr/bin/python3 - "$odd/summary.json" <<'PY'
import json, sys
summary = json.load(open(sys.argv[1].encode("utf-8", "surrogateescape"), encoding="utf-8"))
assert "caf\ufffd" in summary["run"]["data"], summary["run"]["data"]
PY
"${run[@]}" train "${tiny[@]}" --steps 3 --data "$odd/data.txt" --resume "$odd/ck" > /dev/null
"${run[@]}" report "$odd/profile" > /dev/null
# Numbers CLI11 would wrap or read loosely: a negative or 65-bit seed, a boolean given as 2, no device memory.
expect_error "'-1' is not a seed: give a whole number from 0 to 18446744073709551615" "${run[@]}" train "${tiny[@]}" --steps 1 --device meta --seed -1
expect_error "'18446744073709551616' is not a seed" "${run[@]}" train "${tiny[@]}" --steps 1 --device meta --seed 18446744073709551616
expect_error "'2' is neither true nor false" "${run[@]}" train "${tiny[@]}" --steps 1 --device meta --overlap-comm 2
expect_error "--device-memory 0: a device needs memory" "${run[@]}" train "${tiny[@]}" --steps 1 --device meta --device-memory 0
expect_error "--dry-run-of: an empty value" "${run[@]}" train "${tiny[@]}" --steps 1 --device meta --dry-run-of ''
"${run[@]}" train "${tiny[@]}" --steps 1 --device meta --seed 18446744073709551615 --overlap-comm FALSE > /dev/null
echo "hostile input: clear errors, no crash, hang or wrapped number"
