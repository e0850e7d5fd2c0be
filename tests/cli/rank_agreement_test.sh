#!/usr/bin/env bash
# The ranks of a job agree on it before step 1 (issue 29): one rank launched with another setting, data
# file or model makes every rank stop with an error naming the setting and each rank's value (before,
# wrong losses and exit 0, a raw MPI_ERR_TRUNCATE, or a wait through the whole timeout); torchrun
# variables that disagree (world size, two ranks claiming one RANK) are named at once, and no
# ompi-server (not even a zombie) outlives the failed rendezvous.
#   FERRY=build/ferry rank_agreement_test.sh SOURCE_DIR
source "$(dirname "$0")/common.sh"
mpirun=$(command -v mpirun)
model=(train --model gpt2-tiny --steps 2 --batch 2 --seq 32 --threads 1 --log-every 1000)

mismatch() {  # mismatch PATTERN "RANK0 ARGS" "RANK1 ARGS": two ranks (mpirun's MPMD form) differ; every rank names it
  local pattern=$1 first=$2 second=$3
  # shellcheck disable=SC2086  # the arguments are word lists
  if FERRY_COMM_TIMEOUT_SECONDS=20 timeout 120 "$mpirun" --allow-run-as-root --oversubscribe \
       -np 1 "$ferry" "${model[@]}" $first : -np 1 "$ferry" "${model[@]}" $second > "$work/out.txt" 2> "$work/err.txt"; then
    echo "ranks with '$first' and '$second' trained"; exit 1
  fi
  for rank in 0 1; do
    grep -q -- "rank $rank of 2: the ranks were launched with different settings: $pattern" "$work/err.txt" ||
      { echo "rank $rank does not name '$pattern':"; cat "$work/err.txt"; exit 1; }
  done
  if grep -q "MPI_ERR\|timed out" "$work/err.txt"; then echo "a raw MPI error or a timeout for '$first' vs '$second':"; cat "$work/err.txt"; exit 1; fi
}

# Silently wrong losses before: each names its flag and both values.
mismatch "--lr is 0.001 on rank 0 and 0.002 on rank 1" "--lr 1e-3" "--lr 2e-3"
mismatch "--seed is 1 on rank 0 and 2 on rank 1" "--seed 1" "--seed 2"
mismatch "--dropout" "--dropout 0.1" "--dropout 0"
mismatch "--shuffle is true on rank 0 and false on rank 1" "" "--shuffle false"
mismatch "--weight-decay" "--weight-decay 0" ""
mismatch "--batch is 2 on rank 0 and 4 on rank 1" "" "--batch 4"
printf 'one file of words\n%.0s' {1..200} > "$work/a.txt"
printf 'another file of words\n%.0s' {1..200} > "$work/b.txt"
cp "$work/a.txt" "$work/a_copy.txt"
mismatch "--data is a file of XXH64 [0-9a-f]* on rank 0 and a file of XXH64 [0-9a-f]* on rank 1" "--data $work/a.txt" "--data $work/b.txt"
# A pipeline rank with another model, another file: a model no rank asked for, inputs against other labels.
mismatch "--layers is 2 on rank 0 and 4 on rank 1" "--pp 2 --layers 2" "--pp 2 --layers 4"
# A raw MPI_ERR_TRUNCATE before.
mismatch "--hidden is 64 on rank 0 and 32 on rank 1" "--hidden 64" "--hidden 32 --heads 2"
mismatch "--precision is f32 on rank 0 and bf16 on rank 1" "" "--precision bf16"
mismatch "--reduce-bucket-size is 4096 on rank 0 and 8192 on rank 1" "--reduce-bucket-size 4096" "--reduce-bucket-size 8192"
# The whole communication timeout before.
mismatch "--steps is 2 on rank 0 and 3 on rank 1" "" "--steps 3"
mismatch "--micro-batches (--grad-accum) is 2 on rank 0 and 4 on rank 1" "--pp 2 --micro-batches 2" "--pp 2 --micro-batches 4"

# The same data under two paths agrees, and what may differ by rank (threads, metrics) does.
"$mpirun" --allow-run-as-root --oversubscribe -np 1 "$ferry" "${model[@]}" --data "$work/a.txt" --metrics "$work/m.jsonl" \
  : -np 1 "$ferry" "${model[@]}" --data "$work/a_copy.txt" --threads 2 > "$work/out.txt" 2>&1 || { cat "$work/out.txt"; exit 1; }

# torchrun's variables that disagree: named at once by every rank, nothing left behind.
torchrun_ranks() {  # torchrun_ranks "RANK WORLD_SIZE" ...: one ferry per pair, all on one port; prints each exit status
  local port=$((10000 + RANDOM % 9000)) pids=() index=0
  for pair in "$@"; do
    read -r rank size <<< "$pair"
    RANK=$rank WORLD_SIZE=$size LOCAL_RANK=$index LOCAL_WORLD_SIZE=$# MASTER_ADDR=127.0.0.1 MASTER_PORT=$port FERRY_COMM_TIMEOUT_SECONDS=30 \
      timeout 60 "$ferry" "${model[@]}" > "$work/torchrun_$index.txt" 2>&1 &
    pids+=($!)
    index=$((index + 1))
    sleep 0.3  # rank 0 first, so it holds the port
  done
  local status=0
  for pid in "${pids[@]}"; do if wait "$pid"; then status=1; fi; done  # every rank must fail
  return $status
}
torchrun_expect() {  # torchrun_expect PATTERN "RANK WORLD_SIZE" ...
  local pattern=$1; shift
  local started=$SECONDS
  torchrun_ranks "$@" || { echo "a rank of '$*' succeeded"; cat "$work"/torchrun_*.txt; exit 1; }
  ((SECONDS - started < 20)) || { echo "'$*' took $((SECONDS - started)) s, not at once"; exit 1; }
  for ((index = 0; index < $#; ++index)); do
    grep -q -- "$pattern" "$work/torchrun_$index.txt" || { echo "rank $index of '$*' does not name '$pattern':"; cat "$work/torchrun_$index.txt"; exit 1; }
  done
  if pgrep -x ompi-server > /dev/null; then echo "ompi-server outlived '$*'"; exit 1; fi
  if ps -eo stat=,comm= | grep -q "^Z.*ompi-server"; then echo "a zombie ompi-server after '$*'"; exit 1; fi
}
torchrun_expect "RANK 1 says WORLD_SIZE 3, RANK 0 says WORLD_SIZE 2" "0 2" "1 3"
torchrun_expect "RANK 1 says WORLD_SIZE 2, RANK 0 says WORLD_SIZE 3" "0 3" "1 2"
torchrun_expect "two processes claim RANK 0 of WORLD_SIZE 2" "0 2" "0 2"
torchrun_expect "two processes claim RANK 1 of WORLD_SIZE 3" "0 3" "1 3" "1 3"
echo "rank agreement: ok"
