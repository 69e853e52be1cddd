#!/bin/bash
# Where each role's warps wait, per instruction: ncu's source-level stall sampling
# (`--clock-control none`) of the first main-kernel launch of one `mlajit bench` row,
# summarized per role with its barrier waits by bench/tools/stall_profile.py.
# Run from the project root on the GPU host (tools/device-run.sh ncu-source and
# tools/device-compare.sh STALLS= call it).
#   tools/ncu-stalls.sh MLAJIT_BINARY OUT_PREFIX TOP BENCH_ARGS...
# Writes OUT_PREFIX.log (ncu), .csv (the SASS source page) and .txt (the summary);
# prints the kernel's duration under ncu and the summary.
set -u
bin=$1 prefix=$2 top=$3
shift 3
command -v ncu >/dev/null || export PATH="$PATH:/usr/local/cuda/bin"
ncu --clock-control none -k mlajit_decode_main -c 1 --section SourceCounters --section WarpStateStats \
    --section SpeedOfLight -f -o "$prefix" "$bin" bench "$@" >"$prefix.log" 2>&1
ncu -i "$prefix.ncu-rep" --page details 2>/dev/null | grep -E "^ +Duration"
ncu -i "$prefix.ncu-rep" --page source --csv --print-source sass >"$prefix.csv" 2>/dev/null
rm -f "$prefix.ncu-rep"
python3 bench/tools/stall_profile.py "$prefix.csv" "$top" >"$prefix.txt" 2>&1
cat "$prefix.txt"
