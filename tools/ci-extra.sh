#!/usr/bin/env bash
# CI's second half, after tools/test.sh (the README's test command, ./build):
#  0. `pip install .` from a fresh clone into a new venv (meson-python from PyPI),
#     then the installed package and CLI answer (bounded: PIP_SECONDS, 900);
#  1. a bounded `mlajit fuzz --cpu-only` on the normal build: random calls over
#     the envelope, generated and NVRTC-compiled for four arch families;
#  2. the sanitizer build (./build-asan: clang, AddressSanitizer +
#     UndefinedBehaviorSanitizer, the libFuzzer harnesses): the CPU suites, each
#     harness over its kept corpus, a bounded fuzz --cpu-only under it, and
#     bounded runs of fuzz_cache_file (whole damaged cache data files),
#     fuzz_tactic (tactic records) and fuzz_layout (layout and spec text).
# Fuzz time in all: FUZZ_SECONDS + ASAN_FUZZ_SECONDS + CACHE_FUZZ_SECONDS +
# TACTIC_FUZZ_SECONDS + LAYOUT_FUZZ_SECONDS (default 60 + 30 + 60 + 20 + 20 s).
# Installs clang and its sanitizer runtimes when missing. See docs/fuzzing.md.
set -euo pipefail
cd "$(dirname "$0")/.."
FUZZ_SECONDS=${FUZZ_SECONDS:-60}
ASAN_FUZZ_SECONDS=${ASAN_FUZZ_SECONDS:-30}
CACHE_FUZZ_SECONDS=${CACHE_FUZZ_SECONDS:-60}
TACTIC_FUZZ_SECONDS=${TACTIC_FUZZ_SECONDS:-20}
LAYOUT_FUZZ_SECONDS=${LAYOUT_FUZZ_SECONDS:-20}
FUZZ_SEED=${FUZZ_SEED:-20261130} # fixed: CI is repeatable; run `mlajit fuzz` by hand for new seeds
export MLAJIT_LOG=quiet
scratch=$(mktemp -d /tmp/mlajit-ci-XXXXXX)
trap 'rm -rf "$scratch"' EXIT

step() { printf '\n== %s (%s)\n' "$1" "$(date -u +%H:%M:%S)"; }

step "pip install . on a fresh clone (venv, meson-python), then the package and its CLI"
git clone -q . "$scratch/clone"
python3 -m venv "$scratch/venv"
timeout "${PIP_SECONDS:-900}" "$scratch/venv/bin/python" -m pip install -q --disable-pip-version-check "$scratch/clone"
(cd "$scratch" && MLAJIT_CACHE_DIR="$scratch/pip-cache" "$scratch/venv/bin/python" - "$scratch/venv" <<'PY'
import sys
import mlajit
venv = sys.argv[1]
assert mlajit.library_path().startswith(venv), mlajit.library_path()  # the wheel's own library
ok, why = mlajit.supported("v32", 16, 64, 2048, batch_size=32768)
assert ok, why
assert mlajit.supported("v32", 129, 64)[1] == "spec.h_q = 129; allowed 1..128"
ctx = mlajit.Context(no_device=True)
plan = ctx.plan(mlajit.models.make_spec("dsv4", 8, 64), 2, 2, 128)
print(f"pip install .: {mlajit.library_path()}: planned {plan.report.spec}, compiles {ctx.info().compiles}")
PY
)
"$scratch/venv/bin/mlajit" envelope v32.h16.p64.t0.hc0.auto.sm_90a --batch 32768 --topk 2048 | tail -1

step "fuzz --cpu-only, ${FUZZ_SECONDS} s, normal build"
MLAJIT_CACHE_DIR=$scratch/cache ./build/mlajit fuzz --cpu-only --seconds "$FUZZ_SECONDS" --seed "$FUZZ_SEED" \
  --out "$scratch/failures"

step "sanitizer build (clang, address + undefined, libFuzzer harnesses)"
need=()
command -v clang >/dev/null || need+=(clang)
clang_rt=$(clang -print-resource-dir 2>/dev/null || true)
ls "$clang_rt"/lib/linux/libclang_rt.fuzzer-x86_64.a >/dev/null 2>&1 || need+=(libclang-rt-dev)
. tools/apt-install.sh
apt_install ci-extra "${need[@]}"
cuda=${CUDA_HOME:-/usr/local/cuda}
if [ ! -f build-asan/build.ninja ]; then
  CC=clang meson setup build-asan -Dcudatoolkit="$cuda" -Db_sanitize=address,undefined -Db_lundef=false \
    -Dfuzzers=true >/dev/null
fi
meson compile -C build-asan >/dev/null

step "CPU suites and the fuzz corpora under the sanitizers"
# The GPU suite skips here; the sanitizer options come from tests/meson.build.
meson test -C build-asan --print-errorlogs

step "fuzz --cpu-only, ${ASAN_FUZZ_SECONDS} s, under the sanitizers"
UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  LSAN_OPTIONS=suppressions=$PWD/tests/sanitizer/lsan.supp \
  MLAJIT_CACHE_DIR=$scratch/cache-asan \
  ./build-asan/mlajit fuzz --cpu-only --seconds "$ASAN_FUZZ_SECONDS" --seed "$((FUZZ_SEED + 1))" \
  --out "$scratch/failures-asan"
# A bounded libFuzzer run of harness NAME for SECONDS over its kept corpus. New
# inputs go to a scratch directory (the kept corpus is read only); a crash or a
# broken property leaves its input in build-asan/fuzz-artifacts/.
run_fuzzer() {
  local name=$1 seconds=$2
  mkdir -p "$scratch/$name" build-asan/fuzz-artifacts
  if ! LSAN_OPTIONS=suppressions=$PWD/tests/sanitizer/lsan.supp \
    "./build-asan/tests/fuzz/$name" -max_total_time="$seconds" -timeout=30 -seed="$FUZZ_SEED" \
    -print_final_stats=1 -artifact_prefix=build-asan/fuzz-artifacts/ "$scratch/$name" \
    "tests/fuzz/corpus/$name" >"$scratch/$name.log" 2>&1; then
    tail -60 "$scratch/$name.log"
    exit 1
  fi
  grep -E '^(Done|stat::number_of_executed_units|stat::new_units_added)' "$scratch/$name.log" || true
}
step "fuzz_cache_file, ${CACHE_FUZZ_SECONDS} s: mutated cache data files under the sanitizers"
run_fuzzer fuzz_cache_file "$CACHE_FUZZ_SECONDS"
step "fuzz_tactic, ${TACTIC_FUZZ_SECONDS} s: mutated tactic records under the sanitizers"
run_fuzzer fuzz_tactic "$TACTIC_FUZZ_SECONDS"
step "fuzz_layout, ${LAYOUT_FUZZ_SECONDS} s: mutated layout and spec text under the sanitizers"
run_fuzzer fuzz_layout "$LAYOUT_FUZZ_SECONDS"
step "ci-extra done"
