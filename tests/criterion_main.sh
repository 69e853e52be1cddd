#!/usr/bin/env bash
# tests/criterion_main.c, the main of every Criterion suite, on a suite made for
# it (criterion_main_check.c): all tests skipped -> 77 (meson's SKIP) with each
# reason printed once with its count; a pass among skips -> 0; a failure -> 1,
# whatever skipped. Then tools/test_summary.py's one line from a made-up meson
# test log. Usage: criterion_main.sh SUITE PYTHON TEST_SUMMARY_PY
set -u
suite=$1 python=$2 summary=$3
passed=0 failed=0
# expect STATUS FILTER WORD...: the suite run with --filter FILTER exits STATUS and
# its stdout holds every WORD
expect() {
  local want=$1 filter=$2
  shift 2
  local out rc
  out=$("$suite" --filter "$filter" 2>/dev/null)
  rc=$?
  local ok=1
  [ "$rc" -eq "$want" ] || ok=0
  for word in "$@"; do grep -qF -- "$word" <<<"$out" || ok=0; done
  if [ "$ok" -eq 1 ]; then passed=$((passed + 1)); else
    failed=$((failed + 1))
    echo "FAIL: --filter '$filter': exit $rc (want $want), stdout should hold: $*"
    sed 's/^/    /' <<<"$out"
  fi
}
expect 77 'skips/*' "skipped: 2 of 5 tests: no device here (a made-up reason)" "skipped: 3 of 5 tests: disabled or not selected"
expect 0 'passes/*' "skipped: 1 of 5 tests: a second made-up reason"
expect 1 'fails/*'
expect 1 '*' "skipped: 2 of 5 tests: no device here" "skipped: 1 of 5 tests: a second made-up reason"

# the summary line: each suite's reasons, and a SKIP that gave none
build=$(mktemp -d /tmp/mlajit-summary-XXXXXX)
trap 'rm -rf "$build"' EXIT
mkdir -p "$build/meson-logs"
cat >"$build/meson-logs/testlog.json" <<'LOG'
{"name": "gpu", "result": "SKIP", "stdout": "noise\nskipped: 30 of 30 tests: no GPU here\n", "stderr": ""}
{"name": "case", "result": "OK", "stdout": "skipped: 1 of 28 tests: no full set\n", "stderr": ""}
{"name": "install", "result": "SKIP", "stdout": "skipped: a sanitizer build\n", "stderr": ""}
{"name": "mystery", "result": "SKIP", "stdout": "", "stderr": ""}
{"name": "api", "result": "OK", "stdout": "all good\n", "stderr": ""}
LOG
line=$("$python" "$summary" "$build")
want="skipped: gpu: 30 of 30 tests: no GPU here | case: 1 of 28 tests: no full set | install: a sanitizer build | mystery: the whole suite (it printed no reason)"
if [ "$line" = "$want" ]; then passed=$((passed + 1)); else
  failed=$((failed + 1))
  echo "FAIL: test_summary.py: '$line'"
  echo "                 want '$want'"
fi
printf '{"name": "api", "result": "OK", "stdout": "", "stderr": ""}\n' >"$build/meson-logs/testlog.json"
line=$("$python" "$summary" "$build")
if [ "$line" = "skipped: nothing" ]; then passed=$((passed + 1)); else
  failed=$((failed + 1)); echo "FAIL: test_summary.py with no skip: '$line'"
fi
echo "criterion_main: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
