#!/usr/bin/env bash
# Install what a fresh Debian/Ubuntu machine lacks, then configure and build
# mlajit into ./build. Idempotent: a second run only rebuilds what changed.
# Needs the CUDA toolkit (NVRTC) at /usr/local/cuda, or CUDA_HOME / --cudatoolkit.
set -euo pipefail
cd "$(dirname "$0")/.."

need=()
command -v meson >/dev/null || need+=(meson)
command -v ninja >/dev/null || need+=(ninja-build)
command -v pkg-config >/dev/null || need+=(pkg-config)
pkg-config --exists lmdb 2>/dev/null || need+=(liblmdb-dev)
pkg-config --exists libxxhash 2>/dev/null || need+=(libxxhash-dev)
pkg-config --exists criterion 2>/dev/null || need+=(libcriterion-dev)
. tools/apt-install.sh
apt_install bootstrap "${need[@]}"
# the Python suites (python/tests) run under pytest
. tools/pip-install.sh
python3 -c 'import pytest' 2>/dev/null || pip_install bootstrap pytest

cuda=${CUDA_HOME:-/usr/local/cuda}
if [ ! -f "$cuda/include/nvrtc.h" ] || [ ! -f "$cuda/include/cuda.h" ]; then
  echo "bootstrap: no CUDA toolkit at $cuda (need NVRTC: nvrtc.h and libnvrtc; and cuda.h, which the tests' fake driver is checked against); set CUDA_HOME" >&2
  exit 1
fi
if [ ! -f build/build.ninja ]; then
  meson setup build -Dcudatoolkit="$cuda" "$@" >/dev/null
fi
meson compile -C build >/dev/null
echo "bootstrap: built ./build/mlajit and ./build/libmlajit.so"
