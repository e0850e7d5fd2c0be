#!/usr/bin/env bash
# The NVMe store beside fio on the same directory: for each size, chunk and queue depth, ferry's
# nvme_store_benchmark (write then read, chunk checksums included) and fio with io_uring, O_DIRECT,
# fixed buffers and registered files, interleaved REPEATS times; the table shows medians in GB/s
# (10^9 B/s) and the median of the run-by-run ratios ferry / fio. Record the output in docs/benchmarks.md.
#   benchmarks/nvme_store_benchmark.sh [BENCHMARK] [DIRECTORY] [REPEATS]
# BENCHMARK defaults to build/benchmarks/nvme_store_benchmark; DIRECTORY to a new folder beside the
# repository (its disk is the one measured; it is removed afterwards).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
benchmark=${1:-$root/build/benchmarks/nvme_store_benchmark}
directory=${2:-}
repeats=${3:-3}
made_directory=0
if [[ -z $directory ]]; then
  directory=$(mktemp -d -p "$(dirname "$root")" ferry-nvme-benchmark.XXXXXX)
  made_directory=1
fi
mkdir -p "$directory"
results=$(mktemp)
cleanup() {
  rm -f "$results" "$directory/fio.bin" "$directory/nvme_store_benchmark.bin"
  if [[ $made_directory -eq 1 ]]; then rm -rf "$directory"; fi
}
trap cleanup EXIT

if ! command -v fio > /dev/null; then
  sudo_prefix=()
  [[ $(id -u) -ne 0 ]] && sudo_prefix=(sudo)
  DEBIAN_FRONTEND=noninteractive "${sudo_prefix[@]}" apt-get install -y -qq fio > /dev/null
fi

# size chunk queue-depth
grid=(
  "1GiB 1MiB 8" "1GiB 1MiB 32" "1GiB 4MiB 8" "1GiB 4MiB 32"
  "4GiB 1MiB 8" "4GiB 1MiB 32" "4GiB 4MiB 8" "4GiB 4MiB 32"
  "8GiB 1MiB 32"
)

fio_gbps() {  # rw chunk depth size
  fio --name=ferry-peer --ioengine=io_uring --direct=1 --fixedbufs --registerfiles --rw="$1" --bs="$2" \
    --iodepth="$3" --size="$4" --filename="$directory/fio.bin" --output-format=json 2> /dev/null |
    /usr/bin/python3 -c "import json,sys; j=json.load(sys.stdin)['jobs'][0]; print(j['$1']['bw_bytes']/1e9)"
}

echo "nvme_store_benchmark beside fio in $directory ($(df -T "$directory" | awk 'NR==2 {print $1 ", " $2}'), $(nproc) CPUs, $repeats runs each, medians)" >&2
for entry in "${grid[@]}"; do
  read -r size chunk depth <<< "$entry"
  fio_chunk=${chunk%iB}; fio_size=${size%iB}  # fio reads 1M and 1G as powers of 1024
  for ((run = 0; run < repeats; ++run)); do
    ferry_output=$("$benchmark" --directory "$directory" --size "$size" --chunk "$chunk" --queue-depth "$depth")
    ferry_write=$(sed -n 's/^RESULT direction=write gbps=\([0-9.]*\).*/\1/p' <<< "$ferry_output")
    ferry_read=$(sed -n 's/^RESULT direction=read gbps=\([0-9.]*\).*/\1/p' <<< "$ferry_output")
    peer_write=$(fio_gbps write "$fio_chunk" "$depth" "$fio_size")
    peer_read=$(fio_gbps read "$fio_chunk" "$depth" "$fio_size")
    rm -f "$directory/fio.bin"
    echo "$size $chunk $depth $ferry_write $peer_write $ferry_read $peer_read" >> "$results"
    echo "  $size chunk $chunk depth $depth run $((run + 1)): ferry write $ferry_write read $ferry_read, fio write $peer_write read $peer_read" >&2
  done
done

/usr/bin/python3 - "$results" <<'PY'
import statistics, sys
# Ratios are taken run by run (ferry and fio ran back to back) and then the median: on a shared disk
# or CPU the pairs see the same conditions, which medians of each side alone do not guarantee.
rows = {}
for line in open(sys.argv[1]):
    size, chunk, depth, *values = line.split()
    rows.setdefault((size, chunk, depth), []).append([float(v) for v in values])
print(f"{'size':>6} {'chunk':>6} {'QD':>3} | {'ferry write':>11} {'fio write':>9} {'ratio':>6} | {'ferry read':>10} {'fio read':>8} {'ratio':>6}")
ratios = []
for (size, chunk, depth), runs in rows.items():
    fw, pw, fr, pr = (statistics.median(column) for column in zip(*runs))
    write_ratio = statistics.median(run[0] / run[1] for run in runs)
    read_ratio = statistics.median(run[2] / run[3] for run in runs)
    ratios += [write_ratio, read_ratio]
    print(f"{size:>6} {chunk:>6} {depth:>3} | {fw:>11.2f} {pw:>9.2f} {write_ratio:>6.2f} | {fr:>10.2f} {pr:>8.2f} {read_ratio:>6.2f}")
print(f"ferry / fio over the grid: median {statistics.median(ratios):.2f}, min {min(ratios):.2f}, max {max(ratios):.2f}")
PY
