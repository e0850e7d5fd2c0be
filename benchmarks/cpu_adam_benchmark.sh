#!/usr/bin/env bash
# CpuAdam beside its peers, in one run: the STREAM-style triad on the same buffers and threads
# (cpu_adam_benchmark), torch.optim.AdamW foreach=False/True in Debian's python3-torch (1.13), and, when
# PEERS_PYTHON names a Python with a current torch and deepspeed (a venv: pip install torch deepspeed
# ninja), torch's AdamW foreach and fused=True and DeepSpeed's DeepSpeedCPUAdam (cpu_adam_peers.py) at
# the same sizes and thread counts. Prints one table row per size and thread count: ferry's elements/s
# and GB/s (28 B/element), the triads' GB/s (plain: 16 B/element with the write-allocate read;
# streaming stores: 12 B/element), ferry / the faster triad's bandwidth, each peer's elements/s and
# ferry's speedup over it.
#   [PEERS_PYTHON=/path/to/venv/bin/python] benchmarks/cpu_adam_benchmark.sh [BENCHMARK_BINARY] [MAX_ELEMENTS]
# Goals (issue 17): ferry >= 1.2x the faster peer, or the memory-bandwidth limit, whichever is lower.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
binary=${1:-$root/build/benchmarks/cpu_adam_benchmark}
max_elements=${2:-1e9}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

sizes=$(/usr/bin/python3 -c "import sys; m=float(sys.argv[1]); print(','.join(s for s in ('1e6','1e7','1e8','1e9') if float(s) <= m))" "$max_elements")
"$binary" --max_elements="$max_elements" --benchmark_format=json --benchmark_out="$work/ferry.json" \
  --benchmark_out_format=json > /dev/null
/usr/bin/python3 "$root/benchmarks/cpu_adam_peers.py" --sizes "$sizes" --threads 1,2 > "$work/torch.jsonl"
if [[ -n ${PEERS_PYTHON:-} ]]; then
  "$PEERS_PYTHON" "$root/benchmarks/cpu_adam_peers.py" --sizes "$sizes" --threads 1,2 \
    --variants torch-foreach,torch-fused,deepspeed 2> "$work/peers.err" | grep '^{' >> "$work/torch.jsonl"  # deepspeed logs to stdout
fi

/usr/bin/python3 - "$work/ferry.json" "$work/torch.jsonl" <<'PY'
import json, sys
ferry = json.load(open(sys.argv[1]))
rows = {}
for b in ferry["benchmarks"]:
    name, rest = b["name"].split("/", 1)
    fields = dict(part.split(":") for part in rest.split("/") if part.count(":") == 1 and not part.startswith("min_time"))
    key = (int(fields["elements"]), int(fields["threads"]))
    entry = rows.setdefault(key, {})
    if b.get("error_occurred"):
        entry.setdefault("notes", []).append(f"{name}: {b.get('error_message', 'error')}")
        continue
    entry[name] = b
peers, names = {}, []
for line in open(sys.argv[2]):
    t = json.loads(line)
    if "skipped" in t:
        if "size" in t:
            for threads in (1, 2):
                rows.setdefault((t["size"], threads), {}).setdefault("notes", []).append(f"peers: {t['skipped']}")
        else:
            print(f"note: {t['variant']} {t['skipped']}")
        continue
    if t["variant"] not in names:
        names.append(t["variant"])
    peers[(t["size"], t["threads"], t["variant"])] = t["elements_per_second"]

print(f"machine: {ferry['context'].get('num_cpus')} CPUs, {ferry['context'].get('mhz_per_cpu')} MHz; "
      f"ferry SIMD: {next((b.get('label') for b in ferry['benchmarks'] if b.get('label')), '?')}")
print("| elements | threads | ferry Melem/s | ferry GB/s | triad GB/s | nt triad GB/s | ferry/triad | "
      + " | ".join(f"{n} Melem/s | x" for n in names) + " |")
print("|---|---|---|---|---|---|---|" + "---|---|" * len(names))
for (elements, threads) in sorted(rows):
    entry = rows[(elements, threads)]
    adam, triad, streaming = entry.get("AdamW"), entry.get("Triad"), entry.get("TriadNonTemporal")
    fmt = lambda value, spec: format(value, spec) if value is not None else "-"
    adam_elements = adam["elements_per_second"] if adam else None
    adam_gbs = adam["bytes_per_second"] / 1e9 if adam else None
    triad_gbs = triad["bytes_per_second"] / 1e9 if triad else None
    triad_stream = streaming["bytes_per_second"] / 1e9 if streaming else None
    best = max((x for x in (triad_gbs, triad_stream) if x is not None), default=None)
    ratio = f"{100 * adam_gbs / best:.0f}%" if adam and best else "-"
    cells = []
    for name in names:
        peer = peers.get((elements, threads, name))
        cells.append(f"{fmt(peer and peer / 1e6, '.0f')} | {f'{adam_elements / peer:.2f}x' if adam and peer else '-'}")
    print(f"| {elements:.0e} | {threads} | {fmt(adam_elements and adam_elements / 1e6, '.0f')} | {fmt(adam_gbs, '.1f')} | "
          f"{fmt(triad_gbs, '.1f')} | {fmt(triad_stream, '.1f')} | {ratio} | " + " | ".join(cells) + " |")
    for note in entry.get("notes", []):
        print(f"  note ({elements:.0e}, {threads}): {note}")
print("ferry GB/s counts 28 B/element; triad GB/s: a = b + s*c, 16 B/element (with the write-allocate read of a);")
print("nt triad: the same with AVX-512 streaming stores, 12 B/element; ferry/triad: ferry over the faster triad;")
print("x: ferry's elements/s over the peer's.")
PY
