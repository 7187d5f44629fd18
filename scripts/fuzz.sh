#!/usr/bin/env bash
# Fuzzes what trainbench reads from users and storage for SECONDS (default 60)
# per target:
#   scripts/fuzz.sh [SECONDS] [--target shard_tokens|loader_position|config]
# SECONDS is a whole number of seconds, or of minutes or hours with an m or h
# suffix (90, 90s, 10m, 2h; at most 2147483647 s, libFuzzer's limit).
# Targets (tests/fuzz): shard_tokens (tar -> samples -> tokens), loader_position
# (the position a checkpoint carries), config (YAML and a --set); all three
# in turn without --target. Builds them with clang, libFuzzer, ASan and UBSan
# in build-fuzz (TRAINBENCH_FUZZ_BUILD_DIR; a relative one is taken from the
# current folder), seeds each from tests/fuzz/make_seeds.py and
# tests/fuzz/regressions/TARGET, keeps what it finds in build-fuzz/corpus/TARGET
# for the next run, and prints libFuzzer's final figures. Exits 1 when it
# found a crash (the input is left in the build dir: once fixed, copy it into
# tests/fuzz/regressions/TARGET, which CTest replays), 2 on a bad argument.
set -euo pipefail
me=fuzz.sh
. "$(dirname "$0")/lib/common.sh"  # print_usage
die() { echo "$me: $1" >&2; exit 2; }

case "${1:-}" in -h|--help) print_usage; exit 0 ;; esac
targets=(shard_tokens loader_position config)
duration=60
if [ $# -ge 1 ] && [ "$1" != --target ]; then duration=$1; shift; fi
if [ $# -ge 1 ]; then
  [ "$1" = --target ] && [ $# -eq 2 ] ||
    die "expected [SECONDS] [--target shard_tokens|loader_position|config]; got: $*"
  case "$2" in shard_tokens|loader_position|config) targets=("$2") ;;
    *) die "--target '$2': expected shard_tokens, loader_position or config" ;; esac
fi
# Checked here, before the build: libFuzzer reads 0 or a negative number as
# "no limit" and stops reading a number at its first non-digit (2m was 2 s).
[[ "$duration" =~ ^([0-9]{1,10})([smh]?)$ ]] ||
  die "SECONDS '$duration': expected a positive whole number of seconds, or of minutes or hours (90, 10m, 2h)"
seconds=$((10#${BASH_REMATCH[1]}))
case "${BASH_REMATCH[2]}" in m) seconds=$((seconds * 60)) ;; h) seconds=$((seconds * 3600)) ;; esac
[ "$seconds" -gt 0 ] || die "SECONDS '$duration': expected more than 0 (0 is no limit to libFuzzer)"
[ "$seconds" -le 2147483647 ] || die "SECONDS '$duration': at most 2147483647 s (libFuzzer's limit)"

build="${TRAINBENCH_FUZZ_BUILD_DIR:-build-fuzz}"
case "$build" in /*) ;; *) if [ -n "${TRAINBENCH_FUZZ_BUILD_DIR:-}" ]; then build="$PWD/$build"; fi ;; esac
cd "$(dirname "$0")/.."

# libFuzzer comes with clang, which the build and test setup does not need.
command -v clang++ > /dev/null ||
  die "clang++ not found: libFuzzer comes with clang (apt-get install clang; scripts/setup.sh does not install it)"
# Tests must be on: the fuzz targets live under tests/.
mkdir -p "$build"
CC=clang CXX=clang++ cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DTRAINBENCH_FUZZ=ON -DTRAINBENCH_CUDA=OFF -DTRAINBENCH_BUILD_TESTS=ON >"$build/configure.log" 2>&1 ||
  { cat "$build/configure.log"; exit 1; }
cmake --build "$build" -j "${TRAINBENCH_FUZZ_JOBS:-1}" --target "${targets[@]/#/fuzz_}"

work="$(mktemp -d /tmp/trainbench_fuzz_XXXXXX)"
trap 'rm -rf "$work"' EXIT
python3 tests/fuzz/make_seeds.py "$work/seeds"

found=0
for target in "${targets[@]}"; do
  # The corpus grows in build-fuzz/corpus/TARGET from run to run; the seeds
  # and the regressions are read, not written.
  corpus="$build/corpus/$target"
  mkdir -p "$corpus"
  # -rss_limit_mb stays above ASan's overhead on a 1 MiB member; crashes land in $build.
  set +e
  "$build/tests/fuzz/fuzz_$target" "$corpus" "$work/seeds/$target" "tests/fuzz/regressions/$target" \
    -max_total_time="$seconds" -print_final_stats=1 -rss_limit_mb=2048 -max_len=65536 \
    -artifact_prefix="$build/$target-" -print_pcs=0 >"$work/$target.log" 2>&1
  status=$?
  set -e
  grep -E '^(Done [0-9]+ runs|stat::number_of_executed_units|stat::average_exec_per_sec|stat::new_units_added|stat::peak_rss_mb)' \
    "$work/$target.log" | sed "s/^/fuzz_$target: /" || true
  if [ "$status" -ne 0 ]; then
    grep -E 'ERROR|finding|SUMMARY|Test unit written' "$work/$target.log" || tail -n 40 "$work/$target.log"
    echo "fuzz_$target: crashes found: 1 (exit $status; libFuzzer stops at the first; once fixed, copy the input into tests/fuzz/regressions/$target)"
    found=1
  else
    echo "fuzz_$target: crashes found: 0 in ${seconds}s"
  fi
done
exit "$found"
