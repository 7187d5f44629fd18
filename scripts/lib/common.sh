# Sourced by the scripts under scripts/: what they share.

# need OPTION ARGC, in a `while [ $# -gt 0 ]; case "$1"` loop: an option
# given last, without its value, is named in one line, exit 2 (the usage
# alone left the reader to guess which option it was).
need() {
  [ "$2" -ge 2 ] || { echo "${me:-$(basename "$0" .sh)}: $1 needs a value" >&2; exit 2; }
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
