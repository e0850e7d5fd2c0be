#!/usr/bin/env bash
# `ferry schedule`: the classic 1F1B numbers, ZB-H1 beside its theory, a Chrome trace that is valid JSON
# with one slice per action, --csv then --from giving the same schedule, and one clear error line for
# bad input (unknown names, m < 1, interleaved with m not a multiple of p, unparsable or invalid files).
root=$1
source "$(dirname "$0")/common.sh"

expect_clear_error() {  # expect_clear_error PATTERN COMMAND...: fails with one line "ferry: error: ..." matching PATTERN
  expect_error "$@"
  if [[ $(wc -l < "$work/err.txt") -ne 1 ]] || ! grep -q "^ferry: error: " "$work/err.txt"; then
    echo "not one clear error line for '${*:2}':"; cat "$work/err.txt"; exit 1
  fi
}

"$ferry" schedule --pp 4 --micro-batches 8 --schedule 1f1b --trace "$work/trace.json" --csv "$work/schedule.csv" > "$work/1f1b.txt"
cat "$work/1f1b.txt"
grep -q "validation: ok (buffered and rendezvous sends)" "$work/1f1b.txt"
grep -q "^makespan 22 time units (16 of work per rank)$" "$work/1f1b.txt"
grep -q "bubble 27.3% of all ranks' time (theory 27.3%: (p-1)/(m+p-1))" "$work/1f1b.txt"
grep -q "^  rank 0: 0F0 0F1 0F2 0F3 -   -   -   0B0 0F4 0B1" "$work/1f1b.txt"
grep -q "^  rank 1: 1RECV_F0 1F0 1SEND_F0" "$work/1f1b.txt"
# stage, rank, busy, bubble, peak in flight (4 - s), peak held
grep -Eq "^ +0 +0 +16 +27.3% +4 +4$" "$work/1f1b.txt"
grep -Eq "^ +3 +3 +16 +27.3% +1 +1$" "$work/1f1b.txt"

/usr/bin/python3 - "$work/trace.json" "$work/1f1b.txt" <<'PY'
import json, sys
trace = json.load(open(sys.argv[1]))
slices = [event for event in trace["traceEvents"] if event["ph"] == "X"]
lowered = [line for line in open(sys.argv[2]) if line.startswith("  rank ") and "SEND" in line]
actions = sum(len(line.split(":", 1)[1].split()) for line in lowered)
assert len(slices) == actions, (len(slices), actions)
names = {event["args"]["name"] for event in trace["traceEvents"] if event["name"] == "process_name"}
assert names == {"rank 0", "rank 1", "rank 2", "rank 3"}, names
assert max(event["ts"] + event["dur"] for event in slices) == 22000
PY

"$ferry" schedule --pp 4 --micro-batches 8 --schedule zb-h1 --costs 1,1,1 > "$work/zb.txt"
grep -q "^makespan 27 time units (24 of work per rank)$" "$work/zb.txt"
grep -q "bubble 11.1% of all ranks' time (theory 11.1%" "$work/zb.txt"
"$ferry" schedule --pp 4 --micro-batches 8 --schedule interleaved:2 > "$work/interleaved.txt"
grep -q "bubble 15.8% of all ranks' time (theory 15.8%: (p-1)/(V\*m+p-1)" "$work/interleaved.txt"
"$ferry" schedule --pp 8 --micro-batches 3 --schedule 1f1b > "$work/few.txt"  # m < p (torchtitan#775)
grep -q "validation: ok" "$work/few.txt"

# --csv then --from: the same lists and numbers (the CSV has no name, so no theory line to compare).
"$ferry" schedule --from "$work/schedule.csv" --pp 4 > "$work/from_csv.txt"
diff <(grep -E "^  rank|^makespan|^ +[0-9]" "$work/1f1b.txt") <(grep -E "^  rank|^makespan|^ +[0-9]" "$work/from_csv.txt")

# A hand-edited text file: 0B1 moved before 0F1.
printf 'rank 0: 0F0 0B1 0F1 0B0\nrank 1: 1F0 1B0 1F1 1B1\n' > "$work/swapped.txt"
expect_clear_error "the schedule is not valid: rank 0: 0B1 comes before 0F1: a stage's backward follows its forward" \
  "$ferry" schedule --from "$work/swapped.txt"
grep -q "validation: [0-9]* problems" "$work/out.txt"
printf 'rank 0: 0F0 0F1\nrank 1: 1F0 1Q1\n' > "$work/garbled.txt"
expect_clear_error "garbled.txt: line 2, column 13: '1Q1' is not an action" "$ferry" schedule --from "$work/garbled.txt"
expect_clear_error "--micro-batches 6 but .* has 8 micro-batches: drop --micro-batches or fix the file" "$ferry" schedule --from "$work/schedule.csv" --micro-batches 6 --pp 4
sed -i 's/^\(0F0\),/\1,,/' "$work/schedule.csv"  # still parses: a bubble more
"$ferry" schedule --from "$work/schedule.csv" > /dev/null

expect_clear_error "unknown pipeline schedule '2f2b': choose one of gpipe, 1f1b, 1f1b-deep, interleaved:V, zb-h1" \
  "$ferry" schedule --pp 4 --micro-batches 8 --schedule 2f2b
expect_clear_error "at least 1 micro-batch" "$ferry" schedule --pp 4 --micro-batches 0 --schedule 1f1b
expect_clear_error "at least 1 rank" "$ferry" schedule --pp 0 --micro-batches 4 --schedule 1f1b
expect_clear_error "use --micro-batches 4 or 8" "$ferry" schedule --pp 4 --micro-batches 6 --schedule interleaved:2
expect_clear_error "missing --pp" "$ferry" schedule --micro-batches 4 --schedule 1f1b
expect_clear_error "costs '1,x' are not F,B or F,B,W" "$ferry" schedule --pp 2 --micro-batches 4 --schedule 1f1b --costs 1,x
echo "cli schedule: ok"
