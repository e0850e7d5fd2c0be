#!/usr/bin/env bash
# On a GPU machine, with build-gpu/bundle.tar.xz from scripts/gpu_bundle.sh:
#   bash scripts/gpu_check.sh                    # every GPU test (cuda_tests: the allocator on real
#       streams, each cuda kernel against its CPU twin, the offload gradient path, the whole model against
#       the cpu device; fails if any skipped), then `ferry train --device cuda` beside the cpu device
#   bash scripts/gpu_check.sh benchmark [PART..] # benchmarks/gpu_benchmark.sh, those parts (default all),
#       and with the part `allocator` the allocator benchmark's cuda rows beside the cache hit
#   bash scripts/gpu_check.sh all [SECONDS]      # issues 32 and 34 in one call: the tests, two ranks on the
#       GPU (scripts/gpu_grid_check.sh), the allocator rows, each
#       attention kernels beside PyTorch's (benchmarks/attention_benchmark.cpp, attention_peer.py), each
#       kernel's time in a gpt2 step (dev/gpu_kernel_times.sh) (CHECKS: which of "tests grid allocator
#       attention kernels", default all), then the benchmark parts (PARTS, default all), all of it inside SECONDS (default 420); the tables in summary.txt, every log and JSON in
#       results.tar.gz, the kernel table in kernel_times.tsv, PyTorch's snapshot in torch_snapshot.pickle.xz
# Logs and JSON go to $OUT (the device tool's) or build-gpu/out.
set -euo pipefail
cd "$(dirname "$0")/.."
mode=${1:-tests}
if [ "$mode" != tests ] && [ "$mode" != benchmark ] && [ "$mode" != all ]; then
  echo "gpu_check.sh: unknown mode '$mode'; use: gpu_check.sh [tests | benchmark [PART...] | all [SECONDS]]" >&2
  exit 2
fi
if [ ! -f build-gpu/bundle.tar.xz ]; then
  echo "gpu_check.sh: build-gpu/bundle.tar.xz is missing; make it with scripts/gpu_bundle.sh and carry it" >&2
  exit 2
fi
out=${OUT:-build-gpu/out}
mkdir -p "$out"
if ! command -v nvidia-smi > /dev/null || ! nvidia-smi > "$out/nvidia-smi.txt" 2>&1; then
  echo "gpu_check.sh: no GPU here (nvidia-smi missing or failing); run it on the GPU machine" >&2
  exit 1
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
tar -C "$work" -xJf build-gpu/bundle.tar.xz
bundle=$work/bundle

# CUDA's libraries: the toolkit's, else the pip wheels PyTorch brought.
cuda_libraries=""
for candidate in /usr/local/cuda/lib64 /usr/local/cuda/lib /usr/local/cuda/targets/x86_64-linux/lib \
                 $(python3 -c 'import nvidia, os; print(os.path.join(list(nvidia.__path__)[0], "cublas", "lib"))' 2>/dev/null || true) \
                 $(python3 -c 'import nvidia, os; print(os.path.join(list(nvidia.__path__)[0], "cu13", "lib"))' 2>/dev/null || true); do
  if ls "$candidate"/libcublasLt.so.13* > /dev/null 2>&1; then cuda_libraries=$candidate; break; fi
done
export LD_LIBRARY_PATH="$bundle/lib${cuda_libraries:+:$cuda_libraries}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
if ldd "$bundle/bin/ferry" "$bundle/bin/cuda_tests" | grep "not found"; then
  echo "gpu_check.sh: libraries above were not found (cuBLASLt looked for under /usr/local/cuda and python3's nvidia wheels)" >&2
  exit 1
fi
head -12 "$out/nvidia-smi.txt"

if [ "$mode" = all ]; then  # the rest of this script, then the benchmarks, inside the budget
  set +e  # each step says how it failed; the next still runs
  budget=${2:-420}
  start=$(date +%s)
  results=$out/results
  mkdir -p "$results"
  {
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv || true
    python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, torch.cuda.get_device_name())' || true
    nvcc --version | tail -2 || true
    lscpu | grep -m1 'Model name' || true
  } 2>&1 | tee "$out/summary.txt"
  status=0
  checks=${CHECKS:-tests grid allocator attention kernels}  # which of these run before the benchmark parts
  if [[ " $checks " == *" tests "* ]]; then
  OUT=$results timeout 200 bash "$0" tests > "$results/tests.txt" 2>&1 || status=1
  grep -E "^cuda_tests:|FAILED|skipped|smoke|stray|  (f32|bf16)" "$results/tests.txt" | head -40 | tee -a "$out/summary.txt"
  fi
  if [[ " $checks " == *" grid "* ]]; then
  OPENMPI=$bundle/openmpi timeout 200 bash scripts/gpu_grid_check.sh "$bundle/bin/ferry" "$results/grid" 2>&1 | tee -a "$out/summary.txt"
  [ "${PIPESTATUS[0]}" = 0 ] || status=1
  fi
  if [[ " $checks " == *" allocator "* ]]; then
  timeout 60 "$bundle/bin/allocator_benchmark" --benchmark_filter='CacheHit.*/(4096|2097152|134217728)/.*threads:1|Cuda' --benchmark_repetitions=3 \
    --benchmark_report_aggregates_only=true --benchmark_min_time=0.1 > "$results/allocator_benchmark.txt" 2>&1 || status=1
  grep -E "median|error" "$results/allocator_benchmark.txt" | tee -a "$out/summary.txt"
  fi
  if [[ " $checks " == *" attention "* ]]; then  # ferry's attention kernels beside PyTorch's, the gpt2 and gpt2-medium shapes
    for shape in "16 1024 768 12" "16 1024 1024 16"; do
      # shellcheck disable=SC2086
      timeout 60 "$bundle/bin/attention_benchmark" $shape 2>&1 | tee -a "$results/attention.jsonl" "$out/summary.txt" || status=1
      # shellcheck disable=SC2086
      timeout 60 python3 benchmarks/attention_peer.py $shape 2>&1 | tee -a "$results/attention.jsonl" "$out/summary.txt" || status=1
    done
  fi
  if [[ " $checks " == *" kernels "* ]]; then
  OUT=$results timeout 120 bash dev/gpu_kernel_times.sh gpt2 16 > "$results/kernel_times.log" 2>&1 || status=1
  head -30 "$results/kernel_times.txt" 2>/dev/null | tee -a "$out/summary.txt"
  cp "$results/kernel_times.tsv" "$out/" 2>/dev/null || true
  fi
  if [ "${PARTS:-}" != none ]; then  # PARTS=none: the checks alone
    RESULTS=$results DEADLINE=$((start + budget - 25)) bash benchmarks/gpu_benchmark.sh "$bundle/bin/ferry" 6 "$PWD/build-gpu/nvme" 2>&1 | tee -a "$out/summary.txt" || status=1
  fi
  cp "$results"/cuda_tests.json "$out/" 2>/dev/null || true
  if [ -f "$results/torch_snapshot.pickle" ]; then xz -T0 -3 -c "$results/torch_snapshot.pickle" > "$out/torch_snapshot.pickle.xz" && rm "$results/torch_snapshot.pickle"; fi
  tar -C "$out" -czf "$out/results.tar.gz" results && rm -rf "$results"
  echo "all: $(($(date +%s) - start)) s" | tee -a "$out/summary.txt"
  exit "$status"
fi

if [ "$mode" = benchmark ]; then
  shift
  status=0
  parts=()
  for part in "$@"; do
    if [ "$part" = allocator ]; then  # cudaMalloc and cudaMallocAsync beside the cache hit, as in docs/benchmarks.md
      "$bundle/bin/allocator_benchmark" --benchmark_filter='CacheHit|Glibc|Cuda' --benchmark_repetitions=5 \
        --benchmark_report_aggregates_only=true --benchmark_min_time=0.2 2>&1 | tee "$out/allocator_benchmark.txt" || status=1
    else
      parts+=("$part")
    fi
  done
  if [ $# = 0 ] || [ ${#parts[@]} -gt 0 ]; then
    PARTS="${parts[*]}" bash benchmarks/gpu_benchmark.sh "$bundle/bin/ferry" 2>&1 | tee "$out/gpu_benchmark.txt" || status=1
  fi
  exit "$status"
fi

status=0
"$bundle/bin/cuda_tests" --gtest_output="json:$out/cuda_tests.json" > "$out/cuda_tests.log" 2>&1 || status=$?
grep -E "^  (f32|bf16)|FAILED|Failure" "$out/cuda_tests.log" | head -40 || true
tail -30 "$out/cuda_tests.log"
python3 - "$out/cuda_tests.json" <<'PY' || status=1
import json, sys
report = json.load(open(sys.argv[1]))
skipped = [f"{suite['name']}.{test['name']}" for suite in report["testsuites"] for test in suite["testsuite"]
           if test.get("result") == "SKIPPED"]
print(f"cuda_tests: {report['tests']} tests, {report['failures']} failed, {len(skipped)} skipped")
if skipped:
    print("skipped on a GPU machine (each must run here):", *skipped, sep="\n  ")
    sys.exit(1)
PY

# The command line on the GPU beside the cpu device: the same tiny run, losses within bf16's reach.
for device in cpu cuda; do
  "$bundle/bin/ferry" train --device "$device" --model gpt2-tiny --steps 4 --batch 2 --seq 64 --precision bf16 \
    --summary "$out/smoke_$device.json" > "$out/smoke_$device.log" 2>&1 || { status=1; tail -20 "$out/smoke_$device.log"; }
done
python3 - "$out/smoke_cpu.json" "$out/smoke_cuda.json" <<'PY' || status=1
import json, os, sys
if not all(os.path.exists(path) for path in sys.argv[1:3]):
    sys.exit("no smoke summary to compare (a run above failed)")
cpu, cuda = (json.load(open(path)) for path in sys.argv[1:3])
pairs = [(c["loss"], g["loss"]) for c, g in zip(cpu["steps"], cuda["steps"])]
print("smoke losses (cpu, cuda):", ", ".join(f"({c:.4f}, {g:.4f})" for c, g in pairs))
print("cuda peak allocated", cuda["memory"]["peak_allocated"], "reserved", cuda["memory"]["peak_reserved"])
if len(pairs) != 4 or any(abs(c - g) > 2e-2 * abs(c) for c, g in pairs):
    sys.exit("the cuda losses stray from the cpu ones by more than 2%")
PY
exit "$status"
