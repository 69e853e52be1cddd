#!/bin/bash
# Where each role's warps wait, per instruction: ncu's source-level stall sampling
# (`--clock-control none`) of one main-kernel launch of one `mlajit bench` row,
# summarized per role with its barrier waits by bench/tools/stall_profile.py.
# The launch is the row's first (a cold L2) unless
#   NCU_SKIP=N      skips N launches and leaves the caches as they are: a later launch
#                   finds the rows in L2, as the timed calls do (the short rows);
#   NCU_SAMPLING=N  sets the warp sampling interval to 2^(5+N) cycles (0-31), for
#                   kernels of a few microseconds;
#   NCU_KERNEL=K    profiles kernel K instead (ncu -k: a name or regex:...), and the
#                   arguments after TOP are then BINARY's whole command line, not
#                   `bench`'s (another program's kernel, as device-run.sh
#                   flashmla-stalls profiles FlashMLA's through a Python script).
# Run from the project root on the GPU host (tools/device-run.sh ncu-source and
# tools/device-compare.sh STALLS= call it).
#   tools/ncu-stalls.sh MLAJIT_BINARY OUT_PREFIX TOP BENCH_ARGS...
# Writes OUT_PREFIX.log (ncu), .csv (the SASS source page) and .txt (the summary);
# prints the kernel's duration under ncu and the summary.
set -u
bin=$1 prefix=$2 top=$3
shift 3
command -v ncu >/dev/null || export PATH="$PATH:/usr/local/cuda/bin"
warm=()
[ "${NCU_SKIP:-0}" -gt 0 ] && warm=(--launch-skip "$NCU_SKIP" --cache-control none)
command=("$bin" bench "$@")
[ -n "${NCU_KERNEL:-}" ] && command=("$bin" "$@")
ncu --clock-control none -k "${NCU_KERNEL:-mlajit_decode_main}" "${warm[@]}" -c 1 \
    ${NCU_SAMPLING:+--warp-sampling-interval "$NCU_SAMPLING"} --section SourceCounters --section WarpStateStats \
    --section SpeedOfLight -f -o "$prefix" "${command[@]}" >"$prefix.log" 2>&1
ncu -i "$prefix.ncu-rep" --page details 2>/dev/null | grep -E "^ +Duration"
ncu -i "$prefix.ncu-rep" --page source --csv --print-source sass >"$prefix.csv" 2>/dev/null
rm -f "$prefix.ncu-rep"
python3 bench/tools/stall_profile.py "$prefix.csv" "$top" >"$prefix.txt" 2>&1
cat "$prefix.txt"
