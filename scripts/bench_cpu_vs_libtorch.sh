#!/usr/bin/env bash
# trainbench's CPU engine against the libtorch baseline (tests/reference/
# torch_train_bench: same model, weights, tokens and AdamW, written as a
# PyTorch user would) on the same configs and thread count.
#
#   scripts/bench_cpu_vs_libtorch.sh [--reps N] [--threads N] [--steps N] [CONFIG...]
#
# CONFIG: a YAML file or preset name (default: tiny cpu-small). Each rep runs
# trainbench then libtorch, alternating, so drift on a shared machine hits both
# alike. Prints, per config, the median tokens/s of each, their ratio, every
# run's figure, and both final losses (equal when both trained the same model).
# TRAINBENCH_BUILD_DIR, else BUILD_DIR (default: build, in the source tree)
# selects the build folder; a relative CONFIG file or build folder is taken
# from the current folder.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
. "$repo/scripts/lib/common.sh"  # need, build_folder, print_usage

usage() {
  echo "usage: scripts/bench_cpu_vs_libtorch.sh [--reps N] [--threads N] [--steps N] [CONFIG...]" >&2
  exit 2
}

reps=3
threads=$(nproc)
steps=""
configs=()
while [ $# -gt 0 ]; do
  case "$1" in
    --reps) need "$1" $#; reps=$2; shift 2 ;;
    --threads) need "$1" $#; threads=$2; shift 2 ;;
    --steps) need "$1" $#; steps=$2; shift 2 ;;
    -h|--help) print_usage; exit 0 ;;
    -*) echo "bench_cpu_vs_libtorch: unknown option $1" >&2; usage ;;
    *) configs+=("$1"); shift ;;
  esac
done
[ ${#configs[@]} -gt 0 ] || configs=(tiny cpu-small)
for number in "$reps" "$threads" ${steps:+"$steps"}; do
  [[ "$number" =~ ^[0-9]+$ ]] || { echo "bench_cpu_vs_libtorch: '$number' is not a count" >&2; usage; }
done
[ "$reps" -ge 1 ] || { echo "bench_cpu_vs_libtorch: --reps must be at least 1" >&2; exit 2; }

# Paths given are the caller's (the script runs in the source tree): a config
# file is made absolute, anything else is a preset name and goes as it is; the
# tables name each as it was given.
labels=("${configs[@]}")
for i in "${!configs[@]}"; do
  config=${configs[$i]}
  if [ -f "$config" ]; then configs[i]=$(cd "$(dirname "$config")" && pwd)/$(basename "$config"); fi
done
build_dir=$(build_folder)
cd "$repo"
if [ ! -f "$build_dir/CMakeCache.txt" ]; then
  generator=()
  command -v ninja >/dev/null && generator=(-G Ninja)
  cmake -S . -B "$build_dir" "${generator[@]}" >/dev/null
fi
# (Captured first: grep -q exiting early would fail the pipe under pipefail.)
targets=$(cmake --build "$build_dir" --target help)
if ! grep -Eq '(^|\.\.\. )torch_train_bench(:|$)' <<<"$targets"; then
  echo "bench_cpu_vs_libtorch: no torch_train_bench target: libtorch not found: run scripts/setup.sh" >&2
  exit 3
fi
# Incremental: a no-op when both binaries are up to date.
cmake --build "$build_dir" --target trainbench torch_train_bench >/dev/null

trainbench_bin=$build_dir/trainbench
torch_bin=$build_dir/tests/reference/torch_train_bench
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
results=$work/results.tsv   # config, tool, rep, tokens_per_s, loss_last
step_args=()
[ -n "$steps" ] && step_args=(--steps "$steps")

# Runs one command, keeps its output in a log shown only if it fails.
run_logged() {
  local log=$1
  shift
  if ! "$@" >"$log" 2>&1; then
    echo "bench_cpu_vs_libtorch: failed: $*" >&2
    tail -n 20 "$log" >&2
    exit 1
  fi
}

for i in "${!configs[@]}"; do
  config=${configs[$i]}
  label=${labels[$i]}
  for rep in $(seq 1 "$reps"); do
    echo "[$label] rep $rep/$reps: trainbench, libtorch ($threads threads)" >&2

    run_logged "$work/trainbench.log" "$trainbench_bin" run "$config" \
      --set "train.threads=$threads" "${step_args[@]}" --out "$work/trainbench.json"
    python3 - "$work/trainbench.json" "$label" "$rep" >>"$results" <<'EOF'
import json, sys
summary = json.load(open(sys.argv[1]))["summary"]
print(sys.argv[2], "trainbench", sys.argv[3], summary["tokens_per_s"], summary["loss_last"], sep="\t")
EOF

    run_logged "$work/torch.log" "$torch_bin" "$config" --threads "$threads" "${step_args[@]}"
    python3 - "$work/torch.log" "$label" "$rep" >>"$results" <<'EOF'
import json, sys
# The result is the one JSON line on stdout; stderr only carries a banner.
line = next(l for l in reversed(open(sys.argv[1]).read().splitlines()) if l.startswith("{"))
result = json.loads(line)
print(sys.argv[2], "libtorch", sys.argv[3], result["tokens_per_s"], result["loss_last"], sep="\t")
EOF
  done
done

python3 - "$results" "$threads" <<'EOF'
import statistics, sys
from collections import defaultdict

runs = defaultdict(list)   # (config, tool) -> [tokens/s, ...] in rep order
loss = {}                  # (config, tool) -> loss_last of the last rep
configs = []
for line in open(sys.argv[1]):
    config, tool, _rep, tokens_per_s, loss_last = line.rstrip("\n").split("\t")
    if config not in configs:
        configs.append(config)
    runs[(config, tool)].append(float(tokens_per_s))
    loss[(config, tool)] = float(loss_last)

def figure(tokens_per_s):
    return f"{tokens_per_s:,.0f}"

header = ["config", "threads", "trainbench tok/s", "libtorch tok/s", "ratio",
          "trainbench runs", "libtorch runs", "loss_last trainbench/libtorch"]
rows = []
for config in configs:
    ours, theirs = runs[(config, "trainbench")], runs[(config, "libtorch")]
    ours_median, theirs_median = statistics.median(ours), statistics.median(theirs)
    rows.append([config, sys.argv[2], figure(ours_median), figure(theirs_median),
                 f"{ours_median / theirs_median:.2f}x",
                 " ".join(figure(x) for x in ours), " ".join(figure(x) for x in theirs),
                 f"{loss[(config, 'trainbench')]:.4f}/{loss[(config, 'libtorch')]:.4f}"])
widths = [max(len(r[i]) for r in [header] + rows) for i in range(len(header))]
for r in [header] + rows:
    print("  ".join(cell.ljust(w) for cell, w in zip(r, widths)).rstrip())
print("tokens/s: median over reps; ratio = trainbench / libtorch (> 1: trainbench is faster)")
EOF
