#!/usr/bin/env bash
# All tests: installs what is missing, builds, runs CTest. .ci/run calls this.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh
cd "${TRAINBENCH_BUILD_DIR:-build}"
# Multi-rank tests run real MPI ranks as root inside CI containers.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# One test per CPU (TRAINBENCH_TEST_JOBS to choose): most tests wait on
# hung-storage timeouts or run short one-process jobs. Those that compare
# times side by side run alone, and one MPI job runs at a time
# (tests/CMakeLists.txt: TRAINBENCH_SERIAL_TEST, TRAINBENCH_MPI_TEST).
ctest --output-on-failure --timeout 900 --parallel "${TRAINBENCH_TEST_JOBS:-$(nproc)}" "$@"
# GPU tests skip where no GPU is visible; CTest lists them as skipped, this says why.
if [ -x tests/cuda/test_lt_gemm ]; then
  reason=$(tests/cuda/test_lt_gemm --gtest_filter='LtGemm.*' 2>&1 | grep -m1 '^no GPU:' || true)
  if [ -n "$reason" ]; then echo "GPU tests skipped: $reason"; fi
fi
