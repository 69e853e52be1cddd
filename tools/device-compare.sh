#!/bin/bash
# Side by side on the GPU host: build several snapshots of the tree, check each on
# the golden cases, then time the same benchmark rows with each (one device call,
# so the figures compare). Run from the project root with .devdeps, .devtools,
# .golden and the snapshot folders carried:
#   SNAPS=".snap .snap2" ROWS="128:128:2048 16:64:512" tools/device-compare.sh
# A snapshot: mkdir .snapN && git archive HEAD | tar -x -C .snapN, then edit it.
# ROWS are h_q:b:topk filters of `mlajit bench`; NCU="SNAP:H ..." adds ncu's
# SpeedOfLight and memory tables for SNAP at h_q H (b 128, topk 2048);
# STALLS="SNAP:MODEL:H:B:K ..." adds ncu's per-instruction stall samples of SNAP's
# first main-kernel launch on that bench row, summarized per role with its barrier
# waits (bench/tools/stall_profile.py); TESTS="tests" runs tools/device-run.sh's steps
# in the first snapshot afterwards.
set -u
OUT=${OUT:-$PWD/device-out}
mkdir -p "$OUT"
. .devtools/setup.sh >/dev/null 2>&1
SNAPS=${SNAPS:-.snap}
ROWS=${ROWS:-"128:128:2048 64:128:2048 16:128:2048 128:1:2048 16:64:512 128:128:128"}
for d in $SNAPS; do
  (cd "$d" && ln -sfn ../.devdeps .devdeps && ln -sfn ../.devtools .devtools && ln -sfn ../.golden .golden &&
   OUT="$OUT/b$d" tools/device-run.sh build >"$OUT/build$d.txt" 2>&1; echo "$d build rc $?") &
done
wait
for d in $SNAPS; do
  n=0; f=0
  for c in .golden/*/; do
    n=$((n + 1))
    MLAJIT_CACHE_DIR=/tmp/c$d "$d/build-gpu/mlajit" run-case "$c" >>"$OUT/cases$d.txt" 2>&1 || f=$((f + 1))
  done
  echo "$d cases $n failed $f"
done
for d in $SNAPS; do
  for row in $ROWS; do
    IFS=: read -r h b k <<<"$row"
    MLAJIT_CACHE_DIR=/tmp/c$d "$d/build-gpu/mlajit" bench --heads "$h" --batch "$b" --topk "$k" 2>&1 |
      grep -E "^ *(v32|dsv4|glm)" | sed "s/^/$d /"
  done
done
if [ -n "${NCU:-}" ]; then
  command -v ncu >/dev/null || export PATH="$PATH:/usr/local/cuda/bin"
  for spec in $NCU; do
    IFS=: read -r d h <<<"$spec"
    MLAJIT_CACHE_DIR=/tmp/c$d ncu --clock-control none -k mlajit_decode_main -c 1 --section MemoryWorkloadAnalysis \
      --section SpeedOfLight "$d/build-gpu/mlajit" bench --heads "$h" --batch 128 --topk 2048 2>&1 |
      grep -E "Duration|Hit Rate|Throughput|Mem Busy|Max Bandwidth" | sed "s/^/$d h$h /"
  done
fi
if [ -n "${STALLS:-}" ]; then
  for spec in $STALLS; do
    IFS=: read -r d m h b k <<<"$spec"
    MLAJIT_CACHE_DIR=/tmp/c$d tools/ncu-stalls.sh "$d/build-gpu/mlajit" "$OUT/stalls$d-$m-h$h-b$b-k$k" 4 \
      --model "$m" --heads "$h" --batch "$b" --topk "$k" | grep -vE "^ +0x" | sed "s/^/$d $m h$h b$b k$k /"
  done
fi
first=${SNAPS%% *}
if [ -n "${TESTS:-}" ]; then (cd "$first" && OUT="$OUT/tests" tools/device-run.sh $TESTS 2>&1 | tail -30); fi
