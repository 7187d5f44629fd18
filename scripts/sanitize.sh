#!/usr/bin/env bash
# Builds trainbench and every CPU test with AddressSanitizer, LeakSanitizer
# and UndefinedBehaviorSanitizer (gcc), in a build folder of their own, and
# runs the suite under them:
#   scripts/sanitize.sh [CTEST ARGS...]      e.g. -R 'ShardLoader|LoaderCli'
# A sanitizer's report fails the test whose process it came from: the test
# binary's own, or a trainbench, mpirun rank or script the test ran (each
# exits non-zero and prints the report on its stderr, which the test shows).
# The CUDA engine is left out (not instrumented; no GPU here); tests that set
# an address-space limit (ulimit -v) skip saying why (ASan's shadow memory
# cannot be mapped under one). CTest runs twice: the tests without MPI ranks,
# then those with (label mpi; below, why). Exits non-zero if either failed
# (the last failing CTest's status); 2 on a bad setting.
#
# Folder: build-asan (TRAINBENCH_SANITIZE_BUILD_DIR, relative to the source
# tree). Build jobs: TRAINBENCH_BUILD_JOBS (default: the CPUs); tests at once:
# TRAINBENCH_TEST_JOBS (default: the CPUs). On CI's two cores the build takes
# about 18 minutes and the suite about 14 (docs/perf.md, stop 56).
# Not part of scripts/test.sh or CI for that time; run it after a change to
# threads, buffers or anything that parses what users or storage hand in.
set -euo pipefail
me=sanitize.sh
die() { echo "$me: $1" >&2; exit 2; }
cd "$(dirname "$0")/.."
repo=$PWD
. "$repo/scripts/lib/common.sh"  # print_usage, whole_number_settings, instrumented_build_folder, build_instrumented
case "${1:-}" in -h|--help) print_usage; exit 0 ;; esac
whole_number_settings TRAINBENCH_BUILD_JOBS TRAINBENCH_TEST_JOBS
build=$(instrumented_build_folder "${TRAINBENCH_SANITIZE_BUILD_DIR:-build-asan}" \
  'TRAINBENCH_SANITIZE:STRING=address' sanitizers TRAINBENCH_SANITIZE_BUILD_DIR) || exit
command -v g++ > /dev/null || die "g++ not found: the sanitized build uses gcc's runtimes (scripts/setup.sh installs it)"
build_instrumented "$build" -DTRAINBENCH_SANITIZE=address

supp="$repo/scripts/sanitizers"
# verify_asan_link_order=0: the hung-storage tests preload a shim
# (tests/support/failing_syscalls.cpp) that then comes ahead of the ASan
# runtime; the shim only forwards libc calls, which ASan still intercepts.
export ASAN_OPTIONS="detect_leaks=1:halt_on_error=1:verify_asan_link_order=0:check_initialization_order=1"
export LSAN_OPTIONS="suppressions=$supp/lsan.supp:print_suppressions=0"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
cd "$build"
jobs=${TRAINBENCH_TEST_JOBS:-$(nproc)}
status=0
ctest --output-on-failure --timeout 900 --parallel "$jobs" -LE mpi "$@" || status=$?
# The tests that start MPI ranks (label mpi), with fast_unwind_on_malloc=0:
# OpenMPI's libraries have no frame pointers, so the fast unwinder stops at
# their first frame, in a plugin unloaded by the time LeakSanitizer reports
# ("<unknown module>"), where no suppression can name OpenMPI's own leaks;
# the slow unwinder reaches libopen-pal and libmpi below it. It slows every
# allocation (the CLI suites took up to 2.3 times as long), so not the rest.
echo "$me: the tests that start MPI ranks, with the slow unwinder"
ASAN_OPTIONS="$ASAN_OPTIONS:fast_unwind_on_malloc=0" \
  ctest --output-on-failure --timeout 900 --parallel "$jobs" -L mpi "$@" || status=$?
exit "$status"
