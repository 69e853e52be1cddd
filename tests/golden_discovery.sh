#!/usr/bin/env bash
# The golden cases are found when the tests run, not when meson is set up: the
# case suite's golden tests, run with checkouts and golden folders made here and
# now (after the build), take the full set from MLAJIT_GOLDEN_DIR, else
# ../shared/golden beside the checkout, else .golden in it, and skip (saying
# where they looked) without one; a MLAJIT_GOLDEN_DIR with no cases fails.
# Usage: golden_discovery.sh path/to/test_case SUBSET_DIR
set -u
suite=$1 subset=$2
scratch=$(mktemp -d /tmp/mlajit-golden-XXXXXX)
trap 'rm -rf "$scratch"' EXIT
passed=0 failed=0
# run STATUS WORD ENV...: the golden tests with ENV exit STATUS and print WORD
run() {
  local want=$1 word=$2
  shift 2
  local out rc
  out=$(env -u MLAJIT_GOLDEN_DIR MLAJIT_LOG=quiet MLAJIT_GOLDEN_SUBSET="$subset" "$@" "$suite" \
    --filter 'golden/full_set_is_found' --verbose 2>&1)
  rc=$?
  if [ "$rc" -eq "$want" ] && grep -qF -- "$word" <<<"$out"; then passed=$((passed + 1)); else
    failed=$((failed + 1))
    echo "FAIL: $* $suite: exit $rc (want $want), output should hold '$word':"
    tail -8 <<<"$out" | sed 's/^/    /'
  fi
}
# a stand-in full set: the subset's two cases under their own names (so the
# subset's copies compare equal) and five more names, seven in all
make_set() {
  mkdir -p "$1"
  local k=0
  for c in "$subset"/*/; do
    c=${c%/}
    ln -s "$c" "$1/$(basename "$c")"
    for alias in a b c; do
      k=$((k + 1))
      [ "$k" -le 5 ] && ln -s "$c" "$1/alias_$k"
    done
  done
}
checkout=$scratch/work/checkout
mkdir -p "$checkout"
run 77 "the full golden set is not here" MLAJIT_SOURCE_ROOT="$checkout"
make_set "$scratch/work/shared/golden" # added after the build: used at once
run 0 "[PASS] golden::full_set_is_found" MLAJIT_SOURCE_ROOT="$checkout"
rm -rf "$scratch/work/shared"
make_set "$checkout/.golden"
run 0 "[PASS] golden::full_set_is_found" MLAJIT_SOURCE_ROOT="$checkout"
make_set "$scratch/elsewhere"
run 0 "[PASS] golden::full_set_is_found" MLAJIT_SOURCE_ROOT="$scratch/nowhere" MLAJIT_GOLDEN_DIR="$scratch/elsewhere"
mkdir -p "$scratch/empty"
run 1 "MLAJIT_GOLDEN_DIR=$scratch/empty holds no case directories" MLAJIT_SOURCE_ROOT="$checkout" \
  MLAJIT_GOLDEN_DIR="$scratch/empty"
# every golden test runs on the stand-in set, and the subset matches it byte for byte
out=$(env MLAJIT_LOG=quiet MLAJIT_GOLDEN_SUBSET="$subset" MLAJIT_SOURCE_ROOT="$scratch/nowhere" \
  MLAJIT_GOLDEN_DIR="$scratch/elsewhere" "$suite" --filter 'golden/*' 2>&1)
rc=$?
if [ "$rc" -eq 0 ] && ! grep -q "^skipped:" <<<"$out"; then passed=$((passed + 1)); else
  failed=$((failed + 1)); echo "FAIL: golden/* on a stand-in full set: exit $rc:"; tail -8 <<<"$out" | sed 's/^/    /'
fi
echo "golden discovery: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
