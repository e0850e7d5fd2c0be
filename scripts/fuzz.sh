#!/usr/bin/env bash
# Fuzzes ferry's parsers: builds tests/fuzz's libFuzzer targets with clang (ASan + UBSan, float-cast-
# overflow included) and runs each for SECONDS (default 10: CI's short run; `scripts/fuzz.sh 600` is a
# longer one) starting from its checked-in corpus (tests/fuzz/corpus/TARGET). New inputs go to a scratch
# directory; a crash, leak, sanitizer report, timeout or allocation past 1 GiB stops the run and leaves
# the input in build-fuzz/findings/ (check it in under tests/fuzz/corpus/TARGET/regression_* once fixed).
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-10}
command -v clang++ > /dev/null || { echo "fuzz: clang++ is not installed (scripts/setup.sh installs it)"; exit 1; }
cmake -S tests/fuzz -B build-fuzz -G Ninja -DCMAKE_CXX_COMPILER=clang++ > /dev/null
cmake --build build-fuzz -j "$(nproc)"
mkdir -p build-fuzz/findings
for target in alloc_conf byte_size config json profile rmm_trace safetensors schedule token_shard trainer_state; do
  scratch=$(mktemp -d)
  echo "fuzz: $target for ${seconds}s"
  if ! build-fuzz/fuzz_"$target" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -malloc_limit_mb=1024 \
       -artifact_prefix=build-fuzz/findings/"$target"- "$scratch" tests/fuzz/corpus/"$target" > build-fuzz/"$target".log 2>&1; then
    tail -40 build-fuzz/"$target".log
    rm -rf "$scratch"
    echo "fuzz: $target found an input that fails (build-fuzz/findings/$target-*)"
    exit 1
  fi
  grep -E "^Done|stat::number_of_executed_units" build-fuzz/"$target".log | tail -1 || true
  rm -rf "$scratch"
done
echo "fuzz: every target ran ${seconds}s without a finding"
