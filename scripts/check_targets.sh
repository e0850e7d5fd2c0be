#!/usr/bin/env bash
# Every tracked source file belongs to something that builds it: each .cpp/.cu/.cc under the source
# folders is named by a CMakeLists.txt in its folder or one above (by its path from there, or from the
# repository root), and each header is included by some tracked file. A file no target builds is dead
# code that still reads as current. Usage: scripts/check_targets.sh [REPO_ROOT]; exit 1 on any finding.
set -euo pipefail
cd "${1:-$(dirname "$0")/..}"

folders=(allocator engine models schedule offload tests benchmarks)
status=0

# The words (file names with their folders) each CMakeLists.txt lists, keyed by its folder.
declare -A listed=()
while IFS= read -r cmake; do
  listed[$(dirname "$cmake")]=" $(tr -s ' \t()"' '\n' <"$cmake" | grep -E '\.(cpp|cu|cc)$' | sed 's|^\${PROJECT_SOURCE_DIR}/||; s|^\${CMAKE_CURRENT_SOURCE_DIR}/||' | tr '\n' ' ') "
done < <(git ls-files -- CMakeLists.txt '*/CMakeLists.txt')

built_by_cmake() {
  local file=$1 folder
  folder=$(dirname "$file")
  while :; do
    if [[ -v "listed[$folder]" ]]; then
      local relative=${file#"$folder"/}
      [[ "$folder" == "." ]] && relative=$file
      [[ "${listed[$folder]}" == *" $relative "* || "${listed[$folder]}" == *" $file "* ]] && return 0
    fi
    [[ "$folder" == "." ]] && break
    folder=$(dirname "$folder")
  done
  for words in "${listed[@]}"; do [[ "$words" == *" $file "* ]] && return 0; done
  return 1
}

while IFS= read -r file; do
  if ! built_by_cmake "$file"; then
    echo "$file: no CMakeLists.txt builds it; add it to its folder's target, or remove it (experiments go in dev/)"
    status=1
  fi
done < <(git ls-files -- "${folders[@]}" | grep -E '\.(cpp|cu|cc)$')

includes=$(git ls-files -- "${folders[@]}" dev | grep -E '\.(h|hpp|cuh|cpp|cu|cc)$' | xargs grep -ohE '^[[:space:]]*#[[:space:]]*include[[:space:]]+["<][^">]+[">]' |
  sed -E 's/.*["<]([^">]+)[">].*/\1/' | sort -u)
while IFS= read -r header; do
  name=$(basename "$header")
  if ! grep -qxF "$header" <<<"$includes" && ! grep -qE "(^|/)${name//./\\.}$" <<<"$includes"; then
    echo "$header: no tracked file includes it; remove it or include it where it is used"
    status=1
  fi
done < <(git ls-files -- "${folders[@]}" | grep -E '\.(h|hpp|cuh)$')
exit $status
