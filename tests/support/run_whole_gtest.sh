#!/usr/bin/env bash
# Runs a gtest binary that CTest registers as one test (trainbench_add_gtest
# WHOLE): its failures fail it, and a case it skipped (GTEST_SKIP: no tmpfs
# mount, not a git work tree, ...) makes it exit 77, which CTest lists as
# skipped, the cases and reasons printed. Run directly, a whole binary's
# skipped case read as "Passed".
set -uo pipefail
out=$(mktemp)
trap 'rm -f "$out"' EXIT
"$@" 2>&1 | tee "$out"
status=${PIPESTATUS[0]}
[ "$status" -eq 0 ] || exit "$status"
if grep -q '^\[  SKIPPED \] [A-Za-z]' "$out"; then
  echo "skipped inside this test (the case, where, and why):"
  grep -E '^\[  SKIPPED \] [A-Za-z].*\)$' "$out" || true
  grep -E -A1 ': Skipped$' "$out" | grep -v '^--$' || true
  exit 77
fi
