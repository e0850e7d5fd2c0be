# Sourced by the CLI tests: strict mode, $ferry, a scratch directory $work removed on exit, and
# expect_error.
set -euo pipefail
ferry=${FERRY:?FERRY must name the ferry binary}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

expect_error() {  # expect_error PATTERN COMMAND...: the command fails and stderr names the problem
  local pattern=$1; shift
  if "$@" > "$work/out.txt" 2> "$work/err.txt"; then echo "accepted: $*"; exit 1; fi
  if ! grep -q -- "$pattern" "$work/err.txt"; then echo "error for '$*' lacks '$pattern':"; cat "$work/err.txt"; exit 1; fi
}
