#!/usr/bin/env bash
# Fuzzes the shard read path (tar -> samples -> tokens) for SECONDS (default 60):
#   scripts/fuzz.sh [SECONDS]
# SECONDS is a whole number of seconds, or of minutes or hours with an m or h
# suffix (90, 90s, 10m, 2h; at most 2147483647 s, libFuzzer's limit).
# Builds tests/fuzz/fuzz_shard_tokens with clang, libFuzzer, ASan and UBSan in
# build-fuzz (TRAINBENCH_FUZZ_BUILD_DIR; a relative one is taken from the
# current folder), seeds it with small tars written by Python's tarfile, runs
# it, and prints libFuzzer's final figures. Exits 1 when it found a crash (the
# crashing input is left in the build dir), 2 on a bad argument.
set -euo pipefail
me=fuzz.sh
usage() { awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; }
die() { echo "$me: $1" >&2; exit 2; }

case "${1:-}" in -h|--help) usage; exit 0 ;; esac
[ $# -le 1 ] || die "one argument, SECONDS, expected; got $#: $*"
duration=60
if [ $# -eq 1 ]; then duration=$1; fi
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
cmake --build "$build" -j "${TRAINBENCH_FUZZ_JOBS:-1}" --target fuzz_shard_tokens

work="$(mktemp -d /tmp/trainbench_fuzz_XXXXXX)"
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/corpus"
python3 - "$work/corpus" <<'PY'
import gzip, io, sys, tarfile
import numpy as np

def tar_bytes(members, tar_format=tarfile.PAX_FORMAT):
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tar_format) as tar:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return out.getvalue()

def npy(array):
    out = io.BytesIO()
    np.save(out, array)
    return out.getvalue()

tokens = np.arange(1, 9, dtype="<u2")
seeds = {
    "u16.tar": tar_bytes([("000.tokens.u16", tokens.tobytes()), ("000.json", b"{}"),
                          ("001.tokens.u16", tokens[::-1].tobytes())]),
    "npy.tar": tar_bytes([("a.b/x.input_ids.npy", npy(tokens.astype(">i8"))),
                          ("a.b/x.TXT", b"text")], tarfile.GNU_FORMAT),
    "u32_ustar.tar": tar_bytes([("d/k.u32", np.arange(5, dtype="<u4").tobytes()), ("d/k.u32", b"dup")],
                               tarfile.USTAR_FORMAT),
    "long_pax.tar": tar_bytes([("l" * 150 + ".txt", b"long name"), ("__meta__.json", b"{}")]),
    "gzip.tar.gz": gzip.compress(tar_bytes([("g.txt", b"gz"), ("g.npy", npy(tokens))])),
    "raw.npy": npy(np.arange(3, dtype="<u4")),
}
for name, data in seeds.items():
    with open(f"{sys.argv[1]}/{name}", "wb") as f:
        f.write(data)
PY

# -rss_limit_mb stays above ASan's overhead on a 1 MiB member; crashes land in $build.
set +e
"$build/tests/fuzz/fuzz_shard_tokens" "$work/corpus" -max_total_time="$seconds" -print_final_stats=1 \
  -rss_limit_mb=2048 -max_len=65536 -artifact_prefix="$build/" -print_pcs=0 >"$work/log" 2>&1
status=$?
set -e
grep -E '^(Done [0-9]+ runs|stat::number_of_executed_units|stat::average_exec_per_sec|stat::new_units_added|stat::peak_rss_mb)' "$work/log" || true
if [ "$status" -ne 0 ]; then
  grep -E 'ERROR|finding|SUMMARY|Test unit written' "$work/log" || tail -n 40 "$work/log"
  echo "fuzz_shard_tokens: crashes found: 1 (exit $status; libFuzzer stops at the first)"
  exit 1
fi
echo "fuzz_shard_tokens: crashes found: 0 in ${seconds}s"
