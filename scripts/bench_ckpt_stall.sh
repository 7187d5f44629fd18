#!/usr/bin/env bash
# What asynchronous checkpointing buys, side by side in one run: the same
# CPU model (gpt2-124m shapes with 5 layers: 124M parameters, a 1.5 GB
# checkpoint of fp32 weights and AdamW m and v) trained with checkpoint.async
# true and false, alternating, each checkpoint's loop stall from the result
# JSON.
#
#   scripts/bench_ckpt_stall.sh [--dir DIR] [--repeats N] [--layers L]
#
# DIR (default /tmp/trainbench-bench-ckpt) holds the checkpoints and the
# result JSONs (DIR/results). BUILD_DIR (default: build, in the source tree)
# selects the build; a relative DIR or BUILD_DIR is taken from the current
# folder. Exit codes: 2 bad usage, 3 not built, else the failed run's.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
. "$repo/scripts/lib/common.sh"  # need, build_folder, print_usage

usage() {
  echo "usage: scripts/bench_ckpt_stall.sh [--dir DIR] [--repeats N] [--layers L]" >&2
  exit 2
}
dir=/tmp/trainbench-bench-ckpt
repeats=2
layers=5
while [ $# -gt 0 ]; do
  case "$1" in
    --dir) need "$1" $#; dir=$2; shift 2 ;;
    --repeats) need "$1" $#; repeats=$2; shift 2 ;;
    --layers) need "$1" $#; layers=$2; shift 2 ;;
    -h|--help) print_usage; exit 0 ;;
    *) echo "bench_ckpt_stall: unknown argument '$1'" >&2; usage ;;
  esac
done
[[ "$repeats" =~ ^[1-9][0-9]{0,2}$ ]] || { echo "bench_ckpt_stall: --repeats $repeats: expected a whole number from 1 to 999" >&2; exit 2; }
[[ "$layers" =~ ^[1-9][0-9]{0,2}$ ]] || { echo "bench_ckpt_stall: --layers $layers: expected a whole number from 1 to 999" >&2; exit 2; }
[ -n "$dir" ] || { echo "bench_ckpt_stall: --dir: empty" >&2; exit 2; }
# Paths given are the caller's (the script runs in the source tree).
case "$dir" in /*) ;; *) dir="$PWD/$dir" ;; esac
build_dir=$(build_folder)
cd "$repo"
bin="$build_dir/trainbench"
[ -x "$bin" ] || { echo "bench_ckpt_stall: $bin not built; run scripts/build.sh" >&2; exit 3; }
mkdir -p "$dir/results" 2>/dev/null || { echo "bench_ckpt_stall: --dir $dir: cannot make $dir/results there" >&2; exit 2; }

# Steps of ~1 s on two cores; a checkpoint every 6 steps leaves the async
# writer time to finish before the next one is due (when_busy would count it).
common=(run gpt2-124m --steps 20 --set model.n_layers="$layers" --set model.seq_len=64
        --set train.micro_batch=1 --set train.warmup_steps=2 --set data.source=synthetic
        --set checkpoint.every_steps=6 --set checkpoint.keep=1 --set report.progress_every=0)
for repeat in $(seq 1 "$repeats"); do
  for mode in true false; do
    out="$dir/results/async-$mode-$repeat.json"
    rm -rf "$dir/ckpt-$mode"
    echo "bench_ckpt_stall: repeat $repeat, checkpoint.async=$mode" >&2
    "$bin" "${common[@]}" --set checkpoint.async=$mode --set checkpoint.dir="$dir/ckpt-$mode" --out "$out" >/dev/null
  done
done
rm -rf "$dir/ckpt-true" "$dir/ckpt-false"

python3 - "$dir/results" "$repeats" <<'EOF'
import json, statistics, sys
results, repeats = sys.argv[1], int(sys.argv[2])
rows = {}
for mode in ("true", "false"):
    stalls, persists, snapshots, bytes_, loop_stall, wall = [], [], [], 0, [], []
    for r in range(1, repeats + 1):
        result = json.load(open(f"{results}/async-{mode}-{r}.json"))
        for c in result["checkpoints"]:
            if c["status"] != "committed":
                continue
            stalls.append(c["stall_s"]); persists.append(c["persist_s"]); snapshots.append(c["snapshot_s"])
            bytes_ = c["bytes"]
        loop_stall.append(sum(s["ckpt_stall_s"] for s in result["steps"]))
        wall.append(sum(s["step_s"] for s in result["steps"]) + result["summary"]["storage_write"]["drain_s"])
    rows[mode] = dict(stall=statistics.median(stalls), persist=statistics.median(persists),
                      snapshot=statistics.median(snapshots), n=len(stalls), bytes=bytes_,
                      loop_stall=statistics.median(loop_stall), wall=statistics.median(wall))
print(f"checkpoint {rows['true']['bytes'] / 1e9:.2f} GB; {rows['true']['n']} async and {rows['false']['n']} sync checkpoints over {repeats} repeat(s)")
print(f"{'mode':<7}{'stall/ckpt ms':>14}{'persist s':>11}{'snapshot s':>12}{'run ckpt_stall s':>18}{'run wall s':>12}")
for mode, name in (("true", "async"), ("false", "sync")):
    r = rows[mode]
    print(f"{name:<7}{1e3 * r['stall']:>14.2f}{r['persist']:>11.3f}{r['snapshot']:>12.3f}{r['loop_stall']:>18.3f}{r['wall']:>12.2f}")
print(f"async stall per checkpoint / sync = {rows['true']['stall'] / rows['false']['stall']:.4f}")
EOF
