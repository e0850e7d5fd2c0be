#!/usr/bin/env bash
# CpuAdam beside its two peers, in one run: the STREAM-style triad on the same buffers and threads
# (cpu_adam_benchmark) and torch.optim.AdamW foreach=False/True (cpu_adam_torch.py, Debian's
# python3-torch) at the same sizes and thread counts. Prints one table row per size and thread count:
# ferry's elements/s and GB/s (28 B/element), the triads' GB/s (plain: 16 B/element with the
# write-allocate read; streaming stores: 12 B/element), ferry / the faster triad's bandwidth, and
# ferry's speedup over each torch variant.
#   benchmarks/cpu_adam_benchmark.sh [BENCHMARK_BINARY] [MAX_ELEMENTS]
# Goals (issue): ferry >= 80% of the triad's bandwidth and >= 3x torch's AdamW.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
binary=${1:-$root/build/benchmarks/cpu_adam_benchmark}
max_elements=${2:-1e9}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

sizes=$(/usr/bin/python3 -c "import sys; m=float(sys.argv[1]); print(','.join(s for s in ('1e6','1e7','1e8','1e9') if float(s) <= m))" "$max_elements")
"$binary" --max_elements="$max_elements" --benchmark_format=json --benchmark_out="$work/ferry.json" \
  --benchmark_out_format=json > /dev/null
/usr/bin/python3 "$root/benchmarks/cpu_adam_torch.py" --sizes "$sizes" --threads 1,2 > "$work/torch.jsonl"

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
torch = {}
for line in open(sys.argv[2]):
    t = json.loads(line)
    if "skipped" in t:
        for threads in (1, 2):
            rows.setdefault((t["size"], threads), {}).setdefault("notes", []).append(f"torch {t['skipped']}")
        continue
    torch[(t["size"], t["threads"], t["foreach"])] = t["elements_per_second"]

print(f"machine: {ferry['context'].get('num_cpus')} CPUs, {ferry['context'].get('mhz_per_cpu')} MHz; "
      f"ferry SIMD: {next((b.get('label') for b in ferry['benchmarks'] if b.get('label')), '?')}")
header = (f"{'elements':>10} {'thr':>3} | {'ferry Melem/s':>13} {'ferry GB/s':>10} | {'triad GB/s':>10} "
          f"{'nt GB/s':>10} {'ferry/triad':>11} | {'torch Melem/s':>13} {'torch fe Melem/s':>16} "
          f"{'x torch':>7} {'x torch fe':>10}")
print(header)
print("-" * len(header))
for (elements, threads) in sorted(rows):
    entry = rows[(elements, threads)]
    adam, triad, streaming = entry.get("AdamW"), entry.get("Triad"), entry.get("TriadNonTemporal")
    def fmt(value, spec):
        return format(value, spec) if value is not None else "-".rjust(int(spec.split(".")[0]))
    adam_elements = adam["elements_per_second"] if adam else None
    adam_gbs = adam["bytes_per_second"] / 1e9 if adam else None
    triad_gbs = triad["bytes_per_second"] / 1e9 if triad else None
    triad_stream = streaming["bytes_per_second"] / 1e9 if streaming else None
    best = max((x for x in (triad_gbs, triad_stream) if x is not None), default=None)
    ratio = f"{100 * adam_gbs / best:.0f}%" if adam and best else "-"
    t_plain = torch.get((elements, threads, False))
    t_foreach = torch.get((elements, threads, True))
    x_plain = f"{adam_elements / t_plain:.1f}x" if adam and t_plain else "-"
    x_foreach = f"{adam_elements / t_foreach:.1f}x" if adam and t_foreach else "-"
    print(f"{elements:>10.0e} {threads:>3} | {fmt(adam_elements and adam_elements / 1e6, '13.0f')} "
          f"{fmt(adam_gbs, '10.1f')} | {fmt(triad_gbs, '10.1f')} {fmt(triad_stream, '10.1f')} {ratio:>11} | "
          f"{fmt(t_plain and t_plain / 1e6, '13.0f')} {fmt(t_foreach and t_foreach / 1e6, '16.0f')} "
          f"{x_plain:>7} {x_foreach:>10}")
    for note in entry.get("notes", []):
        print(f"{'':>15}note: {note}")
print("ferry GB/s counts 28 B/element; triad GB/s: a = b + s*c, 16 B/element (with the write-allocate read of a);")
print("nt GB/s: the same with AVX-512 streaming stores, 12 B/element; ferry/triad: ferry over the faster triad.")
print("'fe' = torch foreach=True; x torch = ferry elements/s over torch's.")
PY
