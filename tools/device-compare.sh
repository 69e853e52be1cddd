#!/bin/bash
# Side by side on the GPU host: build several snapshots of the tree, check each on
# the golden cases, then time the same benchmark rows with each (one device call,
# so the figures compare). Run from the project root with .devdeps, .devtools,
# .golden and the snapshot folders carried:
#   SNAPS=".snap .snap2" ROWS="128:128:2048 16:64:512" tools/device-compare.sh
# A snapshot: mkdir .snapN && git archive HEAD | tar -x -C .snapN, then edit it
# (a folder of its own, never the root: each gets links to the root's .dev* and
# .golden). A timed row prints: snapshot, pass, model, h_q, b, topk, gpu_us,
# eager_us, splits, ratio and check, from the row's JSON line. LAYOUT_ROWS="L:H:B ..."
# times `mlajit bench --layouts` rows too (layout L beside V3.2, topk 2048; ROWS=""
# leaves out the others).
# ROWS are [model:]h_q:b:topk filters of `mlajit bench` (tools/bench-row.sh; model v32 or dsv4; without
# it, both); PASSES=N times each row N times, the snapshots in turn and in reverse
# order every other pass, so a drift in clocks falls on all of them alike;
# CASES=0 skips the golden cases (a second run on snapshots already checked);
# SETS="SNAPS|ROWS;SNAPS|ROWS" times each ROWS only with its SNAPS (after the
# build and the cases of every snapshot in SNAPS). NCU="SNAP:H ..." adds ncu's
# SpeedOfLight and memory tables for SNAP at h_q H (b 128, topk 2048);
# STALLS="SNAP:MODEL:H:B:K ..." adds ncu's per-instruction stall samples of SNAP's
# first main-kernel launch on that bench row, summarized per role with its barrier
# waits (bench/tools/stall_profile.py); LAYOUT_STALLS="SNAP:LAYOUT:H:B ..." the same for a
# layouts row (the layout at h_q H, batch B, topk 2048, seqlen 32768, page 64: a case
# made once per LAYOUT:H:B, one `run-case` by auto's kernel profiled); TESTS="tests"
# runs tools/device-run.sh's steps in the first snapshot afterwards.
set -u
OUT=${OUT:-$PWD/device-out}
mkdir -p "$OUT"
. .devtools/setup.sh >/dev/null 2>&1
. tools/bench-row.sh
SNAPS=${SNAPS:-.snap}
ROWS=${ROWS-"128:128:2048 64:128:2048 16:128:2048 128:1:2048 16:64:512 128:128:128"}
pids=""
for d in $SNAPS; do
  (cd "$d" && ln -sfn ../.devdeps .devdeps && ln -sfn ../.devtools .devtools && ln -sfn ../.golden .golden &&
   OUT="$OUT/b$d" tools/device-run.sh build >"$OUT/build$d.txt" 2>&1; echo "$d build rc $?") &
  pids="$pids $!"
done
wait $pids
if [ "${CASES:-1}" != 0 ]; then
  pids=""
  for d in $SNAPS; do  # side by side: most of a case's time is its cold compile
    (n=0; f=0
     for c in .golden/*/; do
       n=$((n + 1))
       MLAJIT_CACHE_DIR=/tmp/c$d "$d/build-gpu/mlajit" run-case "$c" >>"$OUT/cases$d.txt" 2>&1 || f=$((f + 1))
     done
     echo "$d cases $n failed $f") &
    pids="$pids $!"
  done
  wait $pids
fi
print_row='import json, sys
for r in map(json.loads, open(sys.argv[2])):
    print(sys.argv[1], r["model"], "h%d b%d k%d" % (r["h_q"], r["b"], r["topk"]), "gpu", r["gpu_us"],
          "eager", r["eager_us"], "splits", r["splits"], "ratio", r["ratio"], r["check"])'
time_rows() {  # time_rows "SNAPS" "ROWS": every row with every snapshot, PASSES times
  local snaps=$1 rows=$2 row pass d order
  for row in $rows; do
    bench_row_args "$row"
    for pass in $(seq "${PASSES:-1}"); do
      order=$snaps
      [ $((pass % 2)) = 0 ] && order=$(printf '%s\n' $snaps | tac | tr '\n' ' ')
      for d in $order; do
        # from its JSON line: the table prints gpu_us to 0.1 us, a percent of the short rows
        rm -f "$OUT/row.jsonl"
        MLAJIT_CACHE_DIR=/tmp/c$d "$d/build-gpu/mlajit" bench "${row_args[@]}" --json "$OUT/row.jsonl" >>"$OUT/bench$d.txt" 2>&1
        [ -s "$OUT/row.jsonl" ] && python3 -c "$print_row" "$d p$pass" "$OUT/row.jsonl"
      done
    done
  done
}
print_layout_row='import json, sys
for r in map(json.loads, open(sys.argv[2])):
    if r["role"] == "layout":
        print(sys.argv[1], r["layout"], "h%d b%d k%d" % (r["h_q"], r["b"], r["topk"]), "gpu", r["gpu_us"],
              "eager", r["eager_us"], "splits", r["splits"], "ratio", (r["v32"] or {}).get("fraction_ratio"), r["check"],
              r["kernel"])'
time_layout_rows() {  # LAYOUT_ROWS "LAYOUT:H:B ...": `bench --layouts` rows (topk 2048), as time_rows
  local row pass d order l h b
  for row in $LAYOUT_ROWS; do
    IFS=: read -r l h b <<<"$row"
    for pass in $(seq "${PASSES:-1}"); do
      order=$SNAPS
      [ $((pass % 2)) = 0 ] && order=$(printf '%s\n' $SNAPS | tac | tr '\n' ' ')
      for d in $order; do
        rm -f "$OUT/row.jsonl"
        MLAJIT_CACHE_DIR=/tmp/c$d "$d/build-gpu/mlajit" bench --layouts --layout "$l" --heads "$h" --batch "$b" \
          --json "$OUT/row.jsonl" >>"$OUT/bench$d.txt" 2>&1
        [ -s "$OUT/row.jsonl" ] && python3 -c "$print_layout_row" "$d p$pass" "$OUT/row.jsonl"
      done
    done
  done
}
if [ -n "${SETS:-}" ]; then
  IFS=';' read -ra sets <<<"$SETS"
  for set in "${sets[@]}"; do time_rows "${set%%|*}" "${set#*|}"; done
elif [ -n "$ROWS" ]; then
  time_rows "$SNAPS" "$ROWS"
fi
[ -n "${LAYOUT_ROWS:-}" ] && time_layout_rows
if [ -n "${NCU:-}" ]; then
  command -v ncu >/dev/null || export PATH="$PATH:/usr/local/cuda/bin"
  for spec in $NCU; do
    IFS=: read -r d h <<<"$spec"
    MLAJIT_CACHE_DIR=/tmp/c$d ncu --clock-control none -k mlajit_decode_main -c 1 --section MemoryWorkloadAnalysis \
      --section SpeedOfLight "$d/build-gpu/mlajit" bench --heads "$h" --batch 128 --topk 2048 2>&1 |
      grep -E "Duration|Hit Rate|Throughput|Mem Busy|Max Bandwidth" | sed "s/^/$d h$h /"
  done
fi
stall_summary() {  # stall_summary SNAP NAME LABEL ARGS...: ncu's stall samples of SNAP's first
  # main-kernel launch in `mlajit ARGS` (tools/ncu-stalls.sh), per role, each line labelled
  local d=$1 name=$2 label=$3
  shift 3
  MLAJIT_CACHE_DIR=/tmp/c$d NCU_KERNEL=mlajit_decode_main tools/ncu-stalls.sh "$d/build-gpu/mlajit" \
    "$OUT/stalls$d-$name" 4 "$@" | grep -vE "^ +0x" | sed "s/^/$d $label /"
}
for spec in ${STALLS:-}; do
  IFS=: read -r d m h b k <<<"$spec"
  stall_summary "$d" "$m-h$h-b$b-k$k" "$m h$h b$b k$k" bench --model "$m" --heads "$h" --batch "$b" --topk "$k"
done
for spec in ${LAYOUT_STALLS:-}; do
  IFS=: read -r d l h b <<<"$spec"
  case_dir=/tmp/stall-case-$l-h$h-b$b
  [ -f "$case_dir/case.json" ] || "$d/build-gpu/mlajit" case make "$l.h$h.p64" --out "$case_dir" --batch "$b" \
    --topk 2048 --seqlen 32768 >"$OUT/case-$l-h$h-b$b.txt" 2>&1 || { echo "$spec: case make failed"; continue; }
  stall_summary "$d" "$l-h$h-b$b" "$l h$h b$b" run-case "$case_dir"
done
first=${SNAPS%% *}
if [ -n "${TESTS:-}" ]; then (cd "$first" && OUT="$OUT/tests" tools/device-run.sh $TESTS 2>&1 | tail -30); fi
