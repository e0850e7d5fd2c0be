#!/usr/bin/env bash
# PyTorch memory snapshots end to end: the checked-in snapshots are what scripts/make_torch_snapshot.py
# writes; `ferry report SNAPSHOT` gives the script's peaks byte for byte (also from a ring-buffered trace)
# and a page that renders; a snapshot ferry writes reads back to the same report, for a snapshot and for
# a real ferry profile; `ferry replay SNAPSHOT` equals the replay of the RMM CSV of the same trace, with
# and without expandable segments; broken snapshots get one clear error each.
root=$1
source "$(dirname "$0")/common.sh"
data="$root/tests/data/snapshots"

# 1. The checked-in files are the script's output (compared as values: pickle bytes vary across Pythons).
/usr/bin/python3 "$root/scripts/make_torch_snapshot.py" "$work/gen"
/usr/bin/python3 - "$data" "$work/gen" <<'PY'
import pickle, sys
for name in ["training.pickle", "ring.pickle", "expandable.pickle"]:
    assert pickle.load(open(f"{sys.argv[1]}/{name}", "rb")) == pickle.load(open(f"{sys.argv[2]}/{name}", "rb")), name
for name in ["training.csv", "training.expected.json", "ring.expected.json", "expandable.csv", "expandable.expected.json"]:
    assert open(f"{sys.argv[1]}/{name}").read() == open(f"{sys.argv[2]}/{name}").read(), name
PY

# The peak and the breakdown at it, rebuilt from trace.json's counters (exact bytes).
check_peaks() {  # check_peaks TRACE.json EXPECTED.json
  /usr/bin/python3 - "$1" "$2" <<'PY'
import json, sys
trace, expected = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
counters = sorted((e for e in trace["traceEvents"] if e["ph"] == "C"), key=lambda e: e["ts"])
current, peak, at_peak, reserved = {}, 0, {}, 0
for e in counters:
    if e["name"] == "reserved":
        reserved = max(reserved, e["args"]["bytes"])
        continue
    current[e["name"]] = e["args"]["bytes"]
    if sum(current.values()) > peak:
        peak, at_peak = sum(current.values()), {k: v for k, v in current.items() if v}
assert peak == expected["peak_allocated"], (peak, expected["peak_allocated"])
assert reserved == expected["peak_reserved"], (reserved, expected["peak_reserved"])
if "at_peak" in expected:
    assert at_peak == expected["at_peak"], (at_peak, expected["at_peak"])
if "segments_at_peak" in expected:  # per kind: segments, reserved bytes, reserved but unallocated
    assert trace["otherData"]["segments_at_peak"] == expected["segments_at_peak"], trace["otherData"]["segments_at_peak"]
if "parameters_at_peak" in expected:
    assert at_peak["parameters"] == expected["parameters_at_peak"], at_peak
PY
}

# 2. Reading a snapshot: the table, exact peaks, the category rule, a page that renders.
"$ferry" report "$data/training.pickle" --output "$work/training" --torch-snapshot "$work/back.pickle" > "$work/training.txt"
for expected in "training.pickle on cuda:0" "no device memory limit recorded" "optimizer_states" "activations" "uncategorized" "model.py:41 forward" \
                "reserved but unallocated at the peak, by segment kind" "small                 3 segments     6.00 MiB reserved" \
                "categories from the frames of each allocation" "wrote $work/back.pickle"; do
  grep -q -- "$expected" "$work/training.txt" || { echo "report lacks '$expected'"; cat "$work/training.txt"; exit 1; }
done
check_peaks "$work/training/trace.json" "$data/training.expected.json"
render "$work/training/report.html" "$work/training.png"
# The page is interactive: zoomed to 0.8-1.0 ms its time axis is redrawn, and the moment of the peak
# (trace.json's peak marker) lists exactly the peak's bytes as live.
peak_ns=$(/usr/bin/python3 -c "import json,sys; print(round(next(e['ts'] for e in json.load(open(sys.argv[1]))['traceEvents'] if e['ph'] == 'i') * 1000))" "$work/training/trace.json")
rendered_dom "$work/training/report.html#view=800000,1000000&t=$peak_ns" > "$work/dom.html"
grep -q "data-bytes=\"$(/usr/bin/python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['peak_allocated'])" "$data/training.expected.json")\"" "$work/dom.html" \
  || { echo "the moment of the peak does not list the peak's bytes: $(grep -o 'class="moment"[^>]*>' "$work/dom.html")"; exit 1; }
grep -q '<g class="time-axis"><text x="72.0" y="349" text-anchor="middle">0.8 ms</text>' "$work/dom.html" \
  || { echo "the zoomed time axis was not redrawn: $(grep -o '<g class="time-axis">.\{0,120\}' "$work/dom.html")"; exit 1; }
grep -q "model.py:41 forward" "$work/dom.html"
"$ferry" report "$data/ring.pickle" --output "$work/ring" > /dev/null
check_peaks "$work/ring/trace.json" "$data/ring.expected.json"
# An expandable segment (segment_map, segment_unmap) and an oom.
"$ferry" report "$data/expandable.pickle" --output "$work/expandable" > "$work/expandable.txt"
check_peaks "$work/expandable/trace.json" "$data/expandable.expected.json"
grep -q "1 allocation(s) ran out of memory (oom events)" "$work/expandable.txt"
# Without --output the report goes beside the snapshot, in SNAPSHOT-report/.
cp "$data/training.pickle" "$work/copy.pickle"
"$ferry" report "$work/copy.pickle" > /dev/null
[[ -f "$work/copy-report/report.html" && -f "$work/copy-report/trace.json" ]]

# 3. Written and read back: the same report (the table, and trace.json byte for byte).
same_report() {  # same_report A B: two reports' tables and trace.json agree
  diff <(grep -v '^  wrote ' "$1.txt") <(grep -v '^  wrote ' "$2.txt")
  cmp "$1/trace.json" "$2/trace.json"
}
"$ferry" report "$work/back.pickle" --output "$work/back" > "$work/back.txt"
same_report "$work/training" "$work/back"

shape=(--layers 2 --hidden 32 --heads 2 --seq 32 --batch 2 --threads 2 --log-every 100)
"$ferry" train "${shape[@]}" --steps 2 --checkpointing selective --profile "$work/profile" > /dev/null
"$ferry" report "$work/profile" --torch-snapshot "$work/profile.pickle" > "$work/profile.txt"
"$ferry" report "$work/profile.pickle" --output "$work/profile-back" > "$work/profile-back.txt"
same_report "$work/profile" "$work/profile-back"
grep -q "during step" "$work/profile-back.txt"
# What memory_viz needs: plain dicts and lists, every segment tiled exactly by its blocks, and the
# segments' sum equal to the reserved bytes at the end; ferry's categories and tags in the frames.
/usr/bin/python3 - "$work/profile.pickle" "$work/profile/trace.json" <<'PY'
import json, pickle, sys
snapshot = pickle.load(open(sys.argv[1], "rb"))
assert set(snapshot) >= {"segments", "device_traces"}
for segment in snapshot["segments"]:
    cursor = segment["address"]
    for block in segment["blocks"]:
        assert block["address"] == cursor and block["size"] > 0, (segment["address"], block)
        assert block["state"] in ("active_allocated", "inactive")
        cursor += block["size"]
    assert cursor == segment["address"] + segment["total_size"]
    assert segment["allocated_size"] == sum(b["size"] for b in segment["blocks"] if b["state"] == "active_allocated")
reserved = [e for e in json.load(open(sys.argv[2]))["traceEvents"] if e["ph"] == "C" and e["name"] == "reserved"]
assert sum(s["total_size"] for s in snapshot["segments"]) == max(reserved, key=lambda e: e["ts"])["args"]["bytes"]
trace = snapshot["device_traces"][0]
actions = {e["action"] for e in trace}
assert {"alloc", "free_requested", "free_completed"} <= actions and actions & {"segment_alloc", "segment_map"}, actions
categories = {e["frames"][0]["filename"] for e in trace if e["action"] == "alloc"}
assert {"ferry/parameters", "ferry/activations", "ferry/gradients", "ferry/optimizer_states"} <= categories, categories
assert any(e["frames"][0]["name"].startswith("h.") for e in trace if e["action"] == "alloc")
PY

# PyTorch's own snapshot tooling (torch.cuda._memory_viz of the Debian PyTorch the parity test uses)
# reads the written segments and counts what ferry's report says is reserved and allocated at the end.
/usr/bin/python3 - "$work/profile.pickle" <<'PY'
import pickle, sys
import torch.cuda._memory_viz as memory_viz
segments = pickle.load(open(sys.argv[1], "rb"))["segments"]
stats = memory_viz.stats(segments)
assert stats["segments"] == len(segments) > 0, stats
assert stats["total_size"].value == sum(s["total_size"] for s in segments), stats
assert stats["active_allocated"].value == sum(b["size"] for s in segments for b in s["blocks"] if b["state"] == "active_allocated"), stats
PY

# memory_viz's Allocator State History can replay what ferry writes, also for a window that starts
# after step 1 (allocations and segments from before it) and for snapshots read and written again.
"$ferry" train "${shape[@]}" --steps 3 --profile "$work/later" --profile-steps 2-3 > /dev/null
"$ferry" report "$work/later" --torch-snapshot "$work/later.pickle" > /dev/null
"$ferry" report "$data/expandable.pickle" --output "$work/expandable-back" --torch-snapshot "$work/expandable-back.pickle" > /dev/null
for written in "$work/profile.pickle" "$work/later.pickle" "$work/back.pickle" "$work/expandable-back.pickle"; do
  /usr/bin/python3 "$root/tests/cli/memory_viz_replay.py" "$written" > /dev/null
done
/usr/bin/python3 "$root/tests/cli/memory_viz_replay.py" "$data/training.pickle" > /dev/null  # the checker accepts the script's own

# 4. Replay: the snapshot and the RMM CSV of the same trace give the same figures.
for run in training expandable; do
for conf in "expandable_segments:False" "expandable_segments:True"; do
  "$ferry" replay "$data/$run.pickle" --alloc-conf "$conf" --find-min-capacity --summary "$work/snapshot.json" > "$work/replay.txt"
  "$ferry" replay "$data/$run.csv" --alloc-conf "$conf" --find-min-capacity --summary "$work/csv.json" > /dev/null
  /usr/bin/python3 - "$work/snapshot.json" "$work/csv.json" "$data/$run.expected.json" <<'PY'
import json, sys
snapshot, csv, expected = (json.load(open(path)) for path in sys.argv[1:])
del snapshot["trace"], csv["trace"], snapshot["segments_at_recorded_addresses"], csv["segments_at_recorded_addresses"]  # a CSV records no segments
assert snapshot == csv, (snapshot, csv)
assert snapshot["peak_requested"] == expected["peak_allocated"]
assert snapshot["completed"] and snapshot["min_capacity"] > 0
PY
done
done
grep -q "peak reserved" "$work/replay.txt"
"$ferry" replay "$data/training.pickle" --capacity 40MiB --summary "$work/tight.json" > /dev/null
/usr/bin/python3 -c "import json,sys; s=json.load(open(sys.argv[1])); assert s['num_ooms'] > 0 and not s['completed']" "$work/tight.json"

# 4b. PyTorch's own snapshot of gpt2 on an H200: the report's peaks are torch.cuda.memory_stats' (requested
# and reserved: the trace records requested sizes), in bytes in --summary.
"$ferry" report "$data/gpt2_h200.pickle" --output "$work/h200" --summary "$work/h200.json" > "$work/h200.txt"
/usr/bin/python3 - "$work/h200.json" "$data/gpt2_h200.expected.json" <<'PY'
import json, sys
report, truth = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
assert report["peak_requested"] == truth["memory_stats"]["requested_bytes.all.peak"], report
assert report["peak_reserved"] == truth["memory_stats"]["reserved_bytes.all.peak"], report
assert "peak_allocated" not in report and report["events"] == truth["events"], report
PY
# ... and its replay through ferry's allocator, segments where PyTorch's cudaMalloc put them: PyTorch's
# allocated and reserved peaks.
"$ferry" replay "$data/gpt2_h200.pickle" --alloc-conf expandable_segments:False --summary "$work/h200_replay.json" > /dev/null
/usr/bin/python3 - "$work/h200_replay.json" "$data/gpt2_h200.expected.json" <<'PY'
import json, sys
replay, truth = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
assert replay["peak_allocated"] == truth["memory_stats"]["allocated_bytes.all.peak"], replay
assert replay["peak_reserved"] == truth["memory_stats"]["reserved_bytes.all.peak"], replay
assert replay["segments_at_recorded_addresses"] == 143, replay
PY

# 5. Broken snapshots: one clear error each, naming the file and where.
head -c 5000 "$data/training.pickle" > "$work/truncated.pickle"
expect_error "truncated.pickle: offset [0-9]*: opcode .*truncated" "$ferry" report "$work/truncated.pickle"
expect_error "truncated.pickle: offset" "$ferry" replay "$work/truncated.pickle"
printf '\x80\x04\xff.' > "$work/unknown.pickle"
expect_error "unknown.pickle: offset 2: opcode 0xff: is not a pickle opcode" "$ferry" report "$work/unknown.pickle"
printf '\x80\x04cos\nsystem\n.' > "$work/global.pickle"
expect_error "opcode GLOBAL (0x63): is not in the subset ferry reads" "$ferry" report "$work/global.pickle"
expect_error "device_traces\[0\]\[[0-9]*\].addr: free_requested of 0x[0-9a-f]*, an unknown address" "$ferry" report "$work/gen/double-free.pickle"
expect_error "device_traces\[0\]\[5\].size: 4611686018427387904 bytes is larger than any device" "$ferry" report "$work/gen/huge-size.pickle"
echo "not a pickle" > "$work/notes.txt"
expect_error "notes.txt: is a file but not a PyTorch snapshot" "$ferry" report "$work/notes.txt"
printf '\x80\x04}\x94.' > "$work/empty.pickle"
expect_error "not a PyTorch memory snapshot" "$ferry" report "$work/empty.pickle"
echo "cli snapshot: ok"
