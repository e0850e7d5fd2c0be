#!/usr/bin/env bash
# NCCL is loaded when first used (engine/comm/nccl_loader.h), not linked: the binary starts where libnccl
# is missing, --version says which NCCL it found, and a --device cuda job with several ranks whose NCCL
# cannot be loaded (missing, or a library without NCCL's functions) stops on every rank naming the path
# and the fix. Registered in builds with NCCL only.
source "$(dirname "$0")/common.sh"
if readelf -d "$ferry" | grep -q 'NEEDED.*libnccl'; then echo "ferry links libnccl: it would not start without it"; exit 1; fi
"$ferry" --version > "$work/version.txt"
grep -E -q '^NCCL: [0-9]+\.[0-9]+\.[0-9]+, loaded at run time from /' "$work/version.txt" || { cat "$work/version.txt"; exit 1; }
FERRY_NCCL_LIBRARY=/nonexistent/libnccl.so.2 "$ferry" --version > "$work/version.txt"
grep -q '^NCCL: not loadable: NCCL could not be loaded (/nonexistent/libnccl.so.2: cannot open shared object file' "$work/version.txt" ||
  { cat "$work/version.txt"; exit 1; }
# No other library stands in for the one named.
FERRY_NCCL_LIBRARY=libm.so.6 "$ferry" --version > "$work/version.txt"
grep -q '^NCCL: not loadable: libm.so.6 lacks ncclGetVersion, ncclGetErrorString' "$work/version.txt" || { cat "$work/version.txt"; exit 1; }
# Every rank of the job names it (before looking for a GPU, so this runs on machines without one too).
expect_error "rank 1 of 2: .*NCCL could not be loaded (/nonexistent/libnccl.so.2: .*set FERRY_NCCL_LIBRARY to its libnccl.so.2" \
  timeout 120 "${MPIRUN:-mpirun}" --allow-run-as-root --oversubscribe -np 2 -x FERRY_NCCL_LIBRARY=/nonexistent/libnccl.so.2 \
  "$ferry" train --device cuda --dp 2 --steps 1 --model gpt2-tiny --seq 32 --batch 1
grep -q "rank 0 of 2: .*NCCL could not be loaded" "$work/err.txt" || { cat "$work/err.txt"; exit 1; }
echo "nccl loading: ok"
