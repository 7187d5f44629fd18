# Sourced by the scripts under scripts/: what they share.

# need OPTION ARGC [VALUE], in a `while [ $# -gt 0 ]; case "$1"` loop: an
# option given last, without its value, is named in one line, exit 2 (the
# usage alone left the reader to guess which option it was). With VALUE
# ("${2-}"), also an empty one or one with a line break, for an option where
# neither can mean anything ('--steps ""' ran the default step count,
# '--ranks $'1\n2'' the first line's counts alone).
need() {
  [ "$2" -ge 2 ] || { echo "${me:-$(basename "$0" .sh)}: $1 needs a value" >&2; exit 2; }
  [ $# -lt 3 ] || [ -n "$3" ] || { echo "${me:-$(basename "$0" .sh)}: $1 '': an empty value" >&2; exit 2; }
  case "${3-}" in *$'\n'*) echo "${me:-$(basename "$0" .sh)}: $1: a value with a line break" >&2; exit 2 ;; esac
}

# build_folder: the build the scripts run (absolute), decided before any cd:
# $TRAINBENCH_BUILD_DIR, relative to the source tree as scripts/build.sh and
# scripts/test.sh take it; else $BUILD_DIR, relative to the caller's folder;
# else the source tree's build/. ($repo: the source tree.) An absolute
# TRAINBENCH_BUILD_DIR was put under the source tree by scale.sh and
# compare_finetune.sh, and the bench scripts ignored it.
build_folder() {
  local dir
  if [ -n "${TRAINBENCH_BUILD_DIR:-}" ]; then
    dir=$TRAINBENCH_BUILD_DIR
    case "$dir" in /*) ;; *) dir="$repo/$dir" ;; esac
  elif [ -n "${BUILD_DIR:-}" ]; then
    dir=$BUILD_DIR
    case "$dir" in /*) ;; *) dir="$PWD/$dir" ;; esac
  else
    dir="$repo/build"
  fi
  echo "$dir"
}

# absolute_path PATH: PATH with a leading ~/ as the home folder (as
# trainbench reads --set checkpoint.dir=~/x, one word that no shell expands:
# it became $PWD/~/x) and made absolute against $PWD; "" stays "".
absolute_path() {
  local path=$1
  case "$path" in "~/"*) path="$HOME/${path#"~/"}" ;; esac
  case "$path" in ""|/*) ;; *) path="$PWD/$path" ;; esac
  printf '%s' "$path"
}

# plan_or_die BINARY STEPS ARGS...: `BINARY plan ARGS` (with --set
# train.steps=STEPS after them where STEPS is given), which reads the config, --steps
# and --set's as `run` does and allocates nothing: a bad key or a --steps
# within the warm-up is met before anything runs, not at the first run. Its
# standard output goes into $plan_stdout. A refusal ends the script (the
# caller's die) with the plan's line and exit code, --steps named as typed.
plan_stdout=""
plan_or_die() {
  local binary=$1 steps=$2 code=0 error out
  shift 2
  out=$(mktemp)
  # --steps after the caller's --set's: as `run --steps N` overrides --set
  # train.steps (the check took the --set's and refused what would run).
  error=$("$binary" plan "$@" ${steps:+--set train.steps=$steps} 2>&1 > "$out") || code=$?
  plan_stdout=$(cat "$out")
  rm -f "$out"
  if [ "$code" != 0 ]; then
    error=${error#trainbench: }
    if [ -n "$steps" ]; then error=${error//--set train.steps=$steps/--steps $steps}; fi
    die "$error" "$code"
  fi
}

# print_usage: the script's --help, its header comment (the lines after the
# #! line up to the first that is not a comment) without the leading "# ".
print_usage() {
  awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"
}

# whole_number_settings VARIABLE...: each one set in the environment is a
# whole number from 1 (build and test job counts), or the caller's die with
# the variable named, before anything is built.
whole_number_settings() {
  local name value
  for name in "$@"; do
    value=${!name:-}
    [ -z "$value" ] || [[ "$value" =~ ^[1-9][0-9]{0,3}$ ]] || die "$name='$value': expected a whole number from 1"
  done
}

# instrumented_build_folder FOLDER CACHE_ENTRY WHAT VARIABLE: FOLDER (made
# absolute against $repo) for an instrumented build, whose CMakeCache.txt,
# where there is one, must hold the line CACHE_ENTRY. A folder that holds
# another build (build/, say) is refused, not turned into an instrumented one
# (WHAT names the kind; VARIABLE, where to name another folder); configuring
# again an instrumented one rebuilds nothing.
instrumented_build_folder() {
  local folder=$1
  case "$folder" in /*) ;; *) folder="$repo/$folder" ;; esac
  if [ -f "$folder/CMakeCache.txt" ] && ! grep -qx "$2" "$folder/CMakeCache.txt"; then
    die "$folder holds a build without $3: name a folder of its own ($4)"
  fi
  echo "$folder"
}

# build_instrumented FOLDER CMAKE_OPTION: configures FOLDER (made if need be)
# as the instrumented scripts build, Ninja, RelWithDebInfo, the CUDA engine
# off (not instrumented; no GPU runs it) and the tests on, with CMAKE_OPTION
# (-DTRAINBENCH_SANITIZE=address, -DTRAINBENCH_COVERAGE=ON), and builds
# everything with TRAINBENCH_BUILD_JOBS jobs (default: the CPUs). A failed
# configure shows its log and ends the script (exit 1).
build_instrumented() {
  mkdir -p "$1"
  cmake -S "$repo" -B "$1" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo "$2" -DTRAINBENCH_CUDA=OFF \
    -DTRAINBENCH_BUILD_TESTS=ON > "$1/configure.log" 2>&1 ||
    { cat "$1/configure.log"; echo "$me: configure failed (log above)" >&2; exit 1; }
  cmake --build "$1" -j "${TRAINBENCH_BUILD_JOBS:-$(nproc)}"
}
