#!/usr/bin/env bash
# All tests: installs what is missing, builds, runs CTest. .ci/run calls this.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh
cd "${TRAINBENCH_BUILD_DIR:-build}"
# Multi-rank tests run real MPI ranks as root inside CI containers.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
ctest --output-on-failure --timeout 900 "$@"
