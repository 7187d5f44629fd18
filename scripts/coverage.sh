#!/usr/bin/env bash
# Measures which lines and branches of trainbench's CPU code the tests run:
# builds the project and its tests with gcc's coverage counters in a build
# folder of their own, runs the suite (every process it starts adds its
# counts: test binaries, trainbench runs, MPI ranks, scripts' runs), and
# reports per source file of kernels/, comm/, dataloader/, checkpoint/ and
# trainer/ (tests/ and libraries left out):
#   scripts/coverage.sh [CTEST ARGS...]      e.g. -R 'ShardLoader|LoaderCli'
# The report, in the build folder's coverage/: index.html (each file's lines,
# run or not, and branches), coverage.txt (a line per file with the lines not
# run), summary.json (gcovr's per-file and total figures). The totals and the
# files with most lines not run are printed at the end. Counts start from
# zero at each run, so CTest arguments that pick tests report those alone.
# The CUDA engine is left out (no GPU runs it here; it is built only where
# nvcc is, and CI compiles it). A process that ends by a signal or MPI_Abort
# writes no counts: docs/coverage.md says which paths that hides.
#
# Folder: build-coverage (TRAINBENCH_COVERAGE_BUILD_DIR, relative to the
# source tree). Build jobs: TRAINBENCH_BUILD_JOBS (default: the CPUs); tests
# at once: TRAINBENCH_TEST_JOBS (default: the CPUs). Needs gcovr
# (scripts/setup.sh installs it). Exits with CTest's status where a test
# failed (the report is still written), gcovr's where it failed, 2 on a bad
# setting. Not part of scripts/test.sh or CI: it builds everything again.
set -euo pipefail
me=coverage.sh
die() { echo "$me: $1" >&2; exit 2; }
cd "$(dirname "$0")/.."
repo=$PWD
. "$repo/scripts/lib/common.sh"  # print_usage, whole_number_settings, instrumented_build_folder, build_instrumented
case "${1:-}" in -h|--help) print_usage; exit 0 ;; esac
whole_number_settings TRAINBENCH_BUILD_JOBS TRAINBENCH_TEST_JOBS
build=$(instrumented_build_folder "${TRAINBENCH_COVERAGE_BUILD_DIR:-build-coverage}" \
  'TRAINBENCH_COVERAGE:BOOL=ON' "coverage counters" TRAINBENCH_COVERAGE_BUILD_DIR) || exit
command -v g++ > /dev/null || die "g++ not found: the counters are gcc's (scripts/setup.sh installs it)"
command -v gcovr > /dev/null || die "gcovr not found: it reads the counters (scripts/setup.sh installs it)"
build_instrumented "$build" -DTRAINBENCH_COVERAGE=ON

# The counters of an earlier run would add to this one's.
find "$build" -name '*.gcda' -delete
report="$build/coverage"
rm -rf "$report"
mkdir -p "$report"
# libgcov says on stderr when it cannot write a process's counts: under the
# tests' own ulimit -f that line broke their one-line-error checks. Its
# lines go to a file instead, counted below.
export GCOV_ERROR_FILE="$report/libgcov-errors.log"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
status=0
(cd "$build" && ctest --output-on-failure --timeout 900 --parallel "${TRAINBENCH_TEST_JOBS:-$(nproc)}" "$@") || status=$?
if [ -s "$GCOV_ERROR_FILE" ]; then
  echo "$me: libgcov could not write $(grep -c 'profiling error' "$GCOV_ERROR_FILE") counts files" \
    "(the tests under ulimit -f; their processes' counts are lost): $GCOV_ERROR_FILE"
fi
# Throw branches (every call that may throw has one) and branches the
# compiler proved unreachable are left out of the branch figures: neither is
# a decision in trainbench's code.
gcovr_status=0
gcovr --root "$repo" --object-directory "$build" \
  --filter "$repo/(kernels|comm|dataloader|checkpoint|trainer)/" --exclude "$repo/kernels/cuda/" \
  --exclude-throw-branches --exclude-unreachable-branches -j "$(nproc)" \
  --html-details "$report/index.html" --txt "$report/coverage.txt" --sort-uncovered \
  --json-summary-pretty --json-summary "$report/summary.json" || gcovr_status=$?
if [ "$gcovr_status" != 0 ]; then
  echo "$me: gcovr failed (exit $gcovr_status)" >&2
  [ "$status" != 0 ] || status=$gcovr_status
  exit "$status"
fi
python3 - "$report/summary.json" <<'EOF'
import json, sys
summary = json.load(open(sys.argv[1]))
def share(covered, total):
    return f"{100.0 * covered / total:.1f} %" if total else "n/a"
print(f"lines run:    {summary['line_covered']} of {summary['line_total']}"
      f" ({share(summary['line_covered'], summary['line_total'])})")
print(f"branches run: {summary['branch_covered']} of {summary['branch_total']}"
      f" ({share(summary['branch_covered'], summary['branch_total'])})")
print("files with most lines not run:")
files = sorted(summary["files"], key=lambda f: f["line_total"] - f["line_covered"], reverse=True)
for f in files[:10]:
    print(f"  {f['line_total'] - f['line_covered']:5d} of {f['line_total']:5d}  {f['filename']}")
EOF
echo "$me: report in $report (index.html, coverage.txt, summary.json)"
exit "$status"
