#!/bin/bash
# Build, test and benchmark on the GPU host in one call (see shared/device/README.md).
# Usage (from the project root, with .devdeps/.devtools/.golden carried):
#   tools/device-run.sh [tests|demo|python-scan|cases|bench|bench-quick|bench-sm90|compile-times|ncu|ncu-sm90|ncu-source|sol|sass|gather|floor|fuzz:S:SEED[:MODEL]|fuzz-bg:S:SEED|suites:A,B|example|base|lookup|python|python-tests|python-install|python-bench|tune-grid|sweep|stability|cases-tuned|fuzz-tuned:S:SEED|fuzz-pack:S:SEED|layouts|layouts-custom|bench-layouts|narrow-bf16|narrow-exact|tune-layouts|staged-exact|flashmla-build|flashmla|flashmla-stalls|all]...
# Logs go to $OUT (or ./device-out) so they come back with the call. The device
# tool returns at most 8 files, so at the end every log is packed into
# $OUT/logs-N.tgz (N: the first free number, so a second run into the same $OUT
# keeps the first run's archive) and only h200*.jsonl and the archives stay beside it.
# Several variants side by side in one call: tools/device-compare.sh.
set -u
OUT=${OUT:-$PWD/device-out}
mkdir -p "$OUT"
. .devtools/setup.sh
. tools/bench-row.sh
export MLAJIT_CACHE_DIR=/tmp/mlajit-cache
export MLAJIT_COMMIT=${MLAJIT_COMMIT:-$(cat .commit 2>/dev/null || echo unknown)}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader | tee "$OUT/gpu.txt"
if [ ! -f build-gpu/build.ninja ]; then
  meson setup build-gpu --buildtype=release -Dgolden_dir="$PWD/.golden" >"$OUT/setup.log" 2>&1 || { tail -30 "$OUT/setup.log"; exit 1; }
fi
meson compile -C build-gpu >"$OUT/build.log" 2>&1 || { grep -E "error|FAILED" "$OUT/build.log" | head -30; exit 1; }
echo "build ok"
# The run-case lines in DIR/runs (a case directory, then its options), eight at a
# time: each prints PASS or FAIL with its replay line into $OUT/NAME.log (sorted),
# their outputs go to $OUT/NAME-runs.log, and a failure sets rc.
run_case_list() {
  local dir=$1 name=$2
  # shellcheck disable=SC2016
  # (each run bounded: a kernel that never ends fails its run, not the call)
  xargs -P 8 -L 1 bash -c 'd=$0; if timeout 120 ./build-gpu/mlajit run-case "$@" "$d" >"$d.$(echo "$*" | tr -c "a-z0-9" _).log" 2>&1
    then echo "PASS $d $*"; else echo "FAIL $d $* (mlajit run-case $* $d)"; fi' <"$dir/runs" >"$OUT/$name.log"
  sort "$OUT/$name.log" -o "$OUT/$name.log"
  tail -n +1 "$dir"/*.log >"$OUT/$name-runs.log" 2>/dev/null
  grep "^FAIL" "$OUT/$name.log" && rc=1
  echo "$name: $(grep -c "^PASS" "$OUT/$name.log") of $(wc -l <"$dir/runs") runs passed"
}
# The flashmla steps: FlashMLA's build (flashmla-build, in the background) done, and
# both Python packages on the path.
flashmla_env() {
  [ -n "${flashmla_pid:-}" ] && { wait "$flashmla_pid" || echo "flashmla: build failed"; tail -3 "$OUT/flashmla-build.log"; }
  flashmla_pid=
  export MLAJIT_LIBRARY=$PWD/build-gpu/libmlajit.so PYTHONPATH=$PWD/python:$PWD/bench:/tmp/flashmla
  command -v ncu >/dev/null || export PATH="$PATH:/usr/local/cuda/bin"
}
rc=0
background=()
for step in "${@:-all}"; do
  case $step in
    tests|all)
      meson test -C build-gpu --print-errorlogs --num-processes 4 >"$OUT/tests.log" 2>&1 || rc=1
      grep -E "^ *[0-9]+/[0-9]+ |^Ok|^Fail|Synthesis" "$OUT/tests.log"
      cp build-gpu/meson-logs/testlog.txt "$OUT/testlog.txt" 2>/dev/null ;;&
    demo|all)
      rm -rf /tmp/mlajit-demo-cache
      for i in 1 2; do MLAJIT_CACHE_DIR=/tmp/mlajit-demo-cache ./build-gpu/mlajit demo || rc=1; done 2>&1 | tee "$OUT/demo.log"
      ./build-gpu/embed_example 2>&1 | tee -a "$OUT/demo.log" ;;&
    cases|all)
      for d in .golden/*/; do ./build-gpu/mlajit run-case "$d" || rc=1; done >"$OUT/cases.log" 2>&1
      grep -E "^case|mlajit vs" "$OUT/cases.log" ;;&
    cases-tuned)
      # the golden cases on the cache tune-grid tuned (tactics on)
      for d in .golden/*/; do MLAJIT_CACHE_DIR=/tmp/mlajit-tuned ./build-gpu/mlajit run-case "$d" || rc=1; done \
        >"$OUT/cases-tuned.log" 2>&1
      grep -E "^case|mlajit vs" "$OUT/cases-tuned.log" ;;
    bench|all)
      ./build-gpu/mlajit bench --json "$OUT/h200.jsonl" 2>&1 | tee "$OUT/bench.log" || rc=1 ;;
    suites:*)
      # suites:A,B,...: those meson suites alone (the python suites run pytest under
      # the host's python3, GPU tests included, where it has torch and pytest)
      suites=${step#suites:}
      meson test -C build-gpu --print-errorlogs --num-processes 4 ${suites//,/ } >"$OUT/suites.log" 2>&1 || rc=1
      grep -E "^ *[0-9]+/[0-9]+ |^Ok|^Fail" "$OUT/suites.log"
      cp build-gpu/meson-logs/testlog.txt "$OUT/testlog-suites.txt" 2>/dev/null
      grep -h -E "^(FAILED|SKIPPED|[0-9]+ (passed|failed))|passed|failed" "$OUT/testlog-suites.txt" | grep -v "^command" | tail -12 ;;
    example)
      # examples/engine_decode.py's decode loop (against build-gpu's library)
      MLAJIT_LIBRARY=$PWD/build-gpu/libmlajit.so PYTHONPATH=$PWD/python timeout 240 python3 examples/engine_decode.py \
        --steps 10 2>&1 | tee "$OUT/engine-decode.log" || rc=1 ;;
    fuzz-bg:*|fuzz-tuned:*|fuzz-pack:*)
      # fuzz-bg:SECONDS:SEED: the fuzzer beside the steps after it (its own cache),
      # waited for before the logs are packed; fuzz-tuned: the same on the cache
      # tune-grid tuned (issue 47's stability run with tactics on); fuzz-pack: the
      # tuned grid's specs with the tactics of TUNED_PACK (a carried pack)
      IFS=: read -r _ secs seed <<<"$step"
      fuzz_cache=/tmp/mlajit-fuzz-cache; [ "${step%%:*}" = fuzz-tuned ] && fuzz_cache=/tmp/mlajit-tuned
      fuzz_env=(); fuzz_args=()
      if [ "${step%%:*}" = fuzz-pack ]; then
        fuzz_env=(MLAJIT_PACKS="$(realpath "${TUNED_PACK:-/tmp/mlajit-tuned.pack}")"); fuzz_args=(--tuned-grid)
      fi
      (env "${fuzz_env[@]}" MLAJIT_CACHE_DIR=$fuzz_cache ./build-gpu/mlajit fuzz "${fuzz_args[@]}" --seconds "$secs" \
         --seed "$seed" --out "$OUT/fuzz-failures" >"$OUT/fuzz-$seed.log" 2>&1; echo "fuzz rc=$?" >>"$OUT/fuzz-$seed.log") &
      background+=($!) ;;
    base)
      # an older tree for before/after figures: .base holds `git archive` of it
      # (carried); it is built beside build-gpu in the background, and the
      # lookup step waits for it
      if [ -f .base/meson.build ]; then
        (meson setup .base/build-gpu .base --buildtype=release >"$OUT/base-build.log" 2>&1 &&
           meson compile -C .base/build-gpu ./mlajit:executable >>"$OUT/base-build.log" 2>&1
         echo "base build rc=$?" >>"$OUT/base-build.log") &
        base_pid=$!
      else
        echo "base: no .base tree (git archive COMMIT | tar -x -C .base)"
      fi ;;
    lookup)
      # the pack path's figures (issue 45): a fresh process's pack open, lookup,
      # load and first launch, and the in-process repeat lookup, five processes
      # each, for build-gpu and the base build when there is one; then the cost
      # of generating and keying the source on a miss (the first spec of a process
      # and three more, on an empty cache)
      spec=v32.h16.p64.t64.hc16.sm90-narrow.sm_90a
      [ -n "${base_pid:-}" ] && wait "$base_pid"
[ -n "${flashmla_pid:-}" ] && { wait "$flashmla_pid" || echo "flashmla: build failed"; tail -2 "$OUT/flashmla-build.log"; }
      for b in build-gpu .base/build-gpu; do
        [ -x "$b/mlajit" ] || continue
        d=/tmp/mlajit-lookup-${b%%/*}; rm -rf "$d"; mkdir -p "$d"
        MLAJIT_CACHE_DIR=$d/c "$b/mlajit" pack build --spec $spec --out "$d/p.pack" --no-cache >"$OUT/lookup-${b%%/*}.log" 2>&1
        for i in 1 2 3 4 5; do MLAJIT_CACHE_DIR=$d/c "$b/mlajit" pack bench "$d/p.pack" --repeat 1000000; done \
          >>"$OUT/lookup-${b%%/*}.log" 2>&1
        echo "== $b"; grep -E "^(pack open|lookup|load|first launch|repeat lookup)" "$OUT/lookup-${b%%/*}.log"
      done
      rm -rf /tmp/mlajit-gen; mkdir -p /tmp/mlajit-gen
      for h in 8 16 64 128; do
        MLAJIT_CACHE_DIR=/tmp/mlajit-gen ./build-gpu/mlajit compile --model v32 --heads $h --page 64 --arch sm_90a |
          grep -E "^(spec|cache)"
      done 2>&1 | tee "$OUT/generate-cost.log" ;;
    fuzz:*)
      # fuzz:SECONDS:SEED[:MODEL] (MODEL: every call on it, mlajit fuzz --model)
      IFS=: read -r _ secs seed model <<<"$step"
      ./build-gpu/mlajit fuzz --seconds "$secs" --seed "$seed" ${model:+--model "$model"} --out "$OUT/fuzz-failures" \
        >"$OUT/fuzz-$seed${model:+-$model}.log" 2>&1 || rc=1
      tail -15 "$OUT/fuzz-$seed${model:+-$model}.log" ;;
    compile-times)
      # cold compile, then a cache hit in a fresh process (open, look up, load)
      rm -rf /tmp/mlajit-ct
      for i in 1 2; do /usr/bin/time -f "process wall %e s" env MLAJIT_CACHE_DIR=/tmp/mlajit-ct ./build-gpu/mlajit compile --model v32 --heads 128 --page 64; done 2>&1 | tee "$OUT/compile-times.log" ;;
    ncu|ncu-sm90)
      # where the kernel's time goes (h_q 16 and 128, b 128, topk 2048); ncu-sm90: the wgmma family
      command -v ncu >/dev/null || export PATH="$PATH:/usr/local/cuda/bin"
      variant=auto; [ "$step" = ncu-sm90 ] && variant=sm90
      for h in 16 128; do
        ncu --clock-control none -k mlajit_decode_main -c 1 --section SpeedOfLight --section WarpStateStats \
            --section MemoryWorkloadAnalysis --section Occupancy --section LaunchStats --section ComputeWorkloadAnalysis \
            --section InstructionStats --section SchedulerStats \
            --metrics "regex:smsp__warp_issue_stalled_.*_per_warp_active.pct" \
            ./build-gpu/mlajit bench --heads $h --batch 128 --topk 2048 --variant $variant >"$OUT/ncu-$variant-h$h.txt" 2>&1 || true
        grep -E "Duration|DRAM Through|Registers Per|Issued Instructions  |Issued Ipc|Achieved Occ|stalled.*pct +[0-9]" "$OUT/ncu-$variant-h$h.txt" |
          awk '$NF+0 >= 1 || !/stalled/' | sed "s/^/$variant h$h /"
      done ;;
    ncu-source)
      # where each role's warps wait, per instruction (h_q 64 and 128, b 128, topk 2048)
      for h in 64 128; do
        tools/ncu-stalls.sh ./build-gpu/mlajit "$OUT/stalls-h$h" 8 --heads $h --batch 128 --topk 2048 | head -40
      done ;;
    sol)
      # each unit's share of its peak (ncu speed of light, `--clock-control none`) in one
      # main-kernel launch per row of SOL_ROWS ([model:]h_q:b:topk, tools/bench-row.sh):
      # the 21st of the row, the caches left as the calls before it leave them
      command -v ncu >/dev/null || export PATH="$PATH:/usr/local/cuda/bin"
      for row in ${SOL_ROWS:-v32:8:128:2048 v32:16:128:2048 v32:32:128:2048 v32:8:64:128 v32:64:128:2048 v32:128:128:2048 v32:128:128:128 dsv4:128:64:}; do
        bench_row_args "$row"
        log="$OUT/sol-${row//:/-}.txt"
        ncu --clock-control none -k mlajit_decode_main --launch-skip 20 --cache-control none -c 1 \
            --section SpeedOfLight --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis \
            --metrics "regex:sm__pipe_tensor_op_.*_cycles_active.avg.pct_of_peak_sustained_active" \
            ./build-gpu/mlajit bench "${row_args[@]}" >"$log" 2>&1
        grep -E "^ +(Duration|DRAM Throughput|L1/TEX Cache Throughput|L2 Cache Throughput|Compute \(SM\) Throughput|Executed Ipc Active|Issue Slots Busy|Mem Pipes Busy|sm__pipe_tensor)" "$log" |
          awk -v r="$row" '{$1=$1; print r, $0}'
      done ;;
    sass)
      # SASS of the h_q 16 and 128 kernels (nvcc on the generated source; NVRTC's is alike)
      command -v cuobjdump >/dev/null || export PATH="$PATH:/usr/local/cuda/bin"
      for h in 16 128; do
        ./build-gpu/mlajit compile --model v32 --heads $h --page 64 --emit-source >build-gpu/h$h.cu 2>/dev/null &&
          nvcc -cubin -arch=sm_90a -O3 -o build-gpu/h$h.cubin build-gpu/h$h.cu 2>/dev/null &&
          cuobjdump -sass build-gpu/h$h.cubin >"$OUT/sass-h$h.txt" 2>&1
      done
      wc -l "$OUT"/sass-h*.txt ;;
    floor|gather)
      # the standalone bench tools: floor, the latency floor under the short rows
      # (bench/tools/latency_floor.cu); gather, the random-gather ceiling of the
      # memory-bound rows (bench/tools/gather_ceiling.cu)
      tool=latency_floor; [ "$step" = gather ] && tool=gather_ceiling
      nvcc -O3 -gencode arch=compute_90a,code=sm_90a -o "build-gpu/$tool" "bench/tools/$tool.cu" >"$OUT/$step.log" 2>&1 &&
        "./build-gpu/$tool" 2>&1 | tee -a "$OUT/$step.log" || rc=1 ;;
    python|python-tests|python-install|python-bench)
      # The Python package from the source tree against build-gpu's library, under the
      # host's python3 (its environment has torch and pytest); `pip install .` goes into a venv
      # python-tests: the pytest suites (GPU tests included), the example, and
      # `pip install .` into the venv; python-install: the example and `pip install .`
      # alone (the meson suites run pytest already); python-bench: bench/python_bench.py (the
      # entry points beside `mlajit bench`, and the example's warm-up times).
      venv=/tmp/mlajit-venv
      [ -x $venv/bin/python ] || python3 -m venv --system-site-packages $venv >"$OUT/python-setup.log" 2>&1
      $venv/bin/python -c 'import pytest' 2>/dev/null ||
        $venv/bin/pip install -q --no-index --find-links .devdeps/wheels pytest >>"$OUT/python-setup.log" 2>&1 ||
        echo "python: pytest not installed (.devdeps/wheels missing? tools/fetch-wheels.sh)"
      export MLAJIT_LIBRARY=$PWD/build-gpu/libmlajit.so PYTHONPATH=$PWD/python MLAJIT_GOLDEN_DIR=$PWD/.golden \
        MLAJIT_ABI_LAYOUT=$PWD/build-gpu/tests/abi_layout MLAJIT_CLI=$PWD/build-gpu/mlajit
      if [ "$step" = python ] || [ "$step" = python-tests ]; then
        python3 -m pytest -q -rs -p no:cacheprovider -m "not fake_driver" python/tests \
          >"$OUT/python-tests.log" 2>&1 || rc=1
        grep -E "passed|failed|SKIPPED|FAILED|Error" "$OUT/python-tests.log" | tail -30
      fi
      if [ "$step" != python-bench ]; then
        timeout 180 python3 examples/engine_decode.py --steps 10 2>&1 | tee "$OUT/engine-decode.log" || rc=1
        (timeout 300 $venv/bin/pip install -q --no-index --find-links .devdeps/wheels . &&
          cd /tmp && env -u MLAJIT_LIBRARY -u PYTHONPATH $venv/bin/python -c \
            'import mlajit; print("pip install .: ok,", mlajit.library_path(), mlajit.supported("v32", 16, 64, 2048))') \
          >"$OUT/pip-install.log" 2>&1 || { rc=1; echo "pip install .: failed"; }
        tail -1 "$OUT/pip-install.log"
      fi
      if [ "$step" = python ] || [ "$step" = python-bench ]; then
        # PY_BENCH_ARGS: e.g. --heads 16 --no-warmup-times, to split the bench over calls
        # the host's python3 (torch lives in its environment; a venv made from it
        # does not see that environment's packages)
        python3 bench/python_bench.py --cli build-gpu/mlajit --json "$OUT/h200-python${PY_BENCH_TAG:-}.jsonl" \
          ${PY_BENCH_ARGS:-} 2>&1 | tee "$OUT/python-bench${PY_BENCH_TAG:-}.log" || rc=1
      fi ;;
    python-scan)
      # issue 46's last row: h128 b8 topk 2048's decoder at 6 places in device memory
      # beside `mlajit bench`'s figure, and the host floors of the entry points
      export MLAJIT_LIBRARY=$PWD/build-gpu/libmlajit.so PYTHONPATH=$PWD/python
      timeout 240 python3 bench/python_bench.py --cli build-gpu/mlajit --placement-scan 128,8,1,2048 \
        --json "$OUT/h200-placement.jsonl" 2>&1 | grep -vE "^ *$" | tail -14 || rc=1
      timeout 60 python3 bench/python_bench.py --floors --json "$OUT/h200-floors.jsonl" 2>&1 | tail -4 || rc=1 ;;
    tune-grid)
      # issue 47's production grid tuned into /tmp/mlajit-tuned (the sweep's cache), within
      # TUNE_SECONDS (default 540: a call's limit is 600 s)
      MLAJIT_CACHE_DIR=/tmp/mlajit-tuned ./build-gpu/mlajit tune --seconds "${TUNE_SECONDS:-540}" \
        --json "$OUT/tune-h200.jsonl" >"$OUT/tune.log" 2>"$OUT/tune-progress.log" || rc=1
      cat "$OUT/tune.log"; grep -E "acquir|kernels in" "$OUT/tune-progress.log"
      # its tactics and their kernels as a pack, for the stability step (and back in the logs)
      MLAJIT_CACHE_DIR=/tmp/mlajit-tuned ./build-gpu/mlajit pack build --models v32 --heads 16 --pages 64 \
        --tactics-from /tmp/mlajit-tuned --out /tmp/mlajit-tuned.pack 2>&1 | tail -1
      cp /tmp/mlajit-tuned.pack "$OUT/tuned.pack" 2>/dev/null ;;
    stability)
      # issue 47's stability run with tuned tactics on, from the pack tune-grid made
      # (TUNED_PACK: a carried one): the golden cases, the GPU suite, and the fuzzer
      # beside the suite for FUZZ_SECONDS (default 480) with FUZZ_SEED (default 4747)
      pack=$(realpath "${TUNED_PACK:-/tmp/mlajit-tuned.pack}" 2>/dev/null)
      if [ ! -f "$pack" ]; then echo "stability: no tuned pack: run tune-grid first, or set TUNED_PACK"; rc=1; continue; fi
      (MLAJIT_PACKS=$pack MLAJIT_CACHE_DIR=/tmp/mlajit-stability-fuzz ./build-gpu/mlajit fuzz \
         --tuned-grid --seconds "${FUZZ_SECONDS:-480}" --seed "${FUZZ_SEED:-4747}" --out "$OUT/fuzz-failures" \
         >"$OUT/fuzz-stability.log" 2>&1; echo "fuzz rc=$?" >>"$OUT/fuzz-stability.log") &
      background+=($!)
      for d in .golden/*/; do MLAJIT_PACKS=$pack MLAJIT_CACHE_DIR=/tmp/mlajit-stability ./build-gpu/mlajit run-case "$d" || rc=1; done \
        >"$OUT/cases-stability.log" 2>&1
      grep -E "^case|mlajit vs" "$OUT/cases-stability.log"
      MLAJIT_PACKS=$pack meson test -C build-gpu --print-errorlogs --num-processes 4 gpu >"$OUT/suite-stability.log" 2>&1 || rc=1
      grep -E "^ *[0-9]+/[0-9]+ |^Ok|^Fail" "$OUT/suite-stability.log" ;;
    layouts|layouts-custom)
      # issue 49's layouts against the fp64 reference: a synthetic case per layout x
      # heads (1 7 16 33 64 128), its page (1 64 256) and ragged topk (100 600 2048)
      # rotating, without and with the extra cache and every feature (10% invalid
      # indices); each run by auto and every family that serves the layout, auto
      # also with forced splits (the combine at the layout's d_v), lse head-major and
      # padded strides. `layouts`: GLM53_NOPE and GLM_NSA (the layouts edition too, for
      # the exact dequantization's converted form; sm90-staged forced too) and DOTS3_SWA
      # (sm90-narrow forced too, in head groups of 16 past 16 heads; portable also at
      # tile 32 and 16 heads per CTA), then the five of `layouts-custom`: bf16 V3.2 and V4
      # and the three custom layouts the fuzzer draws (d_nope 256 with tile 32 and
      # ue8m0 scales inline; no RoPE with arbitrary fp32 scales in a page footer;
      # d_v 256), which the portable family alone serves (auto's kernel on sm_90a),
      # bf16 by sm90 (auto's there) and sm90-narrow (forced, in head groups of 32 past
      # 32 heads) too; the other wgmma families' refusals are logged in
      # layouts-refusals.log. To fit about
      # 200 s beside the first two, their portable run at tile 32 and 16 heads per
      # CTA is on the cases without the extra cache only. Eight runs at a time; each
      # prints PASS or FAIL with its replay line
      lay=/tmp/mlajit-layouts; rm -rf "$lay"; mkdir -p "$lay"
      pages=(1 64 256); topks=(100 600 2048); i=0; : >"$lay/runs"; : >"$OUT/layouts-refusals.log"
      # label|spec's first field|the families that serve it (the five: auto, which is the portable
      # kernel on sm_90a)|portable tile 32 on every case (all) or on those without the extra cache (plain)
      entries=(
        "glm53_nope|glm53_nope|auto sm90 sm90-staged portable|all"
        "glm_nsa|glm_nsa|auto sm90 sm90-staged portable|all"
        "dots3_swa|dots3_swa|auto sm90-split sm90-narrow portable|all"
        "v32_bf16|v32_bf16|auto sm90 sm90-narrow portable|plain"
        "dsv4_bf16|dsv4_bf16|auto sm90 sm90-narrow portable|plain"
        "nope256_ue8m0_inline|d_nope=256,d_rope=64,d_v=256,tile=32,scales=ue8m0,place=inline|auto|plain"
        "rope0_fp32_footer|d_nope=512,tile=128,scales=fp32,place=footer|auto|plain"
        "dv256|d_nope=512,d_rope=64,d_v=256,tile=128,scales=pow2,place=inline|auto|plain"
      )
      [ "$step" = layouts-custom ] && entries=("${entries[@]:3}")
      for entry in "${entries[@]}"; do
        IFS='|' read -r label spec variants tile32 <<<"$entry"
        # LAYOUTS_ONLY="label ...": those entries alone (a short call)
        [ -n "${LAYOUTS_ONLY:-}" ] && [[ " $LAYOUTS_ONLY " != *" $label "* ]] && continue
        # the five: the wgmma families refuse them (the envelope's reason logged); one
        # that accepts would need its own runs here
        for f in sm90 sm90-staged sm90-narrow; do
          [ "$tile32" = plain ] || break
          case " $variants " in *" $f "*) continue ;; esac  # it serves the layout, and runs below
          if ./build-gpu/mlajit envelope "$spec.h16.p64.t64.hc$([ $f = sm90-narrow ] && echo 16 || echo 64).$f.sm_90a" \
            >>"$OUT/layouts-refusals.log" 2>&1; then echo "FAIL $label: $f serves it; add its runs"; rc=1; fi
        done
        for h in 1 7 16 33 64 128; do
          for extra in "" .e64.fslx; do
            page=${pages[i % 3]} topk=${topks[i % 3]}; i=$((i + 1))
            dir=$lay/$label.h$h.p$page$extra.k$topk
            ./build-gpu/mlajit case make "$spec.h$h.p$page$extra" --out "$dir" --batch 2 --s-q $((1 + i % 2)) \
              --topk $topk ${extra:+--extra-topk 64} --invalid 0.1 --seed $i >/dev/null 2>&1 ||
              { echo "FAIL case make $dir"; rc=1; }
            # sm90-narrow past the most heads its CTA holds (32; 16 at DOTS3_SWA's d_v
            # 1024) in head groups of that many
            nmax=32; [ "$label" = dots3_swa ] && nmax=16
            for v in $variants; do
              echo "$dir --variant $v$([ $v = sm90-narrow ] && [ $h -gt $nmax ] && echo " --heads-per-cta $nmax")"
            done >>"$lay/runs"
            echo "$dir --variant auto --splits 5 --lse-head-major --pad-strides" >>"$lay/runs"
            [ "$tile32" = all ] || [ -z "$extra" ] &&
              echo "$dir --variant portable --tile 32 --heads-per-cta 16" >>"$lay/runs"
          done
        done
      done
      run_case_list "$lay" layouts ;;
    narrow-exact)
      # sm90-narrow(-long) with arbitrary fp32 scales (GLM_NSA,
      # GLM53_NOPE) against the fp64 reference, as `layouts` runs its cases: a synthetic
      # case per model x heads (1 7 16 24 32 48 64), its page (1 64 256) and ragged topk
      # (100 600 2048) rotating, without and with the extra cache and every feature (10%
      # invalid indices). Each case by auto (sm90-narrow at <= 32 heads, sm90 past 32),
      # auto with 5 forced splits, lse head-major and padded strides, and forced
      # sm90-narrow: at <= 32 heads whole, with 3 splits, and sm90-narrow-long (its third
      # producer group where it fits: GLM_NSA 1-16 heads, GLM53_NOPE 1-24; sm90-narrow
      # elsewhere); at 32 heads also the head split (16 per CTA); past 32 in head
      # groups of 16 and 32 and sm90-narrow-long at 16. First the envelope's choices
      # (auto's kernel at 16 and 48 heads; the third group), then the runs, eight at a
      # time, then the speed rows: GLM53_NOPE and GLM_NSA beside V3.2 at 16 heads
      # (b 64/128, topk 2048) by auto and with sm90 forced (the kernel auto ran before),
      # each row checked against the fp64 reference. About 120 s.
      nx=/tmp/mlajit-narrow-exact; rm -rf "$nx"; mkdir -p "$nx"
      pages=(1 64 256); topks=(100 600 2048); i=0; : >"$nx/runs"; : >"$OUT/narrow-exact.log"
      for want in "glm_nsa.h16.p64|hc16.sm90-narrow.sm_90a" "glm53_nope.h16.p64|hc16.sm90-narrow.sm_90a" \
        "glm_nsa.h48.p64|hc64.sm90.sm_90a" "glm53_nope.h32.p64|hc32.sm90-narrow.sm_90a" \
        "glm53_nope.h24.p64.sm90-narrow-long|hc24.sm90-narrow-long.sm_90a" \
        "glm_nsa.h16.p64.sm90-narrow-long|hc16.sm90-narrow-long.sm_90a"; do
        IFS='|' read -r spec kernel <<<"$want"
        if ./build-gpu/mlajit envelope "$spec" --batch 64 --topk 2048 | grep -q "accepted: .*\.$kernel"; then
          echo "PASS envelope $spec: $kernel"; else echo "FAIL envelope $spec: want $kernel"; rc=1; fi
      done | tee "$OUT/narrow-exact-envelope.log"
      for model in glm_nsa glm53_nope; do
        for h in 1 7 16 24 32 48 64; do
          for extra in "" .e64.fslx; do
            page=${pages[i % 3]} topk=${topks[i % 3]}; i=$((i + 1))
            dir=$nx/$model.h$h.p$page$extra.k$topk
            ./build-gpu/mlajit case make "$model.h$h.p$page$extra" --out "$dir" --batch 2 --s-q $((1 + i % 2)) \
              --topk $topk ${extra:+--extra-topk 64} --invalid 0.1 --seed $i >/dev/null 2>&1 ||
              { echo "FAIL case make $dir"; rc=1; }
            {
              echo "$dir --variant auto"
              echo "$dir --variant auto --splits 5 --lse-head-major --pad-strides"
              if [ $h -le 32 ]; then
                echo "$dir --variant sm90-narrow"
                echo "$dir --variant sm90-narrow --splits 3"
                echo "$dir --variant sm90-narrow-long"
                [ $h -eq 32 ] && echo "$dir --variant sm90-narrow --heads-per-cta 16"
              else
                echo "$dir --variant sm90-narrow --heads-per-cta 16"
                echo "$dir --variant sm90-narrow --heads-per-cta 32 --splits 2"
                echo "$dir --variant sm90-narrow-long --heads-per-cta 16"
              fi
            } >>"$nx/runs"
          done
        done
      done
      run_case_list "$nx" narrow-exact
      for v in auto sm90; do
        ./build-gpu/mlajit bench --layouts --layout glm53_nope --layout glm_nsa --heads 16 --variant $v \
          --json "$OUT/h200-narrow-exact-$v.jsonl" 2>&1 | tee "$OUT/bench-narrow-exact-$v.log" || rc=1
      done ;;
    sweep)
      # issue 47's record: BENCH.md's 63 rows and 40 shapes off the grid (seed 47), each
      # bucket tuned into /tmp/mlajit-tuned, then every candidate, the rules and the tuned
      # plan timed per shape: $OUT/tactics-h200.jsonl (SWEEP_SECONDS bounds it, default 540)
      { ./build-gpu/mlajit bench --shapes; ./build-gpu/mlajit tune --draw-shapes 40 --seed 47; } >"$OUT/sweep-shapes.txt"
      MLAJIT_CACHE_DIR=/tmp/mlajit-tuned ./build-gpu/mlajit tune --sweep "$OUT/sweep-shapes.txt" \
        --seconds "${SWEEP_SECONDS:-540}" --json "$OUT/tactics-h200.jsonl" >"$OUT/sweep.log" 2>"$OUT/sweep-progress.log" || rc=1
      cat "$OUT/sweep.log"; grep -E "^sweep: .*pick error \+([3-9]|[1-9][0-9])" "$OUT/sweep-progress.log" | head -20 ;;
    bench-quick)
      ./build-gpu/mlajit bench --quick --json "$OUT/h200.jsonl" 2>&1 | tee "$OUT/bench.log" || rc=1 ;;
    bench-layouts)
      # issue 49's speed rows: glm53_nope and dots3_swa beside V3.2 at heads 16/64/128,
      # b 64/128, topk 2048, each checked against the fp64 reference (its own JSON);
      # BENCH_LAYOUTS_ARGS: other layouts or axes (e.g. --layout v32_bf16 --heads 64)
      ./build-gpu/mlajit bench --layouts ${BENCH_LAYOUTS_ARGS:-} --json "$OUT/h200-layouts${BENCH_LAYOUTS_TAG:-}.jsonl" 2>&1 |
        tee "$OUT/bench-layouts${BENCH_LAYOUTS_TAG:-}.log" || rc=1 ;;
    staged-exact)
      # sm90-staged with arbitrary fp32 scales, without RoPE (GLM53_NOPE) and with it
      # (GLM_NSA) against the fp64 reference: a synthetic case per model x heads (33 48
      # 64 96 128; one CTA per row and the CTA pair), its page (1 64 256) and ragged
      # topk (100 600 2048) rotating, without and with the extra cache and every
      # feature, each by sm90-staged whole and with lse head-major and padded strides,
      # and by auto; then the speed rows at 64 and 128 heads (b 64/128, topk 2048) by
      # auto (sm90-staged where the plan takes it) and with sm90 forced. About 150 s.
      sx=/tmp/mlajit-staged-exact; rm -rf "$sx"; mkdir -p "$sx"
      pages=(1 64 256); topks=(100 600 2048); i=0; : >"$sx/runs"
      for model in glm53_nope glm_nsa; do
        for h in 33 48 64 96 128; do
          for extra in "" .e64.fslx; do
            page=${pages[i % 3]} topk=${topks[i % 3]}; i=$((i + 1))
            dir=$sx/$model.h$h.p$page$extra.k$topk
            ./build-gpu/mlajit case make "$model.h$h.p$page$extra" --out "$dir" --batch 2 --s-q $((1 + i % 2)) \
              --topk $topk ${extra:+--extra-topk 64} --invalid 0.1 --seed $((700 + i)) >/dev/null 2>&1 ||
              { echo "FAIL case make $dir"; rc=1; }
            { echo "$dir --variant sm90-staged"; echo "$dir --variant sm90-staged --lse-head-major --pad-strides"
              echo "$dir --variant auto"; } >>"$sx/runs"
          done
        done
      done
      run_case_list "$sx" staged-exact
      for v in auto sm90; do
        for h in 64 128; do
          ./build-gpu/mlajit bench --layouts --layout glm53_nope --layout glm_nsa --heads $h --variant $v \
            --json "$OUT/h200-staged-exact-$v-h$h.jsonl" 2>&1 | tee "$OUT/bench-staged-exact-$v-h$h.log" || rc=1
        done
      done ;;
    flashmla-build)
      # issue 48: DeepSeek's FlashMLA from .flashmla/flashmla.tgz (carried; 2.8 MB: its
      # source at 9241ae3 as flashmla/, CUTLASS 147f567's include and tools/util/include
      # under flashmla/csrc/cutlass/, setup.py's `git submodule` line removed), built in
      # the background into /tmp/flashmla (about 5 minutes of the host's cores); the
      # flashmla steps wait for it
      fm=/tmp/flashmla
      if ! ls $fm/flash_mla/cuda*.so >/dev/null 2>&1; then
        rm -rf $fm; tar xzf .flashmla/flashmla.tgz -C /tmp
        (cd $fm && FLASH_MLA_DISABLE_SM100=1 CPLUS_INCLUDE_PATH=/usr/local/cuda/include/cccl MAX_JOBS=16 NVCC_THREADS=2 \
          timeout 540 python3 setup.py build_ext --inplace) >"$OUT/flashmla-build.log" 2>&1 &
        flashmla_pid=$!
      fi ;;
    flashmla)
      # FlashMLA beside mlajit on this card (bench/flashmla_side_by_side.py; FLASHMLA_ROWS
      # B:TOPK,..., FLASHMLA_HEADS), then ncu's speed of light and warp states of one
      # main-kernel launch of each on FLASHMLA_NCU_ROWS (H:B:TOPK ...)
      flashmla_env
      python3 bench/flashmla_side_by_side.py --heads "${FLASHMLA_HEADS:-64,128}" ${FLASHMLA_ROWS:+--rows $FLASHMLA_ROWS} \
        --json "$OUT/h200-flashmla.jsonl" 2>&1 | tee "$OUT/flashmla.log" || rc=1
      for row in ${FLASHMLA_NCU_ROWS:-128:128:2048 128:128:128}; do
        IFS=: read -r h b k <<<"$row"
        for e in flashmla mlajit; do
          kname=mlajit_decode_main; [ $e = flashmla ] && kname=regex:flash_fwd_splitkv_mla_fp8_sparse
          log="$OUT/ncu-$e-h$h-b$b-k$k.txt"
          timeout 240 ncu --clock-control none -k "$kname" --launch-skip 4 -c 1 --section SpeedOfLight \
            --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis --section WarpStateStats \
            --section LaunchStats --section Occupancy \
            --metrics "regex:sm__pipe_tensor_op_.*_cycles_active.avg.pct_of_peak_sustained_active,smsp__inst_executed.sum,l1tex__data_pipe_lsu_wavefronts_mem_shared.sum,smsp__cycles_active.avg,regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio" \
            python3 bench/flashmla_side_by_side.py --heads "$h" --rows "$b:$k" --only $e >"$log" 2>&1
          grep -E "^ +(Duration|Compute \(SM\) Throughput|Executed Ipc Active|Issue Slots Busy|Mem Pipes Busy|L1/TEX Cache Throughput|DRAM Throughput|Registers Per Thread|Grid Size|sm__pipe_tensor|smsp__inst_executed.sum|l1tex__data_pipe|smsp__cycles_active)" "$log" |
            awk -v r="$e h$h b$b k$k" '{$1=$1; print r": "$0}'
        done
      done ;;
    flashmla-stalls)
      # where each role's warps wait, per instruction, in FlashMLA's kernel and in
      # mlajit's on the same rows (FLASHMLA_STALL_ROWS H:B:TOPK ...): ncu's source
      # counters of one launch each (the fifth: warm caches), summarized per role by
      # bench/tools/stall_profile.py (both kernels set their roles' registers first)
      flashmla_env
      for row in ${FLASHMLA_STALL_ROWS:-64:128:2048}; do
        IFS=: read -r h b k <<<"$row"
        NCU_SKIP=4 NCU_KERNEL=regex:flash_fwd_splitkv_mla_fp8_sparse timeout 240 tools/ncu-stalls.sh python3 \
          "$OUT/stalls-flashmla-h$h-b$b-k$k" 8 bench/flashmla_side_by_side.py --heads "$h" --rows "$b:$k" \
          --only flashmla | head -60
        NCU_SKIP=4 timeout 240 tools/ncu-stalls.sh ./build-gpu/mlajit "$OUT/stalls-mlajit-h$h-b$b-k$k" 8 \
          --heads "$h" --batch "$b" --topk "$k" | head -60
      done ;;
    narrow-bf16)
      # sm90-narrow's bf16 edition (forced only: it ties sm90's): the bf16 entries of
      # `layouts` (sm90-narrow among their runs, in head groups of 32 past 32 heads),
      # then the layouts rows at 16 heads (b 64/128, topk 2048) with it forced, beside
      # auto's sm90 (the table's own run); each bench bounded (a kernel that never ends)
      LAYOUTS_ONLY="v32_bf16 dsv4_bf16" "$0" layouts || rc=1
      for v in sm90-narrow auto; do
        timeout 120 ./build-gpu/mlajit bench --layouts --layout v32_bf16 --layout dsv4_bf16 --heads 16 --variant $v \
          --json "$OUT/h200-narrow-bf16-$v.jsonl" 2>&1 | tee "$OUT/bench-narrow-bf16-$v.log" || rc=1
      done ;;
    tune-layouts)
      # issue 49: the tuner over layouts described at run time, on a GPU: GLM53_NOPE's
      # canonical string and the d_nope 256 / ue8m0 layout at heads 16 and 64, b 64,
      # topk 2048 (4 buckets, 36 candidates); every winner is checked against the fp64
      # reference before it is stored, and `cache ls` then lists the records
      tl=/tmp/mlajit-tune-layouts; rm -rf "$tl"
      MLAJIT_CACHE_DIR=$tl ./build-gpu/mlajit tune --layout nope512-rope0-v512-tile128-fp32-inline-row656 \
        --layout d_nope=256,d_rope=64,d_v=256,tile=32,scales=ue8m0,place=inline --heads 16,64 --pages 64 \
        --topk 2048 --rows 64 --json "$OUT/h200-tune-layouts.jsonl" 2>&1 | tee "$OUT/tune-layouts.log" || rc=1
      MLAJIT_CACHE_DIR=$tl ./build-gpu/mlajit cache ls 2>&1 | tee -a "$OUT/tune-layouts.log" | tail -8 ;;
    bench-sm90)
      # the wgmma family forced on the quick rows (its own JSON; h200.jsonl stays the default run)
      ./build-gpu/mlajit bench --quick --variant sm90 --json "$OUT/h200-sm90.jsonl" 2>&1 | tee "$OUT/bench-sm90.log" || rc=1 ;;
  esac
done
for pid in "${background[@]}"; do wait "$pid"; done
[ -n "${base_pid:-}" ] && wait "$base_pid"
[ -n "${flashmla_pid:-}" ] && { wait "$flashmla_pid" || echo "flashmla: build failed"; tail -2 "$OUT/flashmla-build.log"; }
grep -h -E "fuzz rc=|calls|failed" "$OUT"/fuzz-*.log 2>/dev/null | tail -4
n=1
while [ -e "$OUT/logs-$n.tgz" ]; do n=$((n + 1)); done
(cd "$OUT" && tar czf "logs-$n.tgz" --exclude='logs-*.tgz' --exclude='h200*.jsonl' --exclude='*-h200.jsonl' --remove-files ./* 2>/dev/null)
exit $rc
