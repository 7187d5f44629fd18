#!/usr/bin/env bash
# A scaling sweep: the same config at 1, 2, 4 ... ranks, one result JSON per
# world size, then scripts/report.py over them (tokens/s against the ideal
# line, scaling efficiency, stall shares, per-rank step-time spread).
#
#   scripts/scale.sh [--config CONFIG] [--ranks 1,2,4] [--steps N] [--set key=value]... [--ceilings]
#                    [--out DIR] [--hostfile FILE] [--mpirun-args "ARGS"] [--ckpt-dir DIR]
#                    [--binary PATH] [--no-report]
#   scripts/scale.sh --slurm [--nodes 1,2,4] [--config CONFIG] [--steps N] [--set key=value]... [--ceilings]
#                    [--out DIR] [--ckpt-dir DIR] [--sbatch-args "ARGS"] [--binary PATH]
#
# Locally every world size runs under `mpirun -np N` (the 1-rank point too, so
# every point goes through the same launcher); --hostfile and --mpirun-args go
# to mpirun as they are, for a sweep over several hosts. Results land in
# DIR/ranks-<N>.json with the console output in DIR/ranks-<N>.log; the report
# in DIR/report.md and DIR/*.png. --ceilings makes every run measure the
# isolation ceilings first (`trainbench run --ceilings`), which the report sets
# beside the achieved tokens/s.
#
# With --slurm, scripts/slurm/trainbench.sbatch is submitted once per node
# count (sbatch --nodes N; 8 ranks per node, one per GPU) and the script
# returns at once: the jobs write DIR/nodes-<N>.json; run scripts/report.py DIR
# when they have finished.
#
# --ckpt-dir DIR (or $CKPT_DIR, or --set checkpoint.dir=DIR, which is read as
# --ckpt-dir DIR) keeps each world size's checkpoints in their own folder
# under DIR (ranks-<N>-<sweep>, the sweep's UTC start and this script's pid,
# so that a sweep repeated with the same DIR gets fresh folders as trainbench
# requires; nodes-<N>-<job> under Slurm); without it
# a run checkpoints to a temporary folder on one host, which serves one machine
# only (trainbench refuses it for ranks on several hosts, exit 2). Every rank of the CPU engine uses train.threads threads (0 = all of the
# machine's): on one machine, --set train.threads=<cores / ranks> keeps the
# ranks from competing for cores.
#
# The binary: --binary, else $TRAINBENCH_BINARY, else trainbench in the build
# folder: $TRAINBENCH_BUILD_DIR (relative to the source tree), else $BUILD_DIR
# (relative to the current folder), else build/ (scripts/lib/common.sh).
# mpirun: $MPIRUN, else mpirun on PATH. Exit codes: 2 bad usage, 3 a missing
# tool (mpirun, sbatch, python3), 128+N on signal N (130: Ctrl-C), else the
# exit code of the failed run. The sweep stops at a failed or interrupted run;
# its log is DIR/ranks-<N>.failed.log, the result it may still have written (a
# failed check, a failed checkpoint) DIR/ranks-<N>.failed.json. An earlier
# sweep's DIR/ranks-<N>.json and .log are all back in place, and the points
# this one had finished are in DIR/unfinished-<sweep id>/; the partial result
# of a run that an abort or a signal ended (trainbench's ranks-<N>.aborted.json,
# the steps it completed) goes there too, earlier sweep or not.
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
. "$repo/scripts/lib/common.sh"  # need, build_folder, plan_or_die, absolute_path, print_usage
. "$repo/scripts/lib/launch.sh"  # hostfile_hosts, mpi_launch_setup, mpirun_line, start_run, wait_run, pass_signal
me=scale.sh

usage() {
  cat >&2 <<'EOF2'
usage: scripts/scale.sh [--config CONFIG] [--ranks 1,2,4] [--steps N] [--set key=value]... [--ceilings]
                        [--out DIR] [--hostfile FILE] [--mpirun-args "ARGS"] [--ckpt-dir DIR]
                        [--binary PATH] [--no-report]
       scripts/scale.sh --slurm [--nodes 1,2,4] [--config CONFIG] [--steps N] [--set key=value]... [--ceilings]
                        [--out DIR] [--ckpt-dir DIR] [--sbatch-args "ARGS"] [--binary PATH]
EOF2
  exit 2
}
die() { echo "$me: $1" >&2; exit "${2:-2}"; }

config=""
ranks_list="1,2,4"
nodes_list="1,2,4"
steps=""
sets=()
out=""
hostfile=""
mpirun_args=""
sbatch_args=""
binary=${TRAINBENCH_BINARY:-}
ckpt_dir=${CKPT_DIR:-}
ckpt_from=${CKPT_DIR:+\$CKPT_DIR}
set_ckpt_dir=""
report=1
ranks_given=0
nodes_given=0
sbatch_given=0
slurm=0
ceilings=0
while [ $# -gt 0 ]; do
  case "$1" in
    --config) need "$1" $# "${2-}"; config=$2; shift 2 ;;
    --ranks) need "$1" $# "${2-}"; ranks_list=$2; ranks_given=1; shift 2 ;;
    --nodes) need "$1" $# "${2-}"; nodes_list=$2; nodes_given=1; shift 2 ;;
    --steps) need "$1" $# "${2-}"; steps=$2; shift 2 ;;
    --set)
      need "$1" $#
      # checkpoint.dir=D is --ckpt-dir D: a folder per world size under D (a
      # fresh run refuses one that holds another run's checkpoints); an empty
      # one (a temporary folder per run) goes to every run as it is.
      case "$2" in checkpoint.dir=?*) set_ckpt_dir=${2#checkpoint.dir=} ;; *) sets+=(--set "$2") ;; esac
      shift 2 ;;
    --out) need "$1" $# "${2-}"; out=$2; shift 2 ;;
    --hostfile) need "$1" $# "${2-}"; hostfile=$2; shift 2 ;;
    --mpirun-args) need "$1" $#; mpirun_args=$2; shift 2 ;;
    --sbatch-args) need "$1" $#; sbatch_args=$2; sbatch_given=1; shift 2 ;;
    --ckpt-dir) need "$1" $# "${2-}"; ckpt_dir=$2; ckpt_from=--ckpt-dir; shift 2 ;;
    --binary) need "$1" $# "${2-}"; binary=$2; shift 2 ;;
    --no-report) report=0; shift ;;
    --ceilings) ceilings=1; shift ;;
    --slurm) slurm=1; shift ;;
    -h|--help) print_usage; exit 0 ;;
    *) echo "$me: unknown argument '$1'" >&2; usage ;;
  esac
done

# "1,2,4" -> counts=(1 2 4), each a positive integer, ascending and distinct.
counts=()
parse_counts() {
  local flag=$1 list=$2 previous=0 n
  IFS=, read -r -a counts <<< "$list"
  [ ${#counts[@]} -gt 0 ] || die "$flag '$list': expected a comma-separated list like 1,2,4"
  # read drops a trailing empty item ("1,2,"): every item is checked here.
  case ",$list," in *,,*) die "$flag '$list': an empty item; expected a comma-separated list like 1,2,4" ;; esac
  for n in "${counts[@]}"; do
    # Bounded before bash compares it: 99999999999999999999 was an arithmetic error.
    if ! [[ "$n" =~ ^[1-9][0-9]{0,6}$ ]] || [ "$n" -gt 1048576 ]; then
      die "$flag '$list': '$n' is not an integer from 1 to 1048576"
    fi
    [ "$n" -gt "$previous" ] || die "$flag '$list': counts must be ascending and distinct"
    previous=$n
  done
}

if [ -n "$steps" ] && ! [[ "$steps" =~ ^[1-9][0-9]*$ ]]; then
  die "--steps '$steps': expected a positive integer"
fi
# A config file is made absolute (Slurm jobs and remote ranks start elsewhere);
# anything else is an embedded preset name and goes as it is.
if [ -f "$config" ]; then config=$(cd "$(dirname "$config")" && pwd)/$(basename "$config"); fi
# What every `trainbench run` gets after the config (the sbatch script adds the config itself).
run_args=()
if [ -n "$steps" ]; then run_args+=(--steps "$steps"); fi
if [ "$ceilings" = 1 ]; then run_args+=(--ceilings); fi
run_args+=(${sets[@]+"${sets[@]}"})

if [ -z "$binary" ]; then binary="$(build_folder)/trainbench"; fi
case "$binary" in /*) ;; *) binary="$PWD/$binary" ;; esac

if [ -n "$set_ckpt_dir" ]; then
  if [ -n "$ckpt_dir" ] && [ "$ckpt_dir" != "$set_ckpt_dir" ]; then
    die "--set checkpoint.dir=$set_ckpt_dir and $ckpt_from $ckpt_dir name two checkpoint folders: give one (--ckpt-dir DIR)"
  fi
  ckpt_dir=$set_ckpt_dir
fi
ckpt_dir=$(absolute_path "$ckpt_dir")
# A file there failed the first run, after it had started (its log's tail, exit 2).
[ -z "$ckpt_dir" ] || [ ! -e "$ckpt_dir" ] || [ -d "$ckpt_dir" ] || die "$ckpt_from $ckpt_dir: not a folder"

# After every check, so a bad command line leaves nothing behind.
make_out_dir() {
  if [ -z "$out" ]; then out="$repo/out/scale-$(date +%Y%m%d-%H%M%S)"; fi
  mkdir -p "$out" 2>/dev/null || die "--out $out: cannot create the folder"
  out=$(cd "$out" && pwd)
}

# Whether the runs checkpoint (a run on several hosts needs its checkpoints
# on storage every host sees): a --set says so, or check_config finds it in
# the config itself.
checkpoints_off=0
if [[ " ${sets[*]-} " == *" checkpoint.every_steps=0 "* ]]; then checkpoints_off=1; fi

# The config, --steps and --set, read once here as `run` reads them
# (`trainbench plan` loads the config and allocates nothing): a bad key or a
# --steps within the warm-up was met at the first run, once the folder was
# made, as mpirun's 16 lines (under --slurm: by every job, once it had its
# nodes).
check_config() {
  plan_or_die "$binary" "$steps" --json ${config:+"$config"} ${sets[@]+"${sets[@]}"}
  # The config's final word (a later --set wins over an earlier one).
  if grep -Eq '"every_steps": 0,?$' <<< "$plan_stdout"; then checkpoints_off=1
  elif grep -Eq '"every_steps": [0-9]+' <<< "$plan_stdout"; then checkpoints_off=0; fi
}

if [ "$slurm" = 1 ]; then
  [ -n "$hostfile" ] && die "--hostfile is for mpirun; under --slurm the allocation decides the hosts"
  [ -n "$mpirun_args" ] && die "--mpirun-args is for mpirun; under --slurm use --sbatch-args"
  [ "$ranks_given" = 1 ] && die "--ranks is for the mpirun sweep; under --slurm give --nodes"
  command -v sbatch > /dev/null || die "sbatch not found: --slurm submits scripts/slurm/trainbench.sbatch from a Slurm login node (without --slurm the sweep runs here under mpirun)" 3
  parse_counts --nodes "$nodes_list"
  node_counts=("${counts[@]}")
  # Before anything is queued: a job that waited for its nodes only to be
  # refused cost the wait.
  if [ -x "$binary" ]; then
    check_config
  else
    echo "$me: note: $binary is not executable here; it must be on the compute nodes (the config is not checked before the jobs start)" >&2
  fi
  # Checkpoints of a multi-node run must be on storage every node sees, and
  # each job gets its own folder under it (the trainbench.sbatch convention).
  if [ "${node_counts[-1]}" -gt 1 ] && [ -z "$ckpt_dir" ] && [ "$checkpoints_off" = 0 ]; then
    die "--nodes $nodes_list: multi-node runs need checkpoint folders on storage every node sees: --ckpt-dir /shared/path (a subfolder per job), or --set checkpoint.every_steps=0"
  fi
  read -r -a extra_sbatch <<< "$sbatch_args"
  make_out_dir
  for n in "${node_counts[@]}"; do
    # An earlier sweep's result in this folder would be read by the report as
    # this job's should this one fail before writing its own: set aside.
    set_aside=0
    if [ -f "$out/nodes-$n.json" ]; then
      mv -f "$out/nodes-$n.json" "$out/nodes-$n.json.previous"
      set_aside=1
    fi
    submit_status=0
    job=$(CONFIG="$config" OUT="$out" CKPT_DIR="$ckpt_dir" TRAINBENCH_BINARY="$binary" \
          sbatch --parsable --export=ALL --nodes "$n" --job-name "trainbench-$n" \
                 --output "$out/nodes-$n-%j.log" ${extra_sbatch[@]+"${extra_sbatch[@]}"} \
                 "$repo/scripts/slurm/trainbench.sbatch" \
                 ${run_args[@]+"${run_args[@]}"}) || submit_status=$?
    if [ "$submit_status" != 0 ]; then
      # No job will write it: the earlier result goes back for the report.
      if [ "$set_aside" = 1 ]; then mv -f "$out/nodes-$n.json.previous" "$out/nodes-$n.json"; fi
      die "sbatch failed (exit $submit_status, its message above): the $n-node job was not submitted (any listed above were)" "$submit_status"
    fi
    if [ "$set_aside" = 1 ]; then echo "$me: the earlier $out/nodes-$n.json is now $out/nodes-$n.json.previous" >&2; fi
    echo "$me: submitted job ${job%%;*}: $n node(s) -> $out/nodes-$n.json (log $out/nodes-$n-${job%%;*}.log)"
  done
  echo "$me: when the jobs have finished: python3 $(printf %q "$repo/scripts/report.py") $(printf %q "$out")"
  exit 0
fi

# Options of the Slurm sweep are not silently dropped from the mpirun one.
[ "$nodes_given" = 1 ] && die "--nodes is for --slurm; the sweep here takes --ranks"
[ "$sbatch_given" = 1 ] && die "--sbatch-args is for --slurm; the sweep here takes --mpirun-args"
mpirun=${MPIRUN:-mpirun}
command -v "$mpirun" > /dev/null || die "$mpirun not found: install an MPI (scripts/setup.sh installs Open MPI) or set MPIRUN" 3
# A folder passes -x and -r: it ended in bash's and sed's words (exit 126, 4).
[ -f "$binary" ] && [ -x "$binary" ] || die "$binary: not built (scripts/build.sh), or pass --binary PATH" 3
[ -z "$hostfile" ] || { [ -f "$hostfile" ] && [ -r "$hostfile" ]; } || die "--hostfile $hostfile: not a file it can read"
# Ranks on several hosts need their checkpoints on storage every host sees:
# trainbench refuses its temporary folder there (exit 2), which a sweep met
# only at its first multi-host point. Said now, unless checkpoints are off.
check_config
if [ -n "$hostfile" ] && [ -z "$ckpt_dir" ] && [ "$checkpoints_off" = 0 ]; then
  hosts=$(hostfile_hosts "$hostfile")
  if [ "$hosts" -gt 1 ]; then die "--hostfile $hostfile names $hosts hosts: their checkpoints need storage every host sees: --ckpt-dir /shared/path (a subfolder per world size), or --set checkpoint.every_steps=0"; fi
fi
parse_counts --ranks "$ranks_list"
rank_counts=("${counts[@]}")
if [ "$report" = 1 ] && ! command -v python3 > /dev/null; then
  die "python3 not found: the report needs Python 3 with matplotlib (scripts/setup.sh), or pass --no-report" 3
fi
# Its plots need matplotlib: found missing after the whole sweep, it cost the report.
if [ "$report" = 1 ] && ! python3 -c 'import matplotlib' 2> /dev/null; then
  die "matplotlib is not installed: the report's plots need it (scripts/setup.sh installs it), or pass --no-report" 3
fi
make_out_dir

mpi_launch_setup "$mpirun" "$hostfile" "$mpirun_args"

echo "$me: ${#rank_counts[@]} world size(s) (${rank_counts[*]} ranks), $binary, results in $out"
sweep_id=$(date -u +%Y%m%dT%H%M%SZ)-$$
if [ -n "$ckpt_dir" ]; then echo "$me: checkpoints in $ckpt_dir/ranks-<N>-$sweep_id"; fi
# Ctrl-C (or a kill) during a run ends the sweep as a failed run does, said so.
# A signal to this script alone is passed on to the running point, whose
# partial result is then set aside as a group's Ctrl-C leaves it (pass_signal,
# scripts/lib/launch.sh); the witness tells the two apart. Before the lock
# below: the witness holds none of this script's descriptors.
interrupted=""
trap 'interrupted=INT; pass_signal' INT
trap 'interrupted=TERM; pass_signal' TERM
trap 'interrupted=HUP; pass_signal' HUP
start_signal_witness
# An earlier sweep in this folder (its ranks-N.json): the points this one
# finishes replace its figures one by one, set aside as .previous until the
# whole sweep has run. Should this one fail or be interrupted, every earlier
# figure goes back and this sweep's finished points move to
# unfinished-<sweep id>/, so that the folder (and report.py DIR) holds one
# sweep, never new figures beside old ones.
# One sweep at a time in a folder: a second one would take the first's
# points for a killed sweep's (below) and set them aside under it.
if command -v flock > /dev/null; then
  exec 9< "$out"  # the folder itself: no lock file left in it
  flock -n 9 || die "another scale.sh sweep is writing to $out: wait for it, or give another --out"
fi
# A sweep killed outright (SIGKILL, a lost session) ran no clean-up: the
# points it had started are in its record ($record: one rank count a line),
# the earlier sweep's files it replaced are *.previous, for no one to put
# back (the next sweep set its own .previous over them, and the folder kept
# two sweeps' figures). What the killed sweep made moves to
# unfinished-killed-<sweep id>/ and the earlier files go back, as
# compare_finetune.sh does. (A record-less .previous is a killed sweep of an
# older scale.sh: put back all the same.)
record="$out/.scale.sweep"
recovered=()
killed_made=""
set_aside_killed() {
  killed_made="$out/unfinished-killed-$sweep_id"
  mkdir -p "$killed_made" && mv -f "$1" "$killed_made/" ||
    die "cannot set aside $1, made by a sweep that was killed part-way" 3
}
if [ -f "$record" ]; then
  while read -r n; do
    case "$n" in ''|*[!0-9]*) continue ;; esac
    for f in "$out/ranks-$n.json" "$out/ranks-$n.log"; do
      if [ -e "$f" ]; then set_aside_killed "$f"; fi
    done
  done < "$record"
fi
for previous in "$out"/ranks-*.json.previous "$out"/ranks-*.log.previous; do
  [ -f "$previous" ] || continue
  current=${previous%.previous}
  if [ -e "$current" ]; then set_aside_killed "$current"; fi
  mv -f "$previous" "$current" || die "cannot put $previous back as $current" 3
  recovered+=("${current##*/}")
done
if [ -n "$killed_made" ] || [ "${#recovered[@]}" -gt 0 ]; then
  said="$me: a sweep in $out was killed part-way:"
  if [ "${#recovered[@]}" -gt 0 ]; then said+=" the earlier sweep's ${recovered[*]} are back;"; fi
  if [ -n "$killed_made" ]; then said+=" what it made is in $killed_made"; fi
  echo "$said" >&2
fi
# This sweep's record, until it ends (the EXIT trap; a SIGKILL leaves it).
: > "$record" || die "cannot write $record" 3
trap 'rm -f "$record"' EXIT
earlier_sweep=0
for earlier in "$out"/ranks-*.json; do
  case "$earlier" in *.failed.json | *.aborted.json) ;; *) if [ -f "$earlier" ]; then earlier_sweep=1; fi ;; esac
done
finished=()   # this sweep's points that ran
set_aside=()  # the points whose earlier files this sweep set aside as .previous
put_back_earlier_sweep() {
  local n moved=()
  if [ "$earlier_sweep" = 1 ] && [ "${#finished[@]}" -gt 0 ]; then
    if ! mkdir -p "$out/unfinished-$sweep_id" 2> /dev/null; then
      # Putting the earlier files back would overwrite this sweep's: both kept.
      echo "$me: cannot make $out/unfinished-$sweep_id: this sweep's finished point(s) (${finished[*]} ranks) stay in $out, the earlier sweep's files they replaced are its *.previous" >&2
      return 0
    fi
    for n in "${finished[@]}"; do
      if mv -f "$out/ranks-$n.json" "$out/ranks-$n.log" "$out/unfinished-$sweep_id/" 2> /dev/null; then moved+=("$n"); fi
    done
  fi
  for n in ${set_aside[@]+"${set_aside[@]}"}; do
    case " ${moved[*]-} " in *" $n "*) ;; *) continue ;; esac  # never over a result of this sweep still in place
    if [ -f "$out/ranks-$n.log.previous" ]; then mv -f "$out/ranks-$n.log.previous" "$out/ranks-$n.log"; fi
    if [ -f "$out/ranks-$n.json.previous" ]; then mv -f "$out/ranks-$n.json.previous" "$out/ranks-$n.json"; fi
  done
  if [ "${#moved[@]}" -gt 0 ]; then
    echo "$me: the earlier sweep's results are back in $out; this sweep's finished point(s) (${moved[*]} ranks) are in $out/unfinished-$sweep_id" >&2
  fi
}
for n in "${rank_counts[@]}"; do
  if [ -n "$interrupted" ]; then echo "$me: interrupted (SIG$interrupted)" >&2; break; fi
  mpirun_line "$n"
  cmd=("${launch[@]}" "$binary" run)
  if [ -n "$config" ]; then cmd+=("$config"); fi
  cmd+=(${run_args[@]+"${run_args[@]}"})
  # --ckpt-dir: one folder per world size under it (a checkpoint is tied to its world size).
  if [ -n "$ckpt_dir" ]; then cmd+=(--set "checkpoint.dir=$ckpt_dir/ranks-$n-$sweep_id"); fi
  cmd+=(--out "$out/ranks-$n.json")
  log="$out/ranks-$n.log"
  # An earlier sweep's result and its log are kept aside, not deleted, until
  # this run has replaced them: a failed rerun must not cost the figures it was
  # to repeat, nor the log that goes with them.
  echo "$n" >> "$record"
  if [ -f "$out/ranks-$n.json" ]; then mv -f "$out/ranks-$n.json" "$out/ranks-$n.json.previous"; set_aside+=("$n"); fi
  if [ -f "$log" ]; then mv -f "$log" "$log.previous"; set_aside+=("$n"); fi
  # An earlier run's partial result is kept aside through this run, then put
  # back: trainbench would write this run's over it, and one there after the
  # run is then this run's alone. (A killed sweep's .previous goes back above.)
  partial="$out/ranks-$n.aborted.json"
  if [ -f "$partial" ]; then mv -f "$partial" "$partial.previous"; fi
  printf '%q ' "${cmd[@]}" > "$log"
  printf '\n\n' >> "$log"
  started=$(date +%s)
  code=0
  # In the background, waited for: a signal is passed on to it (start_run).
  start_run "${cmd[@]}" >> "$log" 2>&1 < /dev/null || code=$?
  if [ -n "$run_pid" ]; then wait_run; code=$run_status; fi
  seconds=$(( $(date +%s) - started ))
  if [ -n "$interrupted" ] || [ "$code" != 0 ] || [ ! -s "$out/ranks-$n.json" ]; then
    # Putting the earlier files back is not to be cut short.
    trap '' INT TERM HUP
    mv -f "$log" "$out/ranks-$n.failed.log"
    if [ -n "$interrupted" ]; then
      echo "$me: $n rank(s) interrupted (SIG$interrupted, after ${seconds}s); the end of its log $out/ranks-$n.failed.log:" >&2
      case "$interrupted" in INT) code=130 ;; TERM) code=143 ;; *) code=129 ;; esac
    else
      echo "$me: $n rank(s) FAILED (exit $code, ${seconds}s); the end of its log $out/ranks-$n.failed.log:" >&2
    fi
    tail -n 15 "$out/ranks-$n.failed.log" | sed 's/^/  /' >&2
    # A failed run may still have written its result (a failed checkpoint
    # does, exit 3): kept beside, never in the sweep's place.
    if [ -s "$out/ranks-$n.json" ]; then
      mv -f "$out/ranks-$n.json" "$out/ranks-$n.failed.json"
      echo "$me: its result (the steps before it failed) is $out/ranks-$n.failed.json" >&2
    fi
    # A run that an abort or a signal ended leaves the steps it completed in
    # ranks-N.aborted.json: this sweep's unfinished work, set aside with its
    # finished points (left here, it stood unnamed beside the earlier sweep
    # put back below, and report.py DIR named it as a stray).
    if [ -f "$partial" ]; then
      if mkdir -p "$out/unfinished-$sweep_id" 2> /dev/null && mv -f "$partial" "$out/unfinished-$sweep_id/"; then
        echo "$me: its partial result (the steps it completed) is $out/unfinished-$sweep_id/ranks-$n.aborted.json" >&2
      else
        echo "$me: its partial result (the steps it completed) is $partial (cannot move it to $out/unfinished-$sweep_id)" >&2
      fi
    fi
    if [ -f "$partial.previous" ] && [ ! -e "$partial" ]; then mv -f "$partial.previous" "$partial"; fi
    if [ -f "$log.previous" ]; then mv -f "$log.previous" "$log"; fi
    if [ -f "$out/ranks-$n.json.previous" ]; then
      mv -f "$out/ranks-$n.json.previous" "$out/ranks-$n.json"
      echo "$me: the earlier $out/ranks-$n.json is kept" >&2
    fi
    put_back_earlier_sweep
    exit $(( code == 0 ? 1 : code ))
  fi
  finished+=("$n")
  if [ -f "$partial.previous" ]; then mv -f "$partial.previous" "$partial"; fi
  tokens=$(grep -m1 '^  tokens/s' "$log" | sed 's/^  tokens\/s *//' || true)
  echo "$me: $n rank(s): tokens/s ${tokens:-?} (${seconds}s, log $log)"
done

if [ -n "$interrupted" ]; then
  trap '' INT TERM HUP  # putting the earlier files back is not to be cut short
  put_back_earlier_sweep
  case "$interrupted" in INT) exit 130 ;; TERM) exit 143 ;; *) exit 129 ;; esac
fi
# The whole sweep ran: the earlier figures it replaced go.
for n in ${set_aside[@]+"${set_aside[@]}"}; do rm -f "$out/ranks-$n.json.previous" "$out/ranks-$n.log.previous"; done
trap - INT TERM HUP
# A signal that came while the files were settled: the sweep is whole, the
# report is what it stopped.
if [ -n "$interrupted" ]; then
  echo "$me: interrupted (SIG$interrupted) once every run had finished: their results are in $out, no report" >&2
  case "$interrupted" in INT) exit 130 ;; TERM) exit 143 ;; *) exit 129 ;; esac
fi
if [ "$report" = 1 ]; then
  # Every point the folder holds: a rerun of some of them keeps the others,
  # and a report of this sweep's alone took its smallest as the baseline
  # (a rerun of 2 ranks read "efficiency 1.000" beside a kept 1-rank point).
  points=()
  for f in "$out"/ranks-*.json; do
    [[ "$(basename "$f")" =~ ^ranks-[0-9]+\.json$ ]] && points+=("$f")
  done
  python3 "$repo/scripts/report.py" "${points[@]}" --out "$out"
fi
