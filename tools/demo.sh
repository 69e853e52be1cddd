#!/usr/bin/env bash
# The main job: set up a fresh machine if needed, build, run `mlajit demo`.
set -euo pipefail
cd "$(dirname "$0")/.."
tools/bootstrap.sh
exec ./build/mlajit demo
