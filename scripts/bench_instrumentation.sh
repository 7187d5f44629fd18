#!/usr/bin/env bash
# What trainbench's own timing costs: the same run with every per-step timer
# (report.instrument=true, the default) and without (false: only the wall
# time of the measured steps), alternating, side by side in one run; the
# median of each side's wall-time tokens/s and the overhead between them.
#
#   scripts/bench_instrumentation.sh [--config tiny] [--steps 200] [--repeats 5] [--set k=v]...
#
# Tokens come from memory (data.source=synthetic) and checkpoints are off, so
# the comparison is the step loop itself. BUILD_DIR (default: build, in the
# source tree); a relative --config file or BUILD_DIR is taken from the
# current folder. Exit codes: 2 bad usage, 3 not built, else the failed run's.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
. "$repo/scripts/lib/common.sh"  # need, build_folder

usage() {
  echo "usage: scripts/bench_instrumentation.sh [--config NAME] [--steps N] [--repeats N] [--set KEY=VALUE]..." >&2
  exit 2
}
die() { echo "bench_instrumentation: $1" >&2; exit 2; }
config=tiny
steps=200
repeats=5
extra=()
while [ $# -gt 0 ]; do
  case "$1" in
    --config) need "$1" $#; config=$2; shift 2 ;;
    --steps) need "$1" $#; steps=$2; shift 2 ;;
    --repeats) need "$1" $#; repeats=$2; shift 2 ;;
    --set) need "$1" $#; extra+=(--set "$2"); shift 2 ;;
    -h|--help) usage ;;
    *) echo "bench_instrumentation: unknown argument '$1'" >&2; usage ;;
  esac
done
# Checked before any run (the summary read --repeats 0 as a traceback).
[[ "$steps" =~ ^[1-9][0-9]{0,8}$ ]] || die "--steps '$steps': expected a positive whole number"
[[ "$repeats" =~ ^[1-9][0-9]{0,2}$ ]] || die "--repeats '$repeats': expected a whole number from 1 to 999"
[ -n "$config" ] || die "--config: empty"
# Paths given are the caller's (the runs start in the source tree): a config
# file is made absolute, anything else is a preset name and goes as it is.
if [ -f "$config" ]; then config=$(cd "$(dirname "$config")" && pwd)/$(basename "$config"); fi
build_dir=$(build_folder)
cd "$repo"
bin="$build_dir/trainbench"
[ -x "$bin" ] || { echo "bench_instrumentation: $bin not built; run scripts/build.sh" >&2; exit 3; }
out=$(mktemp -d /tmp/trainbench-bench-instrument-XXXXXX)
trap 'rm -rf "$out"' EXIT

for repeat in $(seq 1 "$repeats"); do
  for instrument in true false; do
    "$bin" run "$config" --steps "$steps" --set train.warmup_steps=10 --set data.source=synthetic \
      --set data.shards= --set checkpoint.every_steps=0 --set report.progress_every=0 --set report.instrument=$instrument \
      ${extra[@]+"${extra[@]}"} --out "$out/$instrument-$repeat.json" >/dev/null
  done
done

python3 - "$out" "$repeats" "$config" "$steps" <<'PY'
import json, statistics, sys
out, repeats, config, steps = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
rates = {}
for side in ("true", "false"):
    rates[side] = [json.load(open(f"{out}/{side}-{r}.json"))["summary"]["wall_tokens_per_s"] for r in range(1, repeats + 1)]
on, off = statistics.median(rates["true"]), statistics.median(rates["false"])
print(f"{config}, {steps} steps (10 warm-up), {repeats} alternating repeats; wall-time tokens/s")
for side, name in (("true", "timed"), ("false", "untimed")):
    values = " ".join(f"{v:.0f}" for v in rates[side])
    print(f"  {name:<8} median {statistics.median(rates[side]):>12.0f}   ({values})")
# Each repeat ran both sides back to back: the pair's ratio cancels the
# machine's drift between repeats better than two independent medians.
pairs = [1.0 - t / u for t, u in zip(rates["true"], rates["false"])]
print(f"  instrumentation overhead = {100.0 * (off - on) / off:+.2f}% (medians), "
      f"{100.0 * statistics.median(pairs):+.2f}% (median of the {repeats} back-to-back pairs, "
      f"range {100.0 * min(pairs):+.1f}% .. {100.0 * max(pairs):+.1f}%)")
PY
