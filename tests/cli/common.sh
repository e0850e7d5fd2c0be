# Sourced by the CLI tests: strict mode, $ferry, a scratch directory $work removed on exit,
# expect_error, rendered_dom and render (a page in headless Chromium).
set -euo pipefail
ferry=${FERRY:?FERRY must name the ferry binary}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
trap 'echo "$(basename "$0") failed at line $LINENO: $BASH_COMMAND" >&2' ERR

expect_error() {  # expect_error PATTERN COMMAND...: the command fails and stderr names the problem
  local pattern=$1; shift
  if "$@" > "$work/out.txt" 2> "$work/err.txt"; then echo "accepted: $*"; exit 1; fi
  if ! grep -q -- "$pattern" "$work/err.txt"; then echo "error for '$*' lacks '$pattern':"; cat "$work/err.txt"; exit 1; fi
  refuse_library_text "$work/err.txt" "$*"
}

# A message a user reads is in ferry's words: a library's own text (nlohmann's json.exception,
# libstdc++'s basic_string or filesystem error, stoi, MPI_ERR, a std:: name) is an error path that
# wraps nothing. Every expect_error of every CLI test checks it.
refuse_library_text() {  # refuse_library_text FILE WHAT
  if grep -E -q 'json\.exception|basic_string|filesystem error|stoi|stoll|MPI_ERR|std::' "$1"; then
    echo "library text reaches the user for '$2':"; cat "$1"; exit 1
  fi
}

chromium_binary() {
  local chromium
  chromium=$(command -v chromium || command -v chromium-browser || true)
  [[ -n "$chromium" ]] || { echo "chromium is not installed (scripts/setup.sh installs it)" >&2; exit 1; }
  echo "$chromium"
}

rendered_dom() {  # rendered_dom FILE.html[#FRAGMENT]: the page's DOM after its scripts ran, on stdout
  timeout 120 "$(chromium_binary)" --headless --no-sandbox --disable-gpu --disable-dev-shm-usage --user-data-dir="$work/chromium" \
    --dump-dom "file://$1" 2> /dev/null
}

render() {  # render FILE.html[#FRAGMENT] SCREENSHOT.png: the page lays out its SVGs and raises no script error
  local dom
  dom=$(rendered_dom "$1")
  grep -q 'data-rendered="ok"' <<< "$dom" || { echo "$1 did not render: $(grep -o '<body[^>]*>' <<< "$dom")"; exit 1; }
  if grep -q 'data-error=' <<< "$dom"; then echo "$1 raised a script error: $(grep -o '<body[^>]*>' <<< "$dom")"; exit 1; fi
  timeout 120 "$(chromium_binary)" --headless --no-sandbox --disable-gpu --disable-dev-shm-usage --user-data-dir="$work/chromium" --hide-scrollbars \
    --window-size=1120,900 --screenshot="$2" "file://$1" > /dev/null 2>&1
  [[ $(stat -c %s "$2") -gt 10000 ]] || { echo "screenshot of $1 is nearly empty"; exit 1; }
}
