#!/usr/bin/env bash
# Configures and builds trainbench in build/ (Release, Ninja). Extra arguments
# go to CMake's configure step, e.g. -DTRAINBENCH_CUDA=OFF.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR="${TRAINBENCH_BUILD_DIR:-build}"
if [ ! -f "$BUILD_DIR/build.ninja" ] || [ $# -gt 0 ]; then
  cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release "$@"
fi
# Two cores and libtorch translation units of ~1.5 GiB each: -j2 fits in memory.
cmake --build "$BUILD_DIR" -j "${TRAINBENCH_BUILD_JOBS:-$(nproc)}"
