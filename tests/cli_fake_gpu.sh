#!/usr/bin/env bash
# The CLI on a machine whose libcuda.so.1 is the fake driver (tests/fake_cuda):
# what `mlajit info` and `mlajit compile` say when there is a GPU, checked on any
# machine. Usage: cli_fake_gpu.sh path/to/mlajit path/to/fake_cuda_dir
set -u
mlajit=$1
export LD_LIBRARY_PATH="$2${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export MLAJIT_CACHE_DIR=$(mktemp -d /tmp/mlajit-cli-XXXXXX)
trap 'rm -rf "$MLAJIT_CACHE_DIR"' EXIT
passed=0 failed=0

# expect WORD ARGS...: mlajit ARGS exits 0 and its output holds WORD.
expect() {
  local word=$1
  shift
  local out rc
  out=$("$mlajit" "$@" 2>&1)
  rc=$?
  if [ "$rc" -eq 0 ] && grep -qF -- "$word" <<<"$out"; then
    passed=$((passed + 1))
  else
    failed=$((failed + 1))
    echo "FAIL: mlajit $*: exit $rc, output should hold '$word':"
    head -8 <<<"$out" | sed 's/^/    /'
  fi
}

expect "gpu           Fake NVIDIA H200 (sm_90a, 132 SMs, 50 MB L2)" info
expect "driver        13.0" info
expect "tactics for   Fake NVIDIA H200, 132 SMs, 2000 MHz class" info
expect "loaded on the GPU" compile --model v32 --heads 64 --page 64
expect "loaded on the GPU" compile --model dsv4 --heads 16 --page 64 --variant portable
# expect_lines PATTERN COUNT ARGS...: the output of mlajit ARGS has COUNT lines
# matching the extended regex PATTERN, whatever the exit status (the fake driver
# runs no kernel, so a bench row's check fails; its selection is what is checked).
expect_lines() {
  local pattern=$1 count=$2
  shift 2
  local out got
  out=$("$mlajit" "$@" 2>&1)
  got=$(grep -cE -- "$pattern" <<<"$out")
  if [ "$got" -eq "$count" ]; then
    passed=$((passed + 1))
  else
    failed=$((failed + 1))
    echo "FAIL: mlajit $*: $got lines match '$pattern', expected $count:"
    head -8 <<<"$out" | sed 's/^/    /'
  fi
}

# tune: the timing loop runs end to end on the fake driver; nothing it "computes"
# passes the reference check, so only --no-check stores tactics
tune_grid=(--models v32 --heads 16 --pages 64 --topk 128 --rows 1,2 --pool-mb 8 --spread-mb 16)
expect "tuned 2 of 2 buckets" tune "${tune_grid[@]}" --no-check
expect "v32.h16.p64.t0.hc0.auto.sm_90a" cache ls
expect_lines ' 0 tactics stored, .* [1-9][0-9]* failed the reference check' 1 tune --models v32 --heads 16 --pages 64 --topk 256 --rows 1 --pool-mb 8 --spread-mb 16
expect "tuned 0 of 2 buckets" tune "${tune_grid[@]}" --seconds 0
# the sweep: shapes from bench's rows and the off-grid draw, one JSON line each;
# a bad line is named by its number
sweep_file="$MLAJIT_CACHE_DIR/shapes.txt"
{ "$mlajit" bench --shapes | head -1; echo "# a comment"; "$mlajit" tune --draw-shapes 1 --seed 3; } >"$sweep_file"
mkdir "$MLAJIT_CACHE_DIR/sweep" # its own cache: the records tuned here are not the pack tests' below
MLAJIT_CACHE_DIR="$MLAJIT_CACHE_DIR/sweep" expect "swept 2 of 2 shapes" tune --sweep "$sweep_file" --no-check \
  --pool-mb 8 --spread-mb 16 --repeats 1 --json "$MLAJIT_CACHE_DIR/sweep.jsonl"
if [ "$(grep -cE '"tuned_us": .*"best_us": .*"rules_us".*"tuned_check": "skipped"' "$MLAJIT_CACHE_DIR/sweep.jsonl")" -eq 2 ]; then
  passed=$((passed + 1))
else
  failed=$((failed + 1))
  echo "FAIL: tune --sweep --json: expected 2 lines with tuned_us, best_us, rules_us and tuned_check skipped (--no-check)"
fi
echo "model=v32 h_q=16 page=64 b=1 topk=128 colour=red" >>"$sweep_file"
expect_lines "shapes.txt line 4: .*key 'colour' is unknown" 1 tune --sweep "$sweep_file" --no-check
# pack build --tune ships the cache it tunes into: with no time to tune, the two
# records stored above, and the grid's kernels with the kernels they choose
expect "2 tactic records" pack build --models v32 --heads 16 --pages 64 --tune 0 --out "$MLAJIT_CACHE_DIR/tuned.pack"
expect "tuned 0 of 65 buckets" pack build --models v32 --heads 16 --pages 64 --tune 0 --out "$MLAJIT_CACHE_DIR/t2.pack"
# bench's JSON names each row's kernel and how it was chosen: b 1 topk 2048 takes
# the tactic tuned above at rows 1 topk 128 (the nearest bucket below), and the
# rules with MLAJIT_TACTICS=0
bench_json() {
  local file=$MLAJIT_CACHE_DIR/bench.jsonl
  rm -f "$file"
  env "$@" "$mlajit" bench --heads 16 --batch 1 --topk 2048 --json "$file" >/dev/null 2>&1
  cat "$file" 2>/dev/null
}
for want in 'tuned-below:MLAJIT_TACTICS=1' 'rules:MLAJIT_TACTICS=0'; do
  line=$(bench_json "${want#*:}")
  if grep -q "\"kernel\": \"v32.h16.p64.*\"tactic\": \"${want%%:*}\"" <<<"$line"; then
    passed=$((passed + 1))
  else
    failed=$((failed + 1))
    echo "FAIL: bench --json with ${want#*:}: no \"tactic\": \"${want%%:*}\" in: $line"
  fi
done

# bench --heads N: a count BENCH.md has rows for keeps those rows; one it has none
# for runs the next larger count's rows at N heads, with that row's FlashMLA figure
expect_lines '^v32 +5 +1 +1 +32768 +2048 +0 .* 17\.2 ' 1 bench --heads 5 --batch 1 --topk 2048
expect_lines '^(v32|dsv4) ' 1 bench --heads 5 --batch 1 --topk 2048
expect_lines '^v32 +64 +1 +1 +32768 +2048 +0 .* 17\.2 ' 1 bench --heads 64 --batch 1 --topk 2048
expect_lines '^v32 +100 +2 +2 +32768 +2048 +0 .* 19\.1 ' 1 bench --heads 100 --batch 2 --topk 2048

# bench --layouts on the fake driver (it computes nothing, so every check fails
# and exits 1; the rows, their kernels and the JSON are what is checked): per
# (heads, b) the V3.2 row, then each layout's, a custom layout by its canonical
# string; the fraction's ratio to V3.2's is left out where V3.2's check failed
layouts_file=$MLAJIT_CACHE_DIR/layouts.jsonl
custom=d_nope=512,d_rope=64,tile=128,scales=fp32,place=inline,row_bytes=672
expect_lines '^(v32|glm53_nope|dots3_swa) +16 +2 +2048 .* 32 FAIL' 3 bench --layouts --heads 16 --batch 2 --seqlen 2048
MLAJIT_COMMIT=abc1234 "$mlajit" bench --layout "$custom" --layout dots3_swa --heads 64 --batch 2 --seqlen 2048 \
  --json "$layouts_file" >/dev/null 2>&1
layout_lines=$(cat "$layouts_file" 2>/dev/null)
if [ "$(grep -c '"table": "layouts"' <<<"$layout_lines")" -eq 3 ] &&
   grep -q '^{"table": "layouts", "role": "baseline", "layout": "v32", .*"h_q": 64, "b": 2, .*"bound": "compute", .*"v32": null' <<<"$layout_lines" &&
   grep -q '"layout": "nope512-rope64-v512-tile128-fp32-inline-row672", .*"bytes_per_token": 672, .*"kernel": "nope512-rope64-v512-tile128-fp32-inline-row672.h64.p64' <<<"$layout_lines" &&
   grep -q '"layout": "dots3_swa", "layout_string": "nope1024-rope64-v1024-tile128-ue8m0-footer8-row1152", .*"kernel": "dots3_swa.h64.p64.*sm90-split' <<<"$layout_lines" &&
   [ "$(grep -c '"check": "fail", "commit": "abc1234"' <<<"$layout_lines")" -eq 3 ]; then
  passed=$((passed + 1))
else
  failed=$((failed + 1))
  echo "FAIL: bench --layout ... --json: expected 3 layouts lines (v32, the custom layout, dots3_swa), got:"
  sed 's/^/    /' <<<"$layout_lines"
fi

# a forced variant that serves only the compared layout (sm90-split, DOTS3_SWA's):
# the V3.2 baseline runs auto's kernel, and says so
forced_file=$MLAJIT_CACHE_DIR/layouts-forced.jsonl
forced_out=$("$mlajit" bench --layouts --layout dots3_swa --variant sm90-split --heads 64 --batch 2 --seqlen 2048 \
  --json "$forced_file" 2>&1)
if grep -q '^v32 .*variant sm90-split does not serve it: auto' <<<"$forced_out" &&
   grep -q '"layout": "v32", .*"kernel": "v32\.h64\.p64\.' "$forced_file" &&
   ! grep -q '"kernel": "v32[^"]*sm90-split' "$forced_file" &&
   grep -q '"layout": "dots3_swa", .*"kernel": "dots3_swa.h64.p64.t64.hc64.sm90-split.sm_90a' "$forced_file"; then
  passed=$((passed + 1))
else
  failed=$((failed + 1))
  echo "FAIL: bench --layouts --variant sm90-split: the baseline on auto's kernel, the layout on sm90-split; got:"
  sed 's/^/    /' <<<"$forced_out"
  sed 's/^/    /' "$forced_file"
fi

# custom layouts through the tuner and packs as named models go: tune --layout
# stores the layout's tactics, cache ls lists them, pack build --layout ships
# them, and a plan of the layout (as inline keys) finds them in the pack alone
custom_cache=$MLAJIT_CACHE_DIR/custom-tuned
custom_spec=nope512-rope64-v512-tile128-fp32-inline-row672.h16.p64.t0.hc0.auto.sm_90a
MLAJIT_CACHE_DIR=$custom_cache expect "tuned 2 of 2 buckets" tune --layout "$custom" --heads 16 --pages 64 \
  --topk 128 --rows 1,2 --pool-mb 8 --spread-mb 16 --no-check
MLAJIT_CACHE_DIR=$custom_cache expect_lines "^  Fake NVIDIA H200 .* $custom_spec +[12] +128 " 2 cache ls
MLAJIT_CACHE_DIR=$custom_cache expect "2 tactic records" pack build --layout "$custom" --heads 16 --pages 64 \
  --tune 0 --out "$MLAJIT_CACHE_DIR/custom.pack"
expect_lines "^  Fake NVIDIA H200 .* $custom_spec " 2 pack ls "$MLAJIT_CACHE_DIR/custom.pack"
MLAJIT_PACKS=$MLAJIT_CACHE_DIR/custom.pack MLAJIT_CACHE_DIR=$MLAJIT_CACHE_DIR/empty expect \
  "tactic: tuned (measured) at this shape's bucket, rows 2, topk 128" envelope "$custom.h16.p64" --batch 2 --topk 128
# the sweep over a custom layout's shape line, as bench --layouts --shapes writes it
"$mlajit" bench --layout "$custom" --heads 16 --batch 2 --topk 128 --seqlen 2048 --shapes | grep nope512 \
  >"$MLAJIT_CACHE_DIR/custom-shapes.txt"
mkdir -p "$MLAJIT_CACHE_DIR/custom-sweep"
MLAJIT_CACHE_DIR="$MLAJIT_CACHE_DIR/custom-sweep" expect "swept 1 of 1 shapes" tune \
  --sweep "$MLAJIT_CACHE_DIR/custom-shapes.txt" --no-check --pool-mb 8 --spread-mb 16 --repeats 1 \
  --json "$MLAJIT_CACHE_DIR/custom-sweep.jsonl"
if grep -q '"model": "nope512-rope64-v512-tile128-fp32-inline-row672", "h_q": 16, "b": 2' \
  "$MLAJIT_CACHE_DIR/custom-sweep.jsonl"; then
  passed=$((passed + 1))
else
  failed=$((failed + 1))
  echo "FAIL: tune --sweep of a custom layout's line: no JSON line naming the layout"
fi
echo "cli on the fake driver: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
