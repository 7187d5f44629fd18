# Sourced by scale.sh and compare_finetune.sh: the one way they build an
# mpirun line, so that a fix to one (Open MPI's root variables, its slots per
# core) is not left out of the other. The caller sets $me (for messages).

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
