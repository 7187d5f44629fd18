#!/usr/bin/env bash
# What trainbench's own timing costs: the same run with every per-step timer
# (report.instrument=true, the default) and without (false: only the wall
# time of the measured steps), alternating, side by side in one run; the
# median of each side's wall-time tokens/s and the overhead between them.
#
#   scripts/bench_instrumentation.sh [--config tiny] [--steps 200] [--repeats 5] [--set k=v]...
#
# Tokens come from memory (data.source=synthetic) and checkpoints are off, so
# the comparison is the step loop itself; 10 warm-up steps unless a --set
# train.warmup_steps says otherwise (the table says the runs' own). The
# script sets report.instrument on each side: a --set of it is refused.
# BUILD_DIR (default: build, in the source tree); a relative --config file or
# BUILD_DIR is taken from the current folder. Exit codes: 2 bad usage, 3 not
# built, else the failed run's.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
. "$repo/scripts/lib/common.sh"  # need, build_folder, print_usage

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
    --set)
      need "$1" $#
      # The one key the two sides differ in, set by the script on each: a
      # --set of it, given after, made both sides timed (or both untimed)
      # while the table still said "timed", "untimed" and an overhead.
      key=${2%%=*}
      key=${key#"${key%%[![:space:]]*}"}
      key=${key%"${key##*[![:space:]]}"}
      [ "$key" != report.instrument ] ||
        die "--set $2: the script sets report.instrument itself (true on one side, false on the other); leave it out"
      extra+=(--set "$2"); shift 2 ;;
    -h|--help) print_usage; exit 0 ;;
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

# A --set train.warmup_steps, after the script's 10, wins: a longer warm-up
# (a GPU's) or fewer --steps are the caller's to choose; the table says the
# warm-up the runs had, from their results, not the 10 given here.
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
summaries = {side: [json.load(open(f"{out}/{side}-{r}.json"))["summary"] for r in range(1, repeats + 1)]
             for side in ("true", "false")}
rates = {side: [s["wall_tokens_per_s"] for s in summaries[side]] for side in summaries}
# The warm-up the runs had (a --set train.warmup_steps wins over the script's 10).
warmups = sorted({s["warmup_steps"] for side in summaries for s in summaries[side] if "warmup_steps" in s})
warmup = " or ".join(str(w) for w in warmups) + " warm-up" if warmups else "warm-up not recorded"
on, off = statistics.median(rates["true"]), statistics.median(rates["false"])
print(f"{config}, {steps} steps ({warmup}), {repeats} alternating repeats; wall-time tokens/s")
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
