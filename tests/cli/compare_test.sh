#!/usr/bin/env bash
# `ferry report --compare A B` with each kind of run: a PyTorch snapshot, a ferry profile and a --summary
# JSON. The peaks, the breakdown at each peak and the differences are exact; the comparison page renders
# in headless Chromium with both runs' timelines; bad inputs get clear errors.
root=$1
source "$(dirname "$0")/common.sh"
data="$root/tests/data/snapshots"
shape=(--layers 2 --hidden 32 --heads 2 --seq 32 --batch 2 --threads 2 --log-every 100)

"$ferry" train "${shape[@]}" --steps 2 --profile "$work/profile" --summary "$work/summary.json" > /dev/null
"$ferry" train "${shape[@]}" --steps 2 --checkpointing full --profile "$work/full" > /dev/null

# 1. A snapshot against a ferry profile: both timelines, exact numbers.
"$ferry" report --compare "$data/training.pickle" "$work/profile" --output "$work/cmp" > "$work/cmp.txt"
for expected in "memory comparison" "A  $data/training.pickle" "B  $work/profile" "peak allocated" "peak reserved" \
                "at each run's peak" "B - A" "wrote $work/cmp/compare.html"; do
  grep -q -- "$expected" "$work/cmp.txt" || { echo "comparison lacks '$expected'"; cat "$work/cmp.txt"; exit 1; }
done
/usr/bin/python3 - "$work/cmp/compare.json" "$data/training.expected.json" "$work/summary.json" <<'PY'
import json, sys
compare, expected, summary = (json.load(open(path)) for path in sys.argv[1:])
a, b, difference = compare["a"], compare["b"], compare["difference"]
assert a["peak_allocated"] == expected["peak_allocated"] and a["peak_reserved"] == expected["peak_reserved"], a
assert {k: v for k, v in a["at_peak"].items() if v} == expected["at_peak"], a["at_peak"]
assert b["peak_allocated"] == summary["memory"]["peak_allocated"], (b, summary["memory"])
assert b["peak_reserved"] == summary["memory"]["peak_reserved"], (b, summary["memory"])
assert sum(b["at_peak"].values()) == b["peak_allocated"]
for key in ["peak_allocated", "peak_reserved"]:
    assert difference[key] == b[key] - a[key], key
for category, bytes_ in difference["at_peak"].items():
    assert bytes_ == b["at_peak"][category] - a["at_peak"][category], category
PY
html="$work/cmp/compare.html"
[[ $(grep -c '<svg' "$html") -eq 3 ]] || { echo "compare.html should hold the bars and two timelines"; exit 1; }
grep -q "<h3>A: $data/training.pickle</h3>" "$html"
grep -q "<h3>B: $work/profile</h3>" "$html"
if grep -Eo '(src|href)="[^"#]' "$html" | grep -q .; then echo "compare.html loads external resources"; exit 1; fi
render "$html" "$work/compare.png"
# Both timelines answer a click: a moment 1 us in shows what each run held then.
rendered_dom "$html#t=1000" > "$work/compare-dom.html"
[[ $(grep -o 'class="moment" id="timeline-[ab]-moment" data-bytes="[0-9]*"' "$work/compare-dom.html" | wc -l) -eq 2 ]] \
  || { echo "both timelines should show the moment clicked"; grep -o 'class="moment"[^>]*>' "$work/compare-dom.html"; exit 1; }

# 2. Two profiles of the same shape (full recompute against none), and a summary (peaks only).
"$ferry" report --compare "$work/profile" "$work/full" --output "$work/recompute" > /dev/null
/usr/bin/python3 - "$work/recompute/compare.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
assert c["b"]["at_peak"]["activations"] < c["a"]["at_peak"]["activations"], c  # full recompute keeps fewer activations
assert c["a"]["at_peak"]["parameters"] == c["b"]["at_peak"]["parameters"], c
PY
"$ferry" report --compare "$work/summary.json" "$work/profile" --output "$work/summary-cmp" > "$work/summary-cmp.txt"
/usr/bin/python3 -c "
import json, sys
c = json.load(open(sys.argv[1]))
assert c['difference']['peak_allocated'] == 0 and c['difference']['peak_reserved'] == 0, c
assert c['a']['description'].startswith('summary: '), c['a']" "$work/summary-cmp/compare.json"
grep -q "No timeline: a summary JSON holds the peaks only" "$work/summary-cmp/compare.html"
render "$work/summary-cmp/compare.html" "$work/summary.png"

# 3. ferry bench memory takes a baseline the same way: its no-recompute row against the run.
"$ferry" bench memory "${shape[@]:0:10}" --output "$work/bench" --baseline "$work/summary.json" > "$work/bench.txt"
grep -q "A  $work/summary.json" "$work/bench.txt"
/usr/bin/python3 - "$work/bench/compare.json" "$work/bench/memory.json" "$work/summary.json" <<'PY'
import json, sys
compare, bench, summary = (json.load(open(path)) for path in sys.argv[1:])
none = next(r for r in bench["rows"] if r["kind"] == "measured" and r["checkpointing"] == "none")
assert compare["a"]["peak_allocated"] == summary["memory"]["peak_allocated"], compare["a"]
assert compare["b"]["peak_allocated"] == none["peak_allocated"] and compare["b"]["peak_reserved"] == none["peak_reserved"], compare["b"]
assert compare["b"]["at_peak"] == none["at_peak"], (compare["b"]["at_peak"], none["at_peak"])
assert compare["difference"]["peak_allocated"] == none["peak_allocated"] - summary["memory"]["peak_allocated"]
PY
render "$work/bench/compare.html" "$work/bench.png"

# 4. Bad inputs.
echo "not json" > "$work/notes.txt"
expect_error "notes.txt is neither a PyTorch snapshot nor a summary JSON" "$ferry" report --compare "$work/notes.txt" "$work/profile"
echo '{"memory": {"peak_allocated": 1}}' > "$work/partial.json"
expect_error "partial.json is not a ferry summary with memory.peak_allocated, peak_reserved and at_peak" \
  "$ferry" report --compare "$work/partial.json" "$work/profile"
expect_error "needs a profile directory or a PyTorch snapshot" "$ferry" report
echo "cli compare: ok"
