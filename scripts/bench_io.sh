#!/usr/bin/env bash
# The storage-read ceiling on this machine, side by side in one run:
#   raw       `dd bs=4M of=/dev/null` over every shard (the most a reader can get)
#   loader    `trainbench bench io`, per reader count (and the small-files tree)
#   python    webdataset iterating the same shards (scripts/webdataset_read_bench.py)
#
#   scripts/bench_io.sh [--dir DIR] [--gib N] [--readers 1,2] [--kind image|text]...
#
# Makes N GiB (default 2) of seeded shards per kind in DIR (default
# /tmp/trainbench-bench-io, kept for reruns), reads them once so they sit in
# the page cache, then measures. Kinds: `image` = ~1k u16 tokens plus a
# 64 KiB +- 32 KiB payload per sample (a captioned image); `text` = tokens
# only, ~1k per sample. Figures and JSON land in DIR/results/.
# BUILD_DIR (default: build, in the source tree) selects the build folder; a
# relative DIR or BUILD_DIR is taken from the current folder. Exit codes: 2
# bad usage (before anything is made), 3 not built.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
. "$repo/scripts/lib/common.sh"  # need, build_folder, print_usage

usage() {
  echo "usage: scripts/bench_io.sh [--dir DIR] [--gib N] [--readers LIST] [--kind image|text]..." >&2
  exit 2
}

dir=/tmp/trainbench-bench-io
gib=2
readers=1,2
kinds=()
while [ $# -gt 0 ]; do
  case "$1" in
    --dir) need "$1" $#; dir=$2; shift 2 ;;
    --gib) need "$1" $#; gib=$2; shift 2 ;;
    --readers) need "$1" $#; readers=$2; shift 2 ;;
    --kind) need "$1" $#; kinds+=("$2"); shift 2 ;;
    -h|--help) print_usage; exit 0 ;;
    *) echo "bench_io: unknown argument '$1'" >&2; usage ;;
  esac
done
[ ${#kinds[@]} -gt 0 ] || kinds=(image text)
# Every kind is checked before DIR/results is made.
for kind in "${kinds[@]}"; do
  case "$kind" in
    image|text) ;;
    *) echo "bench_io: --kind $kind: expected image or text" >&2; exit 2 ;;
  esac
done
[ -n "$dir" ] || { echo "bench_io: --dir: empty" >&2; exit 2; }
# A whole number, checked before it reaches $(( )) (which would evaluate it).
[[ "$gib" =~ ^[1-9][0-9]{0,4}$ ]] || { echo "bench_io: --gib $gib: expected a whole number of GiB from 1 to 99999" >&2; exit 2; }
[[ "$readers" =~ ^[1-9][0-9]{0,2}(,[1-9][0-9]{0,2})*$ ]] || { echo "bench_io: --readers $readers: expected a list of counts like 1,2" >&2; exit 2; }
# Paths given are the caller's (the script runs in the source tree).
case "$dir" in /*) ;; *) dir="$PWD/$dir" ;; esac
build_dir=$(build_folder)
cd "$repo"
bin="$build_dir/trainbench"
[ -x "$bin" ] || { echo "bench_io: $bin not built; run scripts/build.sh" >&2; exit 3; }
max_readers=$(tr ',' '\n' <<<"$readers" | sort -n | tail -1)
mkdir -p "$dir/results" || { echo "bench_io: cannot create $dir/results" >&2; exit 2; }

for kind in "${kinds[@]}"; do
  case "$kind" in
    image) payload=(--payload-bytes 64K:32K) ;;
    text) payload=() ;;
  esac
  shards="$dir/$kind"
  count=$((gib * 8))  # 128 MiB shards
  # An earlier call's set is reused when it is this --gib's: its last shard
  # there and none past it (a larger --gib's set was read whole, the figures
  # labelled with this one).
  if [ ! -f "$shards/train-$(printf %06d $((count - 1))).tar" ] || [ -e "$shards/train-$(printf %06d "$count").tar" ]; then
    echo "== making $gib GiB of $kind shards in $shards"
    rm -rf "$shards"
    "$bin" shards synth --out "$shards" --count "$count" --size 128M --tokens 1024:512 \
      --vocab 50257 "${payload[@]}" --seed 1 >/dev/null
  fi
  files=("$shards"/train-*.tar)
  cat "${files[@]}" >/dev/null  # into the page cache

  echo "== $kind: plain sequential read, one stream (dd bs=4M, file after file)"
  start=$(date +%s.%N)
  for f in "${files[@]}"; do dd if="$f" of=/dev/null bs=4M status=none; done
  end=$(date +%s.%N)
  bytes=$(du -cb "${files[@]}" | tail -1 | cut -f1)
  raw_gbs=$(python3 -c "print(f'{$bytes / ($end - $start) / 1e9:.2f}')")
  echo "dd: $raw_gbs GB/s"

  echo "== $kind: trainbench bench io"
  "$bin" bench io gpt2-124m --set "data.shards=$shards" --set train.micro_batch=8 \
    --readers "$readers" --small-files --out "$dir/results/bench-io-$kind.json" \
    | tee "$dir/results/bench-io-$kind.txt"

  echo "== $kind: Python webdataset $(python3 -c 'import webdataset; print(webdataset.__version__)')"
  python3 scripts/webdataset_read_bench.py "${files[@]}" --workers "$max_readers" \
    --json "$dir/results/webdataset-$kind.json" | tee "$dir/results/webdataset-$kind.txt"

  python3 - "$dir/results/bench-io-$kind.json" "$dir/results/webdataset-$kind.json" "$raw_gbs" "$kind" <<'PY'
import json, sys
ours, theirs, raw, kind = json.load(open(sys.argv[1])), json.load(open(sys.argv[2])), float(sys.argv[3]), sys.argv[4]
loaders = [r for r in ours["by_threads"] if "loader" in r]
best = max(loaders, key=lambda r: r["loader"]["tokens_per_s"])["loader"]
wds = max(theirs["runs"], key=lambda r: r["tokens_per_s"])
print(f"\n{kind}: {ours['shard_bytes'] / 2**30:.2f} GiB in {ours['shards']} shards")
print(f"  dd bs=4M, one stream     {raw:8.2f} GB/s")
for r in ours["by_threads"]:
    print(f"  plain read {r['threads']} thread(s)   {r['plain_read']['gbs']:8.2f} GB/s")
    if "loader" in r:
        l = r["loader"]
        print(f"  loader {r['threads']} reader(s)      {l['gbs']:8.2f} GB/s  {l['tokens_per_s'] / 1e6:8.1f} M tokens/s"
              f"  {100 * l['gbs'] / raw:4.0f}% of dd  {100 * r['loader_fraction_of_plain_read']:4.0f}% of the same threads")
if ours["small_files"]:
    s = ours["small_files"]
    print(f"  small files              {s['gbs']:8.2f} GB/s  {s['tokens_per_s'] / 1e6:8.1f} M tokens/s  ({s['files']} files)")
for r in theirs["runs"]:
    print(f"  webdataset {r['workers']} process(es)          {r['tokens_per_s'] / 1e6:8.1f} M tokens/s")
print(f"  loader / webdataset      {best['tokens_per_s'] / wds['tokens_per_s']:.1f}x tokens/s (best of each)")
PY
done
