#!/usr/bin/env bash
# A rank that fails ends the job quickly instead of hanging it: comm_failure_probe (MPI) or
# nccl_failure_probe (NCCL, on the emulated CUDA and NCCL) under mpirun -np 2, each run bounded by
# `timeout 60` (exit 124 would mean a hang).
#   abort:  rank 1 calls abort(3) while rank 0 waits for it: mpirun fails at once.
#   crash:  rank 1 dies of an uncaught exception: mpirun ends rank 0 and fails.
#   silent: rank 1 returns without joining: rank 0's wait times out (FERRY_COMM_TIMEOUT_SECONDS=1),
#           its CommunicationError names the operation (MPI: the peer and the tag), and the job fails.
# Usage: rank_failure_test.sh PROBE MPIRUN [MPIRUN FLAGS...]   (the mpirun command includes -np 2)
# SILENT_ERROR: what rank 0 says in the silent case (default: comm_failure_probe's receive).
set -euo pipefail
probe=${1:?usage: rank_failure_test.sh PROBE MPIRUN [FLAGS...]}
shift
mpirun=("$@")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# run_job MODE: runs the job, leaves its exit status in $status and its output in $work/MODE.{out,err}.
run_job() {
  local mode=$1 started=$SECONDS
  status=0
  timeout 60 "${mpirun[@]}" "$probe" "$mode" > "$work/$mode.out" 2> "$work/$mode.err" || status=$?
  seconds=$((SECONDS - started))
  echo "$mode: exit status $status after ${seconds}s"
  if [[ $status -eq 0 || $status -eq 124 ]]; then
    echo "$mode: the job should have failed fast (0 = it succeeded, 124 = it hung); its output:"
    cat "$work/$mode.out" "$work/$mode.err"
    exit 1
  fi
}

# expect_in_stderr MODE TEXT: the job's stderr says TEXT.
expect_in_stderr() {
  if ! grep -qF -- "$2" "$work/$1.err"; then
    echo "$1: stderr lacks '$2':"
    cat "$work/$1.err"
    exit 1
  fi
}

run_job abort
expect_in_stderr abort "rank 1: simulated failure"
[[ $seconds -lt 30 ]] || { echo "abort: took ${seconds}s"; exit 1; }

run_job crash
[[ $seconds -lt 30 ]] || { echo "crash: took ${seconds}s"; exit 1; }

export FERRY_COMM_TIMEOUT_SECONDS=1
run_job silent
expect_in_stderr silent "${SILENT_ERROR:-error: rank 0: receive of 8 bytes from rank 1 with tag 11 did not complete within 1000 ms}"
expect_in_stderr silent "FERRY_COMM_TIMEOUT_SECONDS"
[[ $seconds -lt 30 ]] || { echo "silent: took ${seconds}s"; exit 1; }
echo "rank failures end the job"
