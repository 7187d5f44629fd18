# Sourced by the scripts under scripts/: argument checks they share.

# need OPTION ARGC, in a `while [ $# -gt 0 ]; case "$1"` loop: an option
# given last, without its value, is named in one line, exit 2 (the usage
# alone left the reader to guess which option it was).
need() {
  [ "$2" -ge 2 ] || { echo "${me:-$(basename "$0" .sh)}: $1 needs a value" >&2; exit 2; }
}
