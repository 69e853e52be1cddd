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
expect "loaded on the GPU" compile --model v32 --heads 64 --page 64
expect "loaded on the GPU" compile --model dsv4 --heads 16 --page 64 --variant portable
echo "cli on the fake driver: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
