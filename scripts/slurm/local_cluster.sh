#!/usr/bin/env bash
# A one-node Slurm cluster on this machine, to try the Slurm path
# (scripts/scale.sh --slurm, scripts/slurm/trainbench.sbatch, srun --mpi=pmix)
# where there is no cluster: munged, slurmctld and slurmd for this host, every
# file of theirs under DIR, as root. The test suite uses it (slurm_local).
#
#   scripts/slurm/local_cluster.sh start DIR   # then: export SLURM_CONF=DIR/slurm.conf
#   scripts/slurm/local_cluster.sh stop DIR
#
# Needs the Debian packages slurmctld, slurmd, slurm-client and munge
# (scripts/setup.sh installs them). Ports SLURM_LOCAL_PORT and the next one
# (default 16817, 16818). The node has this host's cores and memory less
# 1 GiB; the partition oversubscribes, so more tasks than cores can run with
# --overcommit. Exit 3 when a daemon does not come up, with its log's tail.
set -euo pipefail

usage() {
  echo "usage: scripts/slurm/local_cluster.sh start|stop DIR" >&2
  exit 2
}
[ $# -eq 2 ] || usage
action=$1
dir=$2

# Each daemon gets SIGTERM and up to 15 s to save its state and go (slurmctld
# takes a second or two), then SIGKILL: the ports are free when this returns.
stop() {
  for daemon in slurmd slurmctld munged; do
    local pid_file="$dir/$daemon.pid"
    [ -s "$pid_file" ] || continue
    local pid
    pid=$(cat "$pid_file")
    # A PID file left by a daemon that died may name another process by now
    # (PIDs are reused; this runs as root): only the daemon itself is killed.
    if ! [[ "$pid" =~ ^[1-9][0-9]*$ ]] || [ "$(cat "/proc/$pid/comm" 2>/dev/null)" != "$daemon" ]; then
      rm -f "$pid_file"
      continue
    fi
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 1 30); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.5
    done
    # Still there and still the daemon (its PID not reused meanwhile): killed.
    if kill -0 "$pid" 2>/dev/null && [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = "$daemon" ]; then
      kill -9 "$pid" 2>/dev/null || true
    fi
    rm -f "$pid_file"
  done
}

case "$action" in
  stop) stop; exit 0 ;;
  start) ;;
  *) usage ;;
esac

for tool in munged slurmctld slurmd sinfo; do
  command -v "$tool" > /dev/null || { echo "local_cluster: $tool not found (scripts/setup.sh installs Slurm and munge)" >&2; exit 3; }
done
[ "$(id -u)" = 0 ] || { echo "local_cluster: the daemons run as root here; run it as root" >&2; exit 3; }

mkdir -p "$dir/state" "$dir/spool" "$dir/log"
dir=$(cd "$dir" && pwd)
port=${SLURM_LOCAL_PORT:-16817}
host=$(hostname -s)
memory_mib=$(( $(awk '/MemTotal/ {print $2}' /proc/meminfo) / 1024 - 1024 ))

# munge: a key of our own and a socket in DIR, which slurm.conf names.
if [ ! -s "$dir/munge.key" ]; then
  dd if=/dev/urandom of="$dir/munge.key" bs=1024 count=1 status=none
  chmod 600 "$dir/munge.key"
fi
chmod 700 "$dir"
cat > "$dir/slurm.conf" <<EOF
ClusterName=trainbench-local
SlurmctldHost=$host
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$dir/munge.socket
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd.log
SlurmctldPort=$port
SlurmdPort=$((port + 1))
# No cgroups in a container: processes tracked by parent, no task binding.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
ReturnToService=2
NodeName=$host CPUs=$(nproc) RealMemory=$memory_mib State=UNKNOWN
PartitionName=local Nodes=$host Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
EOF

# A daemon that did not come up: what it said (the daemons' logs' tails),
# then the ones already started are stopped, so that none is left holding the
# ports or DIR, and exit 3. A daemon that refuses to start exits non-zero,
# which under set -e ended this with exit 1, no log and the others running.
fail() {
  echo "local_cluster: $1" >&2
  for log in slurmctld slurmd munged; do
    echo "--- $log:" >&2
    tail -n 5 "$dir/log/$log.log" >&2 2>/dev/null || true
  done
  stop
  exit 3
}

stop  # a previous run's daemons on the same DIR
munged --force --socket="$dir/munge.socket" --key-file="$dir/munge.key" --log-file="$dir/log/munged.log" \
  --pid-file="$dir/munged.pid" --seed-file="$dir/munge.seed" || fail "munged did not start (exit $?)"
export SLURM_CONF=$dir/slurm.conf
# -c: a clean start, without the state of an earlier cluster in DIR.
slurmctld -c -f "$SLURM_CONF" || fail "slurmctld did not start (exit $?)"
slurmd -c -f "$SLURM_CONF" || fail "slurmd did not start (exit $?)"

for _ in $(seq 1 60); do
  if sinfo --noheader --states=idle --format=%N 2>/dev/null | grep -qx "$host"; then
    echo "local_cluster: node $host idle; export SLURM_CONF=$SLURM_CONF"
    exit 0
  fi
  sleep 0.5
done
fail "node $host did not come up within 30 s"
