# Sourced by scale.sh and compare_finetune.sh: the one way they build an
# mpirun line and run it, so that a fix to one (Open MPI's root variables, its
# slots per core, a signal passed on to the run) is not left out of the
# other. The caller sets $me (for messages).

# hostfile_hosts FILE: how many distinct hosts an Open MPI / MPICH hostfile
# names (comments and blank lines skipped, "host slots=N" counts its host).
hostfile_hosts() {
  sed 's/#.*//' "$1" | awk 'NF { print $1 }' | sort -u | wc -l
}

# mpi_launch_setup MPIRUN HOSTFILE "EXTRA ARGS": what mpirun_line needs, found
# once: whether MPIRUN is Open MPI (which takes --oversubscribe), how many
# slots it gives on this machine without a hostfile, and the extra arguments
# split as the shell would split them unquoted. As root it exports the two
# variables without which Open MPI refuses to start (CI containers run as
# root); other MPIs ignore them.
mpi_launch_setup() {
  mpi_run=$1
  mpi_hostfile=$2
  read -r -a mpi_extra <<< "$3"
  mpi_is_openmpi=0
  # Open MPI's mpirun says "(Open MPI)", its mpiexec/orterun "(OpenRTE)".
  if "$mpi_run" --version 2> /dev/null | grep -Eq "Open ?MPI|Open ?RTE"; then mpi_is_openmpi=1; fi
  # Open MPI gives one slot per core (not per hardware thread) without a
  # hostfile: more ranks than cores are refused ("not enough slots").
  mpi_cores=$(lscpu -p=Core,Socket 2> /dev/null | grep -v '^#' | sort -u | wc -l || true)
  if ! [ "${mpi_cores:-0}" -gt 0 ] 2> /dev/null; then mpi_cores=$(nproc); fi
  if [ "$(id -u)" = 0 ]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi
}

# mpirun_line RANKS: launch=(the mpirun command line for RANKS ranks, up to
# the binary): the hostfile, and past this machine's cores without one,
# Open MPI's --oversubscribe (another MPI's flag is the caller's to give in
# the extra arguments, said once per line), then the extra arguments.
mpirun_line() {
  local ranks=$1
  launch=("$mpi_run" -np "$ranks")
  if [ -n "$mpi_hostfile" ]; then launch+=(--hostfile "$mpi_hostfile"); fi
  if [ -z "$mpi_hostfile" ] && [ "$ranks" -gt "$mpi_cores" ]; then
    if [ "$mpi_is_openmpi" = 1 ]; then
      launch+=(--oversubscribe)
    else
      echo "$me: note: $ranks ranks on $mpi_cores cores; add your MPI's oversubscribe flag with --mpirun-args if it refuses" >&2
    fi
  fi
  launch+=(${mpi_extra[@]+"${mpi_extra[@]}"})
}

# Signals during a run. bash runs a trap only between commands: a run in the
# foreground kept a signal sent to the script alone (`kill PID`, a job
# wrapper or supervisor that signals only the process it started) from its
# trap until the run had trained to its end, hours of a sweep, and the
# complete result was then filed as failed. So start_run puts the run in the
# background and wait_run waits for it (a trapped signal ends `wait` at
# once); the caller's trap calls pass_signal, which passes the signal on to
# the run, and wait_run then waits for the run's own end (rank 0 writing the
# steps it trained, *.aborted.json), which the caller handles as it did.
# Not where the run had the signal already: a terminal's Ctrl-C,
# `kill -- -PGID` and scancel signal the whole process group, and a second
# SIGINT or SIGTERM makes Open MPI's mpirun kill its ranks at once, before
# rank 0 has written them. bash does not say who sent a signal: a witness in
# the process group (start_signal_witness) does, by ending.
run_pid=""         # the run start_run started, until wait_run has its exit status
run_status=0       # wait_run: the run's exit status
run_signalled=""   # pass_signal: a signal came during wait_run's `wait`
signal_came=""     # pass_signal: a signal came at all
signal_witness=""  # start_signal_witness: its pid

# start_signal_witness: once, before the first run: a process in the
# script's process group that a signal to the group ends (SIGINT, SIGTERM,
# SIGHUP at their default actions), and otherwise the script's end (a
# SIGKILL too, within a second). No descriptor of the script's open in it:
# a reader of the script's output, or a sweep waiting for scale.sh's lock on
# its folder, would wait for it.
start_signal_witness() {
  ( trap - INT QUIT; while kill -0 "$$" 2> /dev/null; do sleep 1; done ) < /dev/null > /dev/null 2>&1 &
  signal_witness=$!
}

# start_run COMMAND...: COMMAND in the background, with the caller's
# redirections of start_run, its pid in run_pid; wait_run follows. bash
# starts a background command with SIGINT and SIGQUIT ignored, which
# trainbench keeps ignored (a shell's background job is not Ctrl-C's) and
# the group's Ctrl-C then missed a run outside mpirun: reset, as a command in
# the foreground has them (one the script got ignored stays ignored).
start_run() {
  ( trap - INT QUIT; exec "$@" ) &
  run_pid=$!
  # A signal after the caller's last look, before the run was there: it
  # cannot have had it.
  if [ -n "$signal_came" ]; then kill -s TERM "$run_pid" 2> /dev/null || true; fi
}

# wait_run: waits for the run start_run started; its exit status in
# run_status. A signal ends `wait` at once, the run still going (pass_signal
# passed it on): waited for again, to the run's end and its own status.
wait_run() {
  while :; do
    run_signalled=""
    run_status=0
    wait "$run_pid" || run_status=$?
    if [ -z "$run_signalled" ]; then break; fi
  done
  run_pid=""
}

# pass_signal: the caller's trap for SIGINT, SIGTERM and SIGHUP calls it.
# The run is sent SIGTERM, whichever came: mpirun and srun pass it on to the
# ranks (a lone SIGINT is to srun a request for its tasks' state), and
# trainbench takes all three alike. Not where the witness ended by a signal
# within a second: the signal went to the whole group, the run included
# (Open MPI's mpirun would take this one as a second).
pass_signal() {
  local polls=0 status=0
  signal_came=1
  run_signalled=1
  if [ -z "$run_pid" ]; then return 0; fi
  if [ -n "$signal_witness" ]; then
    while kill -0 "$signal_witness" 2> /dev/null && [ "$polls" -lt 20 ]; do
      sleep 0.05
      polls=$((polls + 1))
    done
    if ! kill -0 "$signal_witness" 2> /dev/null; then
      wait "$signal_witness" || status=$?
      if [ "$status" -gt 128 ]; then return 0; fi
    fi
  fi
  kill -s TERM "$run_pid" 2> /dev/null || true
}
