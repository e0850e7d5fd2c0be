#!/usr/bin/env bash
# `ferry train --profile` and `ferry report` end to end: the table, a Chrome trace whose counters add up
# to the summary's peak, a self-contained report.html that headless Chromium renders without errors;
# and running out of device memory: the profile up to the failure is saved, the advice is predicted by
# dry runs, and the first option said to fit does fit, at the predicted peak.
root=$1
source "$(dirname "$0")/common.sh"
shape=(--layers 2 --hidden 32 --heads 2 --seq 32 --batch 2 --threads 2 --log-every 100)

# 1. Profile three steps (the default) of a run with full recompute, then report it.
"$ferry" train "${shape[@]}" --steps 4 --checkpointing full --profile "$work/profile" --summary "$work/summary.json" > "$work/train.txt"
grep -q "memory profile in $work/profile" "$work/train.txt"
"$ferry" report "$work/profile" > "$work/report.txt"
for expected in "category" "parameters" "activations" "allocated" "reserved" "peak:" "largest live allocations at the peak" "trace.json"; do
  grep -q -- "$expected" "$work/report.txt" || { echo "report lacks '$expected'"; cat "$work/report.txt"; exit 1; }
done
/usr/bin/python3 - "$work/profile" "$work/summary.json" <<'PY'
import json, sys
directory, summary = sys.argv[1], json.load(open(sys.argv[2]))
profile = json.load(open(directory + "/profile.json"))
assert profile["metadata"]["profiled_steps"] == [1, 3], profile["metadata"]
trace = json.load(open(directory + "/trace.json"))
events = trace["traceEvents"]
counters = [e for e in events if e["ph"] == "C"]
slices = [e for e in events if e["ph"] == "X"]
categories = {"parameters", "gradients", "optimizer_states", "activations", "workspace"}
assert categories <= {e["name"] for e in counters}, {e["name"] for e in counters}
# Replaying the counters gives the summary's peak allocated exactly (all of it happened in the window).
current, peak = {}, 0
for e in sorted(counters, key=lambda e: e["ts"]):
    if e["name"] == "reserved":
        continue
    current[e["name"]] = e["args"]["bytes"]
    peak = max(peak, sum(current.values()))
assert peak == summary["memory"]["peak_allocated"], (peak, summary["memory"]["peak_allocated"])
reserved = max(e["args"]["bytes"] for e in counters if e["name"] == "reserved")
assert reserved == summary["memory"]["peak_reserved"], (reserved, summary["memory"]["peak_reserved"])
kinds = {e["cat"] for e in slices}
assert {"step", "forward", "backward", "recompute", "loss", "optimizer", "copy"} <= kinds, kinds
assert all(e["tid"] == 0 and e["dur"] >= 0 for e in slices)
steps = [e for e in slices if e["cat"] == "step"]
assert [e["name"] for e in steps] == ["step 1", "step 2", "step 3"], steps
# Ops nest: every block op lies inside a step.
for e in slices:
    if e["cat"] in ("forward", "backward", "recompute"):
        assert any(s["ts"] <= e["ts"] and e["ts"] + e["dur"] <= s["ts"] + s["dur"] + 1 for s in steps) or e["ts"] < steps[0]["ts"], e
recomputes = [e["name"] for e in slices if e["cat"] == "recompute"]
assert recomputes.count("recompute h.0") == 3 and recomputes.count("recompute h.1") == 3, recomputes
PY
html="$work/profile/report.html"
if grep -Eo '(src|href)="[^"#]' "$html" | grep -q .; then echo "report.html loads external resources"; exit 1; fi
if grep -Eo 'https?://[^"]*' "$html" | grep -vq '^http://www.w3.org/2000/svg$'; then echo "report.html links to the network"; exit 1; fi
grep -q "<svg" "$html"
grep -q "Largest live allocations at the peak" "$html"
render "$html" "$work/report.png"

# 2. Out of device memory: the error names the failure, the dry-run advice, and the saved profile.
(cd "$work" && expect_error "out of device memory in step 1" "$ferry" train --steps 2 --threads 2 --device-memory 40MiB)
for expected in "tried to allocate" "the cheapest changes that fit" "combinations dry-run, cheapest first by predicted step time" \
                "--batch 4 --grad-accum 2 .* fits, +" "--offload-optimizer cpu" "ferry report ferry-oom-profile"; do
  grep -q -- "$expected" "$work/err.txt" || { echo "the out-of-memory error lacks '$expected'"; cat "$work/err.txt"; exit 1; }
done
"$ferry" report "$work/ferry-oom-profile" > "$work/oom_report.txt"
grep -q "the run failed here: out of memory" "$work/oom_report.txt"
render "$work/ferry-oom-profile/report.html" "$work/oom.png"
# The first option said to fit, run for real under the same limit, peaks where the dry run said.
option=$(grep -m1 -E '^  --.* fits' "$work/err.txt")
flags=$(sed -E 's/^  (--[^ ]+ [^ ]+( --[^ ]+ [^ ]+)*) +peak reserved.*/\1/' <<< "$option")
predicted=$(sed -E 's/.*peak reserved +([0-9.]+ [KMG]?i?B).*/\1/' <<< "$option")
# shellcheck disable=SC2086
"$ferry" train --steps 1 --threads 2 --device-memory 40MiB $flags --summary "$work/fits.json" > /dev/null
/usr/bin/python3 - "$work/fits.json" "$predicted" <<'PY'
import json, sys
memory = json.load(open(sys.argv[1]))["memory"]
value, unit = sys.argv[2].split()
scale = {"B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30}[unit]
assert abs(memory["peak_reserved"] - float(value) * scale) < 0.01 * scale, (memory["peak_reserved"], sys.argv[2])
assert memory["peak_reserved"] <= 40 * 2**20
PY

# 3. Bad input: no profile there, a corrupt one, a bad --profile-steps.
expect_error "does not exist; record a profile with" "$ferry" report "$work/nothing"
mkdir -p "$work/corrupt" && printf '{"format": "ferry-memory-profile", "version": 1, "events": [' > "$work/corrupt/profile.json"
expect_error "is not valid JSON" "$ferry" report "$work/corrupt"
expect_error "--profile-steps '0' is not N" "$ferry" train "${shape[@]}" --steps 1 --profile "$work/p" --profile-steps 0
expect_error "ends before it starts" "$ferry" train "${shape[@]}" --steps 1 --profile "$work/p" --profile-steps 3-2

# 4. A window later in the run: steps 2-3 of 4 start from what step 1 left live.
"$ferry" train "${shape[@]}" --steps 4 --profile "$work/later" --profile-steps 2-3 --summary "$work/later.json" > /dev/null
"$ferry" report "$work/later" > /dev/null
/usr/bin/python3 - "$work/later" <<'PY'
import json, sys
profile = json.load(open(sys.argv[1] + "/profile.json"))
assert profile["metadata"]["profiled_steps"] == [2, 3], profile["metadata"]
assert len(profile["initial_allocations"]) > 0  # parameters, gradients, optimizer states
steps = [op[1] for op in profile["ops"] if op[0] == "step"]
assert steps == ["step 2", "step 3"], steps
PY
echo "report tests passed"
