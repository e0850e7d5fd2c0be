#!/usr/bin/env bash
# Pipeline training across processes (mpirun, more ranks than cores): every schedule with --pp 2 and
# --pp 4 gives the per-step losses of one rank with the same global batch (1e-5 relative in fp32), with
# ZeRO-Offload too; the summary on rank 0 lists every rank, each with its predicted activation stash
# equal to the measured one byte for byte; a bad flag on every rank, or a launch with the wrong rank
# count, fails fast with one clear error instead of hanging.
source "$(dirname "$0")/common.sh"
mpirun=${MPIRUN:-mpirun}
launch() {  # launch RANKS ARGS...: ferry under mpirun, one rank per core or more
  local ranks=$1; shift
  timeout 300 "$mpirun" --allow-run-as-root --oversubscribe -np "$ranks" "$ferry" "$@"
}
model=(--model gpt2-tiny --layers 8 --hidden 32 --heads 2 --vocab 256 --seq 16 --batch 2 --steps 3 --lr 3e-3 --threads 1)

"$ferry" train "${model[@]}" --grad-accum 4 --summary "$work/one.json" > "$work/one.txt"

compare() {  # compare SUMMARY RANKS: same losses as one rank, and a memory entry per rank
  /usr/bin/python3 - "$work/one.json" "$1" "$2" <<'PY'
import json, sys
one, pipe = (json.load(open(path)) for path in sys.argv[1:3])
ranks = int(sys.argv[3])
expected = [step["loss"] for step in one["steps"]]
actual = [step["loss"] for step in pipe["steps"]]
assert len(expected) == len(actual) == 3, (expected, actual)
for e, a in zip(expected, actual):
    assert abs(a - e) <= 1e-5 * abs(e), f"{pipe['pipeline']['schedule']} pp {ranks}: {actual} vs {expected}"
assert pipe["pipeline"]["processes"] == ranks and len(pipe["ranks"]) == ranks, pipe["pipeline"]
assert sorted(entry["rank"] for entry in pipe["ranks"]) == list(range(ranks))
for entry in pipe["ranks"]:
    assert entry["peak_allocated"] > 0 and entry["max_by_category"]["activations"] > 0, entry
# Each rank's activation stash, predicted by replaying its actions with its chunks' bytes, equals the
# measured one byte for byte.
wrong = [(e["rank"], e["activation_stash"]["predicted_peak"], e["activation_stash"]["peak"]) for e in pipe["ranks"]
         if e["activation_stash"]["predicted_peak"] != e["activation_stash"]["peak"]]
assert not wrong, f"{pipe['pipeline']['schedule']} pp {ranks}: (rank, predicted, measured) {wrong}"
PY
}

for ranks in 2 4; do
  for schedule in gpipe 1f1b 1f1b-deep interleaved:2 zb-h1; do
    launch "$ranks" train "${model[@]}" --pp "$ranks" --micro-batches 4 --schedule "$schedule" --summary "$work/pipe.json" \
      > "$work/pipe.txt" 2>&1 || { cat "$work/pipe.txt"; exit 1; }
    compare "$work/pipe.json" "$ranks"
    echo "pp $ranks $schedule: same losses as one rank"
  done
done

# --device-memory: the cost-balanced split of a 4096-token vocabulary's model (3 + 1 blocks: its LM head
# costs about ten blocks) needs 8 MiB on rank 0 with GPipe's 16 micro-batches; every rank picks 2 + 2 by
# the same dry runs, and stays within 6 MiB.
launch 2 train --model gpt2-tiny --layers 4 --hidden 32 --heads 2 --vocab 4096 --seq 16 --batch 2 --steps 2 --threads 1 --pp 2 \
  --micro-batches 16 --schedule gpipe --device-memory 6MiB --summary "$work/memory.json" > "$work/memory.txt" 2>&1 \
  || { cat "$work/memory.txt"; exit 1; }
grep -q "the cost-balanced split does not fit --device-memory 6.00 MiB; blocks moved for memory" "$work/memory.txt" \
  || { echo "no word of the moved split:"; cat "$work/memory.txt"; exit 1; }
/usr/bin/python3 - "$work/memory.json" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
assert [p["blocks"] for p in s["pipeline"]["partition"]] == [[0, 2], [2, 4]], s["pipeline"]
assert all(r["peak_reserved"] <= 6 << 20 for r in s["ranks"]), [r["peak_reserved"] for r in s["ranks"]]
PY
echo "pp 2 --device-memory 6MiB: blocks moved for memory, every rank within the limit"

# ZeRO-Offload on every rank (nvme: a directory per rank under --nvme-path), the tied table's gradient
# summed between host copies: still one rank's losses.
for offload in cpu nvme; do
  nvme=(); [[ $offload == nvme ]] && nvme=(--nvme-path "$work/nvme")
  launch 2 train "${model[@]}" --pp 2 --micro-batches 4 --schedule zb-h1 --offload-optimizer "$offload" "${nvme[@]}" \
    --summary "$work/pipe.json" > "$work/pipe.txt" 2>&1 || { cat "$work/pipe.txt"; exit 1; }
  compare "$work/pipe.json" 2
  /usr/bin/python3 -c "
import json, sys
s = json.load(open(sys.argv[1]))
assert [r['optimizer']['mode'] for r in s['ranks']] == [sys.argv[2]] * 2, s['ranks']
assert s['memory']['host_pinned_peak'] == sum(r['host_pinned_peak'] for r in s['ranks']) > 0, s['memory']
" "$work/pipe.json" "$offload"
  echo "pp 2 zb-h1 --offload-optimizer $offload: same losses as one rank"
done
[[ -d $work/nvme/rank-0 && -d $work/nvme/rank-1 ]] || { echo "no NVMe directory per rank"; ls -R "$work/nvme"; exit 1; }

# A flag every rank rejects, and a launch whose rank count does not match --pp: an error, no hang.
if launch 2 train "${model[@]}" --pp 2 --schedule fastest > "$work/out.txt" 2> "$work/err.txt"; then echo "accepted --schedule fastest"; exit 1; fi
[[ $? -ne 124 ]] || { echo "mpirun hung on a bad schedule"; exit 1; }
grep -q "fastest" "$work/err.txt" || { echo "no error naming the schedule:"; cat "$work/err.txt"; exit 1; }
if launch 3 train "${model[@]}" --pp 2 > "$work/out.txt" 2> "$work/err.txt"; then echo "accepted 3 ranks for --pp 2"; exit 1; fi
grep -q "mpirun -np 2" "$work/err.txt" || { echo "no error naming the launch:"; cat "$work/err.txt"; exit 1; }
# Out of memory in a pipeline: as for one rank, the error names the rank and step, lists what would fit
# (dry runs of every stage) and saves the failing rank's profile, in one process and under mpirun.
oom=(train --pp 2 --micro-batches 4 --layers 4 --hidden 64 --heads 4 --seq 64 --batch 4 --steps 2 --threads 1 --device-memory 3MiB)
(cd "$work" && expect_error "out of device memory on pipeline rank 0 in step 1" "$ferry" "${oom[@]}")
for pattern in "a dry run of this configuration peaks at 8.00 MiB reserved against the limit of 3.00 MiB" \
               "--checkpointing full .* does not fit" "--batch 1 --micro-batches 16" "in ferry-oom-profile/rank-0"; do
  grep -q -- "$pattern" "$work/err.txt" || { echo "the pipeline's out-of-memory error lacks '$pattern':"; cat "$work/err.txt"; exit 1; }
done
"$ferry" report "$work/ferry-oom-profile/rank-0" > /dev/null
mkdir -p "$work/mpi_oom"
if (cd "$work/mpi_oom" && launch 2 "${oom[@]}" > "$work/out.txt" 2> "$work/err.txt"); then echo "an out-of-memory pipeline succeeded"; exit 1; fi
grep -q "rank 0 of 2: out of device memory on pipeline rank 0 in step 1" "$work/err.txt" && grep -q -- "--offload-optimizer cpu" "$work/err.txt" ||
  { echo "mpirun's out-of-memory error lacks the rank or the advice:"; cat "$work/err.txt"; exit 1; }
[[ -f $work/mpi_oom/ferry-oom-profile/rank-0/profile.json ]] || { echo "no profile of the failing rank under mpirun"; ls -R "$work/mpi_oom"; exit 1; }

# --profile: one profile per rank; `ferry report` puts every rank on one timeline (a process per rank,
# rank 1's first block forward after rank 0's).
launch 2 train "${model[@]}" --pp 2 --micro-batches 4 --profile "$work/profile" > "$work/out.txt" 2>&1 || { cat "$work/out.txt"; exit 1; }
"$ferry" report "$work/profile" > "$work/report.txt"
grep -q "rank 1" "$work/report.txt" || { echo "the report lacks rank 1"; exit 1; }
/usr/bin/python3 - "$work/profile/trace.json" <<'PY'
import json, sys
events = json.load(open(sys.argv[1]))["traceEvents"]
assert sorted({e["pid"] for e in events}) == [0, 1], "one process per rank"
names = [e["args"]["name"] for e in events if e["name"] == "process_name"]
assert names[0].startswith("rank 0") and names[1].startswith("rank 1"), names
first = {pid: min(e["ts"] for e in events if e["pid"] == pid and e["ph"] == "X" and e["name"].startswith("forward h.")) for pid in (0, 1)}
assert first[0] < first[1], first
PY

# The schedules' memory benchmark (dry runs on meta): early backward's stage 0 keeps p of m micro-batches.
"$ferry" bench memory --layers 4 --hidden 32 --heads 2 --vocab 256 --seq 16 --batch 2 --pp 2 --micro-batches 4,8 \
  --schedules gpipe,1f1b --output "$work/bench" > "$work/bench.txt"
/usr/bin/python3 - "$work/bench/pipeline.json" <<'PY'
import json, sys
rows = {(r["micro_batches"], r["schedule"]): r for r in json.load(open(sys.argv[1]))["rows"]}
for m in (4, 8):
    gpipe, early = rows[(m, "gpipe")], rows[(m, "1f1b")]
    assert early["stage0_activation_vs_gpipe"] <= early["goal_vs_gpipe"], early
    for stage in gpipe["stages"] + early["stages"]:
        assert stage["stash_peak"] == stage["stash_predicted"], stage
    assert abs(gpipe["simulated_bubble"] - (2 - 1) / (m + 2 - 1)) < 1e-9, gpipe
PY
echo "cli.pipeline: ok"
