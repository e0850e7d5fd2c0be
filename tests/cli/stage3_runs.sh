# Sourced by the ZeRO 3 CLI tests after common.sh: ferry under mpirun (launch RANKS ARGS...), the tests'
# model, and run NAME RANKS ARGS...: train under mpirun into NAME.json and dry-run every rank in one
# process into NAME.meta.json (a dry run offloads nothing to NVMe: nvme is dry-run as cpu).
mpirun=${MPIRUN:-mpirun}
launch() {  # launch RANKS ARGS...: ferry under mpirun
  local ranks=$1; shift
  timeout 300 "$mpirun" --allow-run-as-root --oversubscribe -np "$ranks" "$ferry" "$@"
}
model=(--model gpt2-tiny --steps 3 --batch 2 --seq 32 --lr 1e-3 --dropout 0.1 --threads 1 --log-every 100)
run() {  # run NAME RANKS ARGS...: train under mpirun into NAME.json; the dry run of every rank (nvme as cpu) into NAME.meta.json
  local name=$1 ranks=$2; shift 2
  launch "$ranks" train "${model[@]}" "$@" --summary "$work/$name.json" > "$work/out.txt" 2>&1 || { cat "$work/out.txt"; exit 1; }
  local dry=() skip=0
  for arg in "$@"; do
    if ((skip)); then skip=0; continue; fi
    if [[ $arg == --nvme-path ]]; then skip=1; continue; fi
    dry+=("${arg/#nvme/cpu}")
  done
  "$ferry" train "${model[@]}" "${dry[@]}" --device meta --dp "$ranks" --summary "$work/$name.meta.json" > "$work/dry.txt" 2>&1 ||
    { cat "$work/dry.txt"; exit 1; }
}
