#!/usr/bin/env bash
# The main job on the embedded default: installs what is missing, builds
# (Release) and runs `trainbench run` — configs/tiny.yaml on a machine without
# a GPU, configs/gpt2-124m.yaml where one is visible. Arguments are passed to
# `trainbench run` (the build folder: $TRAINBENCH_BUILD_DIR, relative to the
# source tree, else build/, as scripts/build.sh takes it), e.g.
#   scripts/run.sh cpu-small --steps 10 --out out/cpu-small.json
# Paths among the arguments (a config file, --out, --resume) are the
# caller's, as for every other script: the run starts in the caller's folder.
# Without arguments the result goes to out/trainbench-result.json in the
# source tree.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
(cd "$repo" && bash scripts/setup.sh && bash scripts/build.sh)
build_dir=${TRAINBENCH_BUILD_DIR:-build}
case "$build_dir" in /*) ;; *) build_dir="$repo/$build_dir" ;; esac
if [ $# -eq 0 ]; then
  mkdir -p "$repo/out"
  set -- --out "$repo/out/trainbench-result.json"
fi
exec "$build_dir/trainbench" run "$@"
