#!/usr/bin/env bash
# The main job on the embedded default: installs what is missing, builds
# (Release) and runs `trainbench run` — configs/tiny.yaml on a machine without
# a GPU, configs/gpt2-124m.yaml where one is visible. Arguments are passed to
# `trainbench run` (the build folder: $TRAINBENCH_BUILD_DIR, relative to the
# source tree, else build/, as scripts/build.sh takes it), e.g.
#   scripts/run.sh cpu-small --steps 10 --out out/cpu-small.json
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh
mkdir -p out
if [ $# -eq 0 ]; then
  set -- --out out/trainbench-result.json
fi
exec "${TRAINBENCH_BUILD_DIR:-build}/trainbench" run "$@"
