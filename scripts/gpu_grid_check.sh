#!/usr/bin/env bash
# Issue 34 on a machine with one GPU: `ferry train --device cuda` on 2 ranks under mpirun. NCCL refuses two
# ranks on one GPU ("Duplicate GPU detected"): the first run shows ferry's error for it; then
# FERRY_CUDA_COLLECTIVES=host carries the device buffers through host memory over MPI, and dp 2 (ZeRO 2
# and 3) and pp 2 must give the cpu device's losses (the same launch, f32) and the dry run's peaks with
# cuda kernel sizes on every rank; so must one GPU at ZeRO 1 and 3 and with ZeRO-Infinity. Uses the machine's mpirun, else the Open MPI that scripts/gpu_bundle.sh
# packed into the bundle (OPENMPI=its folder).
#   [OPENMPI=DIR] bash scripts/gpu_grid_check.sh FERRY OUT    # rehearsed with build-sanitize/ferry-emulated
set -uo pipefail
ferry=$1 out=$2
mkdir -p "$out"
if ! command -v mpirun > /dev/null; then
  ompi=${OPENMPI:?no mpirun here and OPENMPI unset: carry the bundle of scripts/gpu_bundle.sh}
  lib=$ompi/lib/x86_64-linux-gnu/openmpi/lib
  export OPAL_PREFIX=$ompi OPAL_SYSCONFDIR=$ompi/etc OPAL_PKGDATADIR=$ompi/share/openmpi OPAL_LIBDIR=$lib OPAL_PKGLIBDIR=$lib/openmpi3
  export PATH=$ompi/bin:$PATH LD_LIBRARY_PATH=${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}$ompi/deps
fi
launch() { timeout 120 mpirun --allow-run-as-root --oversubscribe -np 2 "$ferry" "$@"; }
one() { timeout 120 "$ferry" "$@"; }
model=(--model gpt2-tiny --steps 3 --batch 2 --seq 64 --lr 1e-3)
status=0
echo "== issue 34: 2 ranks of --device cuda on one GPU (mpirun: $(command -v mpirun))"
# NCCL's own refusal, in ferry's words (a build whose NCCL accepts shared GPUs, as the emulation's, runs it).
if launch train "${model[@]}" --device cuda --dp 2 --summary "$out/grid_nccl.json" > "$out/grid_nccl.log" 2>&1; then
  echo "  NCCL, dp 2: ran (this NCCL accepts two ranks on one GPU)"
else
  echo "  NCCL, dp 2: refused: $(grep -m1 -o 'ncclCommInitRank.*' "$out/grid_nccl.log" | cut -c1-300)"
  grep -q "FERRY_CUDA_COLLECTIVES=host" "$out/grid_nccl.log" || { echo "  the refusal does not name FERRY_CUDA_COLLECTIVES=host"; status=1; }
fi
# Then one GPU at ZeRO 1 and 3, and ZeRO-Infinity: the one-rank collectives are copies on the device.
for grid in "launch dp2-zero2 --dp 2 --zero-stage 2" "launch dp2-zero3 --dp 2 --zero-stage 3" "launch pp2 --pp 2 --micro-batches 2" \
            "one 1gpu-zero1 --zero-stage 1" "one 1gpu-zero3 --zero-stage 3" "one 1gpu-infinity --zero-stage 3 --offload-param cpu --offload-optimizer cpu"; do
  read -r how name flags <<< "$grid"
  # shellcheck disable=SC2086
  { FERRY_CUDA_COLLECTIVES=host $how train "${model[@]}" --device cuda $flags --summary "$out/grid_$name.json" > "$out/grid_$name.log" 2>&1 &&
    $how train "${model[@]}" --device cpu $flags --summary "$out/grid_${name}_cpu.json" > "$out/grid_${name}_cpu.log" 2>&1 &&
    "$ferry" train "${model[@]}" --device meta --dry-run-of cuda $flags --summary "$out/grid_${name}_dry.json" > "$out/grid_${name}_dry.log" 2>&1; } ||
    { echo "  $name: a run failed:"; tail -5 "$out/grid_$name.log" "$out/grid_${name}_cpu.log" 2>/dev/null; status=1; continue; }
  python3 - "$name" "$out/grid_$name.json" "$out/grid_${name}_cpu.json" "$out/grid_${name}_dry.json" <<'PY' || status=1
import json, sys
name, cuda, cpu, dry = sys.argv[1], *(json.load(open(path)) for path in sys.argv[2:])
losses = [(g["loss"], c["loss"]) for g, c in zip(cuda["steps"], cpu["steps"])]
worst = max(abs(g - c) / abs(c) for g, c in losses)
peaks = [(r["peak_allocated"], r["peak_reserved"], d["peak_allocated"], d["peak_reserved"]) for r, d in zip(cuda["ranks"], dry["ranks"])]
exact = all(a == da and r == dr for a, r, da, dr in peaks)
print(f"  {name}: backend {cuda['ranks'][0]['communication_backend']}, losses cuda/cpu "
      + ", ".join(f"{g:.5f}/{c:.5f}" for g, c in losses) + f" (worst {worst:.1e}); peaks per rank (allocated, reserved) "
      + "; ".join(f"{a:,} {r:,}" for a, r, _, _ in peaks) + (" = the dry run's" if exact else f" against the dry run's {[(p[2], p[3]) for p in peaks]}"))
if worst > 1e-4 or not exact or len(losses) != 3:
    sys.exit(1)
PY
done
exit "$status"
