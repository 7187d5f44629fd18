#!/usr/bin/env bash
# The storage-write target of issue 6, measured side by side on one folder:
#   checkpoint  `trainbench bench io --write`: a checkpoint persisted as a run
#               persists it (parallel writers, XXH64, fsyncs, the rank record)
#   dd          `dd if=/dev/zero of=FILE bs=64M count=N oflag=direct conv=fsync`,
#               the same number of bytes (to 64 MiB), the same folder
# alternating (odd repeats dd first), 3 repeats by default; prints each
# repeat, the medians and checkpoint / dd. The target: >= 0.80.
#
#   scripts/bench_ckpt_write.sh [--dir DIR] [--gib N] [--files N] [--reps N]
#
# DIR (default /tmp/trainbench-bench-ckpt-write) should be on the filesystem
# checkpoints go to; the script leaves only DIR/results/ there. N GiB default
# 2, --files (writer files per checkpoint) 1 to 1024, default 2. BUILD_DIR
# (default: build, in the source tree) selects the build folder; a relative
# DIR or BUILD_DIR is taken from the current folder. Exit codes: 2 bad usage
# (before anything is written), 3 not built or dd failed.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
. "$repo/scripts/lib/common.sh"  # need, build_folder, print_usage

usage() {
  echo "usage: scripts/bench_ckpt_write.sh [--dir DIR] [--gib N] [--files N] [--reps N]" >&2
  exit 2
}

dir=/tmp/trainbench-bench-ckpt-write
gib=2
files=2
reps=3
while [ $# -gt 0 ]; do
  case "$1" in
    --dir) need "$1" $#; dir=$2; shift 2 ;;
    --gib) need "$1" $#; gib=$2; shift 2 ;;
    --files) need "$1" $#; files=$2; shift 2 ;;
    --reps) need "$1" $#; reps=$2; shift 2 ;;
    -h|--help) print_usage; exit 0 ;;
    *) echo "bench_ckpt_write: unknown argument '$1'" >&2; usage ;;
  esac
done
# Checked before the first dd writes N GiB (`bench io --write` refused a bad
# --files only after it). --gib: at most 1 PiB, the most `bench io --bytes` takes.
if ! [[ "$gib" =~ ^[1-9][0-9]{0,6}$ ]] || [ "$gib" -gt 1048576 ]; then
  echo "bench_ckpt_write: --gib $gib: expected a whole number of GiB from 1 to 1048576" >&2; exit 2
fi
if ! [[ "$files" =~ ^[1-9][0-9]{0,3}$ ]] || [ "$files" -gt 1024 ]; then
  echo "bench_ckpt_write: --files $files: expected a whole number from 1 to 1024" >&2; exit 2
fi
[[ "$reps" =~ ^[1-9][0-9]{0,2}$ ]] || { echo "bench_ckpt_write: --reps $reps: expected a whole number from 1 to 999" >&2; exit 2; }
[ -n "$dir" ] || { echo "bench_ckpt_write: --dir: empty" >&2; exit 2; }
# Paths given are the caller's (the script runs in the source tree).
case "$dir" in /*) ;; *) dir="$PWD/$dir" ;; esac
build_dir=$(build_folder)
cd "$repo"
bin="$build_dir/trainbench"
[ -x "$bin" ] || { echo "bench_ckpt_write: $bin not built; run scripts/build.sh" >&2; exit 3; }
mkdir -p "$dir/results" || { echo "bench_ckpt_write: cannot create $dir/results" >&2; exit 2; }
bytes=$((gib << 30))
count=$((bytes >> 26))  # 64 MiB blocks
ddfile="$dir/dd-sequential-write.bin"
trap 'rm -f "$ddfile"' EXIT

echo "== $gib GiB to $dir ($(df -T "$dir" | awk 'NR == 2 {print $2}')), $files writer file(s), $reps repeat(s)"
# dd's GB/s. A dd that fails (disk full, O_DIRECT refused) is the
# environment's: its own last line and exit 3 (its failure was read as a
# figure, and Python's TypeError ended the script).
run_dd() {
  local out
  # LC_ALL=C: the summary line parsed below is dd's English one.
  if ! out=$(LC_ALL=C dd if=/dev/zero of="$ddfile" bs=64M count="$count" oflag=direct conv=fsync 2>&1); then
    rm -f "$ddfile"
    # dd's own complaint ("dd: error writing ...": its record counts follow).
    local why
    why=$(printf '%s\n' "$out" | grep -m 1 '^dd: ') || why=$(printf '%s\n' "$out" | tail -n 1)
    echo "bench_ckpt_write: dd to $ddfile failed: $why" >&2
    return 3
  fi
  rm -f "$ddfile"
  # "2147483648 bytes (2.1 GB, 2.0 GiB) copied, 1.234 s, 1.7 GB/s"
  python3 -c 'import re, sys; m = re.search(r"^(\d+) bytes .* copied, ([0-9.e+-]+) s", sys.argv[1], re.M); print(f"{int(m[1]) / float(m[2]) / 1e9:.4f}")' "$out"
}
run_bench() {
  "$bin" bench io --write --bytes "$bytes" --files "$files" --repeats 1 --dir "$dir" \
    --out "$dir/results/bench-io-write-$1.json" > "$dir/results/bench-io-write-$1.txt"
}

dd_gbs=()
measure_dd() {
  local gbs
  gbs=$(run_dd) || exit 3
  dd_gbs+=("$gbs")
}
for rep in $(seq 1 "$reps"); do
  if [ $((rep % 2)) -eq 1 ]; then
    measure_dd; run_bench "$rep"
  else
    run_bench "$rep"; measure_dd
  fi
  echo "  repeat $rep done"
done

python3 - "$dir/results" "$reps" "${dd_gbs[@]}" <<'PY'
import json, statistics, sys
results, reps, dd = sys.argv[1], int(sys.argv[2]), [float(x) for x in sys.argv[3:]]
runs = [json.load(open(f"{results}/bench-io-write-{i}.json")) for i in range(1, reps + 1)]
ckpt = [r["checkpoint_persist"]["gbs"] for r in runs]
plain = [r["plain_write"]["gbs"] for r in runs]
state = [r["plain_write_from_state"]["gbs"] for r in runs]
print(f"\n  {'repeat':<8} {'checkpoint GB/s':>16} {'dd GB/s':>10} {'ratio':>7}   in-process: {'plain':>6} {'from state':>11}")
for i in range(reps):
    print(f"  {i + 1:<8} {ckpt[i]:16.2f} {dd[i]:10.2f} {ckpt[i] / dd[i]:7.2f}               {plain[i]:6.2f} {state[i]:11.2f}")
m_ckpt, m_dd = statistics.median(ckpt), statistics.median(dd)
print(f"  {'median':<8} {m_ckpt:16.2f} {m_dd:10.2f} {m_ckpt / m_dd:7.2f}               "
      f"{statistics.median(plain):6.2f} {statistics.median(state):11.2f}")
print(f"\n  checkpoint persist / dd bs=64M oflag=direct conv=fsync = {m_ckpt / m_dd:.2f} (target >= 0.80): "
      + ("met" if m_ckpt / m_dd >= 0.80 else "NOT met"))
direct = all(r["checkpoint_persist"]["direct_io"] for r in runs)
print(f"  checkpoint {'O_DIRECT' if direct else 'buffered (O_DIRECT refused)'}; {runs[0]['bytes']} bytes per checkpoint; "
      f"JSON and tables in {results}/")
PY
