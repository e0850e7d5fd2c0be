#!/usr/bin/env bash
# The dependency rule of ../shared/ARCHITECTURE.md, checked on the sources: each folder (one CMake library)
# includes only itself and the folders below it. The table below is that picture; a new folder adds its line.
# Usage: scripts/check_layers.sh [REPO_ROOT]. Prints each include that goes up or sideways; exit 1 if any.
set -euo pipefail
cd "${1:-$(dirname "$0")/..}"

declare -A allowed=(
  [allocator]=""
  [engine/core]="allocator"
  [models]="allocator engine/core"
  [schedule]="allocator engine/core"
  [offload]="allocator engine/core"
  [engine/comm]="allocator engine/core"
  [engine/data]="allocator engine/core"
  [engine/grid]="allocator engine/core models engine/comm"
  [engine/optim]="allocator engine/core models offload engine/comm engine/grid"
  [engine/checkpoint]="allocator engine/core models offload engine/comm engine/grid engine/optim"
  [engine/pipeline]="allocator engine/core models schedule engine/comm"
  [engine/report]="allocator engine/core"
  [engine/snapshot]="allocator engine/core"
  [engine/train]="allocator engine/core models schedule offload engine/comm engine/data engine/grid engine/optim engine/checkpoint engine/pipeline engine/report"
  [engine/plan]="allocator engine/core models schedule offload engine/comm engine/data engine/grid engine/optim engine/checkpoint engine/pipeline engine/report engine/train"
  [engine/cli]="allocator engine/core models schedule offload engine/comm engine/data engine/grid engine/optim engine/checkpoint engine/pipeline engine/report engine/snapshot engine/train engine/plan"
)

# The folder a path (a source file's or an include's) belongs to: engine/X for engine/, else its top folder.
folder_of() {
  case "$1" in
    engine/*) echo "${1%%/*}/$(cut -d/ -f2 <<<"$1")" ;;
    *) echo "${1%%/*}" ;;
  esac
}

status=0
while IFS= read -r file; do
  from=$(folder_of "$file")
  if [[ ! -v "allowed[$from]" ]]; then
    echo "$file: folder '$from' is not in scripts/check_layers.sh's table; add it with the folders below it"
    status=1
    continue
  fi
  while IFS=: read -r line include; do
    to=$(folder_of "$include")
    [[ "$to" == "$from" ]] && continue
    [[ -v "allowed[$to]" ]] || continue  # not a ferry folder
    if [[ " ${allowed[$from]} " != *" $to "* ]]; then
      echo "$file:$line: includes \"$include\": $from may include only: ${allowed[$from]:-itself}"
      status=1
    fi
  done < <(grep -noE '^[[:space:]]*#[[:space:]]*include[[:space:]]+"[^"]+"' "$file" | sed -E 's/^([0-9]+):.*"([^"]+)"/\1:\2/')
done < <(git ls-files -- allocator engine models schedule offload | grep -E '\.(h|hpp|cpp|cu|cuh)$')
exit $status
