#!/usr/bin/env bash
# `ferry replay` on the bundled trace: prints the report, writes the summary JSON with the contract's
# keys, finds a minimum capacity, and turns malformed input into one clear error with a line number.
root=$1
source "$(dirname "$0")/common.sh"

"$ferry" replay "$root/data/traces/gpt2-tiny-train.csv" --find-min-capacity --summary "$work/summary.json" | tee "$work/out.txt"
grep -q "peak reserved" "$work/out.txt"
/usr/bin/python3 - "$work/summary.json" <<'PY'
import json, sys
summary = json.load(open(sys.argv[1]))
for key in ["peak_requested", "peak_allocated", "peak_reserved", "fragmentation_at_peak", "num_alloc_retries",
            "num_ooms", "min_capacity"]:
    assert key in summary, key
assert summary["completed"] is True
assert summary["peak_requested"] <= summary["peak_allocated"] <= summary["peak_reserved"]
assert summary["peak_requested"] <= summary["min_capacity"] <= summary["peak_reserved"] + (1 << 20)
assert 0 <= summary["fragmentation_at_peak"] < 1
PY

printf 'Thread,Time,Action,Pointer,Size,Stream\n1,t,allocate,0x10,512,0\n1,t,allocate,0x20,many,0\n' > "$work/bad.csv"
if "$ferry" replay "$work/bad.csv" 2> "$work/err.txt"; then echo "malformed trace accepted"; exit 1; fi
grep -q "bad.csv:3: bad size 'many'" "$work/err.txt"

if "$ferry" replay "$root/data/traces/gpt2-tiny-train.csv" --alloc-conf "expandable:True" 2> "$work/err.txt"; then
  echo "bad --alloc-conf accepted"; exit 1
fi
grep -q "unknown key 'expandable'" "$work/err.txt"

if "$ferry" replay "$root/data/traces/gpt2-tiny-train.csv" --device cuda --find-min-capacity 2> "$work/err.txt"; then
  echo "--find-min-capacity accepted on cuda"; exit 1
fi
grep -q -- "--find-min-capacity bisects on the meta device" "$work/err.txt"

"$ferry" replay "$root/data/traces/gpt2-tiny-train.csv" --capacity 4MiB --summary "$work/tight.json" > /dev/null
/usr/bin/python3 -c "import json,sys; s=json.load(open(sys.argv[1])); assert s['num_ooms'] > 0 and not s['completed']" "$work/tight.json"
echo "cli replay: ok"
