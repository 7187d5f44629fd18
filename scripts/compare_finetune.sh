#!/usr/bin/env bash
# LoRA on one node against full fine-tuning on several, same model shape and
# data: the question asked before buying a faster fabric. Runs
#
#   1. trainbench plan CONFIG --gpus-per-node G --nodes M --json, once per
#      side with that side's --set's (memory per GPU, which fits):
#      DIR/plan-lora.json (its lora row) and DIR/plan-full.json (its full rows)
#   2. LoRA:  G ranks     trainbench run CONFIG --set train.mode=lora ...
#   3. full:  G·M ranks   trainbench run CONFIG --set train.mode=full ...
#   4. scripts/report.py --compare --lora-plan ... --full-plan ...:
#      DIR/compare.md with tokens/s, time and GPU-hours for --target-tokens,
#      memory per GPU, checkpoint size, stall shares and a one-line verdict.
#
#   scripts/compare_finetune.sh [--config CONFIG] [--gpus-per-node G] [--nodes M] [--steps N]
#       [--set key=value]... [--lora-set key=value]... [--full-set key=value]...
#       [--target-tokens N] [--out DIR] [--launcher mpirun|srun] [--hostfile FILE]
#       [--mpirun-args "ARGS"] [--binary PATH]
#
# --set goes to both runs and both plans (their shards: data.shards;
# checkpoint.dir=D: LoRA's checkpoints go to D/lora-<id>, full's to
# D/full-<id>, <id> this comparison's UTC start and pid, so that a rerun with
# the same D gets fresh folders as trainbench requires); --lora-set and
# --full-set to one side each, its run and its plan (lora.rank, comm.zero,
# train.micro_batch, ...). The launcher starts one rank per GPU: mpirun -np (with --hostfile for
# several hosts, as scripts/scale.sh) or, inside a Slurm allocation of M nodes,
# srun --mpi=pmix (LoRA on one node, full on all M). Defaults: --config tiny,
# --gpus-per-node 8, --nodes 2, --target-tokens 1e9, DIR out/compare-<time>.
# Every step's console output is DIR/<step>.log, its first line the command
# as run (the mpirun or srun line, quoted as a shell reads it). mpirun gets
# --hostfile FILE and --mpirun-args as they are and, without a hostfile,
# --oversubscribe (Open MPI) when a side's ranks exceed this machine's cores,
# as scripts/scale.sh does.
#
# A rerun into the same DIR keeps the earlier comparison until the new one is
# complete: DIR's plan-*.json, lora.json, full.json (with their logs) and
# compare.md are always of one comparison that ran to its end. When a step
# fails or is interrupted, its log is DIR/<step>.failed.log and the result it
# may still have written (a failed check, a failed checkpoint) is
# DIR/<step>.failed.json, the partial result of a run that an abort or a
# signal ended (trainbench's <step>.aborted.json, the steps it completed)
# DIR/<step>.failed.aborted.json; what this comparison had finished before it (a
# plan, the LoRA run) is set aside as DIR/<name>.unpaired.json/.log, no
# compare.md is made from it, and the earlier comparison's files stay in
# place (the message lists them).
# Exit codes: 2 bad usage, 3 a missing tool, 128+N on signal N (130: Ctrl-C),
# else the failed step's.
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
. "$repo/scripts/lib/common.sh"  # need, build_folder, plan_or_die, absolute_path, print_usage
. "$repo/scripts/lib/launch.sh"  # hostfile_hosts, mpi_launch_setup, mpirun_line, start_run, wait_run, pass_signal
me=compare_finetune.sh
die() { echo "$me: $(as_typed "$1")" >&2; exit "${2:-2}"; }
# A side's own settings reach trainbench as --set's: while its plan is checked
# ($side_option: --lora-set or --full-set, $side_sets: its assignments), a
# refusal that names one of them as `--set A` names it as typed (a bad
# --lora-set lora.rank=0 was said to be --set lora.rank=0). trainbench names
# the last --set of the keys at fault, and a side's come after the --set's.
# (A value past 80 bytes, which trainbench shows cut short, stays `--set`.)
side_option=""
side_sets=()
as_typed() {
  local message=$1 assignment
  for assignment in ${side_sets[@]+"${side_sets[@]}"}; do
    case "$message" in
      *"--set $assignment:"*) message=${message/"--set $assignment:"/"$side_option $assignment:"}; break ;;
    esac
  done
  printf '%s' "$message"
}
usage() {
  sed -n '/^#   scripts\/compare_finetune.sh/,/^#       \[--mpirun-args/p' "$0" | sed 's/^# \{0,3\}//' >&2
  exit 2
}

config=tiny
gpus_per_node=8
nodes=2
steps=""
target_tokens=1e9
out=""
launcher=mpirun
hostfile=""
mpirun_args=""
binary=${TRAINBENCH_BINARY:-}
both=()
ckpt_dir=""
lora_sets=()
full_sets=()
while [ $# -gt 0 ]; do
  case "$1" in
    --config) need "$1" $# "${2-}"; config=$2; shift 2 ;;
    --gpus-per-node) need "$1" $# "${2-}"; gpus_per_node=$2; shift 2 ;;
    --nodes) need "$1" $# "${2-}"; nodes=$2; shift 2 ;;
    --steps) need "$1" $# "${2-}"; steps=$2; shift 2 ;;
    --set)
      need "$1" $#
      # checkpoint.dir: each run checkpoints to its own subfolder (a fresh run
      # refuses a folder that holds another run's checkpoints); an empty one
      # (a temporary folder per run) goes to both as it is.
      case "$2" in checkpoint.dir=?*) ckpt_dir=${2#checkpoint.dir=} ;; *) both+=(--set "$2") ;; esac
      shift 2 ;;
    --lora-set) need "$1" $#; lora_sets+=(--set "$2"); shift 2 ;;
    --full-set) need "$1" $#; full_sets+=(--set "$2"); shift 2 ;;
    --target-tokens) need "$1" $# "${2-}"; target_tokens=$2; shift 2 ;;
    --out) need "$1" $# "${2-}"; out=$2; shift 2 ;;
    --launcher) need "$1" $# "${2-}"; launcher=$2; shift 2 ;;
    --hostfile) need "$1" $# "${2-}"; hostfile=$2; shift 2 ;;
    --mpirun-args) need "$1" $#; mpirun_args=$2; shift 2 ;;
    --binary) need "$1" $# "${2-}"; binary=$2; shift 2 ;;
    -h|--help) print_usage; exit 0 ;;
    *) echo "$me: unknown argument '$1'" >&2; usage ;;
  esac
done

# trainbench plan's own bound: past it the plan failed after the output folder was made.
if ! [[ "$gpus_per_node" =~ ^[1-9][0-9]{0,3}$ ]] || [ "$gpus_per_node" -gt 1024 ]; then
  die "--gpus-per-node '$gpus_per_node': expected an integer from 1 to 1024"
fi
[[ "$nodes" =~ ^[1-9][0-9]*$ ]] || die "--nodes '$nodes': expected a positive integer"
if [ -n "$steps" ] && ! [[ "$steps" =~ ^[1-9][0-9]*$ ]]; then die "--steps '$steps': expected a positive integer"; fi
# python3 reads the runs' results (report.py): without it the check below
# blamed --target-tokens.
command -v python3 > /dev/null || die "python3 not found: it reads the runs' results (scripts/setup.sh installs it)" 3
# The range report.py takes: checked here, before two training runs, not after.
python3 -c 'import sys; v = float(sys.argv[1]); sys.exit(0 if 1 <= v <= 1e30 else 1)' "$target_tokens" 2> /dev/null ||
  die "--target-tokens '$target_tokens': expected a number from 1 to 1e30 (e.g. 1e9)"
case "$launcher" in
  mpirun) command -v "${MPIRUN:-mpirun}" > /dev/null || die "${MPIRUN:-mpirun} not found (install OpenMPI: scripts/setup.sh)" 3 ;;
  srun)
    command -v srun > /dev/null || die "srun not found: --launcher srun runs inside a Slurm allocation" 3
    [ -z "$hostfile$mpirun_args" ] || die "--hostfile and --mpirun-args are for mpirun; under srun the allocation decides"
    # Outside an allocation srun makes one of its own, without GPUs; one of
    # fewer nodes failed at the full run, after the whole LoRA run.
    [ -n "${SLURM_JOB_ID:-}" ] || die "--launcher srun runs inside a Slurm allocation of --nodes $nodes (salloc or sbatch): no SLURM_JOB_ID"
    allocated=${SLURM_JOB_NUM_NODES:-${SLURM_NNODES:-0}}
    [ "$allocated" -ge "$nodes" ] 2> /dev/null ||
      die "--nodes $nodes: this Slurm allocation (job $SLURM_JOB_ID) has ${allocated} node(s)"
    # Slurm >= 22.05: srun does not inherit --cpus-per-task from the allocation.
    if [ -n "${SLURM_CPUS_PER_TASK:-}" ]; then export SRUN_CPUS_PER_TASK=$SLURM_CPUS_PER_TASK; fi ;;
  *) die "--launcher '$launcher': expected mpirun or srun" ;;
esac
[ -z "$hostfile" ] || { [ -f "$hostfile" ] && [ -r "$hostfile" ]; } || die "--hostfile $hostfile: not a file it can read"
# Ranks on several hosts (srun over --nodes > 1, or a hostfile naming more
# than one) need their checkpoints on storage every host sees: trainbench
# refuses its temporary folder there (exit 2), met only after the LoRA run.
# Checkpoints off for both runs: by --set, or by --lora-set and --full-set each.
checkpoints_off() { [[ " $* " == *" checkpoint.every_steps=0 "* ]]; }
if [ -z "$ckpt_dir" ] && ! checkpoints_off "${both[@]-}" &&
   ! { checkpoints_off "${lora_sets[@]-}" && checkpoints_off "${full_sets[@]-}"; }; then
  hosts=1
  if [ "$launcher" = srun ]; then hosts=$nodes
  elif [ -n "$hostfile" ]; then hosts=$(hostfile_hosts "$hostfile"); fi
  if [ "$hosts" -gt 1 ]; then die "$hosts hosts: their checkpoints need storage every host sees: --set checkpoint.dir=/shared/path (a subfolder per run), or --set checkpoint.every_steps=0"; fi
fi
if [ -f "$config" ]; then config=$(cd "$(dirname "$config")" && pwd)/$(basename "$config"); fi
if [ -z "$binary" ]; then binary="$(build_folder)/trainbench"; fi
# A folder passes -x: it ended in bash's words (exit 126).
[ -f "$binary" ] && [ -x "$binary" ] || die "$binary is not an executable trainbench (build it: scripts/build.sh, or pass --binary)" 3
# Each side's config, --steps and --set's, read once here as `run` reads
# them (`trainbench plan` allocates nothing): a --steps within the warm-up
# or a bad key was met by the LoRA run, after both plans, in lines of
# mpirun's banner.
# sides_own OPTION: side_option=OPTION and side_sets=its assignments (as_typed).
sides_own() {
  local i
  side_option=$1
  side_sets=()
  if [ "$1" = --lora-set ]; then set -- ${lora_sets[@]+"${lora_sets[@]}"}; else set -- ${full_sets[@]+"${full_sets[@]}"}; fi
  for ((i = 2; i <= $#; i += 2)); do side_sets+=("${!i}"); done
}
sides_own --lora-set
plan_or_die "$binary" "$steps" "$config" ${both[@]+"${both[@]}"} --set train.mode=lora ${lora_sets[@]+"${lora_sets[@]}"}
sides_own --full-set
plan_or_die "$binary" "$steps" "$config" ${both[@]+"${both[@]}"} --set train.mode=full ${full_sets[@]+"${full_sets[@]}"}
side_option=""
side_sets=()
if [ -z "$out" ]; then out="$repo/out/compare-$(date +%Y%m%d-%H%M%S)"; fi
mkdir -p "$out" 2> /dev/null || die "--out $out: cannot create the folder"
out=$(cd "$out" && pwd)

run_args=()
if [ -n "$steps" ]; then run_args+=(--steps "$steps"); fi
run_args+=(${both[@]+"${both[@]}"})

if [ "$launcher" = mpirun ]; then mpi_launch_setup "${MPIRUN:-mpirun}" "$hostfile" "$mpirun_args"; fi

# launcher_for NODES RANKS: launch=(the launcher's command line), one rank per GPU on NODES nodes.
launch=()
launcher_for() {
  local n_nodes=$1 n_ranks=$2
  if [ "$launcher" = srun ]; then
    # --kill-on-bad-exit: a rank that dies takes the step down at once, not
    # after its peers' comm.timeout_s (as trainbench.sbatch).
    launch=(srun --mpi="${TRAINBENCH_SRUN_MPI:-pmix}" --kill-on-bad-exit=1 --nodes "$n_nodes" --ntasks "$n_ranks"
            --ntasks-per-node "$gpus_per_node")
    return
  fi
  mpirun_line "$n_ranks"
}

# The files of one comparison (see the header: they are always of one that
# ran to its end).
comparison=(plan-lora.json plan-lora.log plan-full.json plan-full.log lora.json lora.log full.json full.log compare.md)
# tagged NAME TAG: lora.json failed -> lora.failed.json
tagged() { echo "${1%.*}.$2.${1##*.}"; }
# A comparison killed outright (SIGKILL, a lost machine) left the earlier one
# aside: it goes back first, and what the killed one had made is set aside.
for f in "${comparison[@]}"; do
  if [ -e "$out/$f.previous" ]; then
    if [ -e "$out/$f" ]; then mv -f "$out/$f" "$out/$(tagged "$f" unpaired)"; fi
    mv -f "$out/$f.previous" "$out/$f"
  fi
done
# An earlier run's partial result, kept aside through a run that was killed
# with the comparison (step, below): back, and the killed run's own beside it
# as a failed step's.
for f in lora.aborted.json full.aborted.json; do
  if [ -e "$out/$f.previous" ]; then
    if [ -e "$out/$f" ]; then mv -f "$out/$f" "$out/${f%.aborted.json}.failed.aborted.json"; fi
    mv -f "$out/$f.previous" "$out/$f"
  fi
done
# The earlier comparison's files, set aside (NAME.previous) until this one is complete.
earlier=()
for f in "${comparison[@]}"; do
  if [ -e "$out/$f" ]; then mv -f "$out/$f" "$out/$f.previous"; earlier+=("$f"); fi
done

# give_up STEP CODE: this comparison ends without its compare.md. The step's
# log and result become STEP.failed.log/.json, what it had finished
# NAME.unpaired.*, and the earlier comparison goes back in place.
give_up() {
  local name=$1 code=$2 f
  local failed=() unpaired=() kept=()
  trap '' INT TERM HUP  # putting the files back is not to be cut short
  if [ -e "$out/$name.log" ]; then
    mv -f "$out/$name.log" "$out/$name.failed.log"
    failed+=("its log is $out/$name.failed.log")
  fi
  # An empty one (a plan's stdout, a run that wrote nothing) is no result.
  if [ -s "$out/$name.json" ]; then
    mv -f "$out/$name.json" "$out/$name.failed.json"
    failed+=("its result (the steps before it stopped) is $out/$name.failed.json")
  elif [ -n "$name" ]; then
    rm -f "$out/$name.json"
  fi
  # A run that an abort or a signal ended leaves the steps it completed in
  # NAME.aborted.json: the failed step's, set aside with its log and result
  # (left as it was, it stood unnamed beside the earlier comparison put back
  # below). An earlier one, kept aside through the run (step), goes back.
  if [ -n "$name" ] && [ -e "$out/$name.aborted.json" ]; then
    mv -f "$out/$name.aborted.json" "$out/$name.failed.aborted.json"
    failed+=("its partial result (the steps it completed) is $out/$name.failed.aborted.json")
  fi
  for f in lora.aborted.json full.aborted.json; do
    if [ -e "$out/$f.previous" ] && [ ! -e "$out/$f" ]; then mv -f "$out/$f.previous" "$out/$f"; fi
  done
  for f in "${comparison[@]}"; do
    if [ -e "$out/$f" ]; then
      mv -f "$out/$f" "$out/$(tagged "$f" unpaired)"
      case "$f" in *.log) ;; *) unpaired+=("$out/$(tagged "$f" unpaired)") ;; esac
    fi
  done
  for f in ${earlier[@]+"${earlier[@]}"}; do
    mv -f "$out/$f.previous" "$out/$f"
    case "$f" in *.log) ;; *) kept+=("$out/$f") ;; esac
  done
  for f in ${failed[@]+"${failed[@]}"}; do echo "$me: $name: $f" >&2; done
  if [ ${#unpaired[@]} -gt 0 ]; then
    echo "$me: what this comparison finished before it, set aside (no compare.md is made from it): ${unpaired[*]}" >&2
  fi
  if [ ${#kept[@]} -gt 0 ]; then
    echo "$me: the earlier comparison is kept: ${kept[*]}" >&2
  else
    echo "$me: no compare.md: there was no earlier comparison in $out" >&2
  fi
  trap - INT TERM HUP
  exit "$code"
}

# Ctrl-C (or a kill) ends the comparison as a failed step does. During a step
# a signal to this script alone is passed on to the step's command (as a
# group's Ctrl-C reaches it; pass_signal, scripts/lib/launch.sh), whose end
# step() waits for, then gives up.
running=""
interrupted=""
signal_code() { case "$interrupted" in INT) echo 130 ;; TERM) echo 143 ;; *) echo 129 ;; esac; }
on_signal() {
  interrupted=$1
  if [ -z "$running" ]; then
    echo "$me: interrupted (SIG$1)" >&2
    give_up "" "$(signal_code)"
  fi
  pass_signal
}
trap 'on_signal INT' INT
trap 'on_signal TERM' TERM
trap 'on_signal HUP' HUP
start_signal_witness

# step [--stdout FILE] NAME COMMAND...: runs it with its output in
# DIR/NAME.log (the command first, quoted as a shell reads it), its stdout
# alone in FILE where given (a plan's JSON: a warning on stderr is not in
# it); a run (lora, full) must leave DIR/NAME.json.
step() {
  local stdout_file=""
  if [ "$1" = --stdout ]; then stdout_file=$2; shift 2; fi
  local name=$1 code=0 line started
  shift
  line=$(printf '%q ' "$@")
  line=${line% }
  echo "$me: $name: $line"
  # An earlier run's partial result (NAME.aborted.json) is kept aside through
  # this run and put back after it: trainbench would write this run's over
  # it, and one there after the run is then this run's alone (give_up).
  case "$name" in
    lora|full) if [ -e "$out/$name.aborted.json" ]; then mv -f "$out/$name.aborted.json" "$out/$name.aborted.json.previous"; fi ;;
  esac
  running=$name
  started=$(date +%s)
  # In the background, waited for: a signal is passed on to it (start_run).
  if [ -n "$stdout_file" ]; then
    { printf '%s\n\n' "$line"; start_run "$@" > "$stdout_file"; } > "$out/$name.log" 2>&1 < /dev/null || code=$?
  else
    { printf '%s\n\n' "$line"; start_run "$@"; } > "$out/$name.log" 2>&1 < /dev/null || code=$?
  fi
  if [ -n "$run_pid" ]; then wait_run; code=$run_status; fi
  running=""
  if [ -n "$interrupted" ]; then
    echo "$me: $name interrupted (SIG$interrupted, after $(( $(date +%s) - started ))s); its last lines ($out/$name.failed.log):" >&2
    tail -n 15 "$out/$name.log" | sed 's/^/  /' >&2
    give_up "$name" "$(signal_code)"
  fi
  case "$name" in
    lora|full) if [ "$code" = 0 ] && [ ! -s "$out/$name.json" ]; then code=1; fi ;;
  esac
  if [ "$code" != 0 ]; then
    echo "$me: $name failed (exit $code); its last lines ($out/$name.failed.log):" >&2
    tail -n 15 "$out/$name.log" | sed 's/^/  /' >&2
    give_up "$name" "$code"
  fi
  if [ -e "$out/$name.aborted.json.previous" ]; then mv -f "$out/$name.aborted.json.previous" "$out/$name.aborted.json"; fi
}

# Each side planned with its own --set's (lora.rank and lora.targets,
# train.micro_batch, train.attention change the memory): every figure beside
# a run is of that run's setup. report.py checks what the plans record.
step --stdout "$out/plan-lora.json" plan-lora "$binary" plan "$config" --gpus-per-node "$gpus_per_node" \
  --nodes "$nodes" --json ${both[@]+"${both[@]}"} ${lora_sets[@]+"${lora_sets[@]}"}
step --stdout "$out/plan-full.json" plan-full "$binary" plan "$config" --gpus-per-node "$gpus_per_node" \
  --nodes "$nodes" --json ${both[@]+"${both[@]}"} ${full_sets[@]+"${full_sets[@]}"}
lora_ckpt=()
full_ckpt=()
if [ -n "$ckpt_dir" ]; then
  # A fresh run refuses a folder that holds another run's checkpoints: one
  # folder per side and per comparison, as scripts/scale.sh's --ckpt-dir.
  ckpt_dir=$(absolute_path "$ckpt_dir")
  run_id=$(date -u +%Y%m%dT%H%M%SZ)-$$
  lora_ckpt=(--set "checkpoint.dir=$ckpt_dir/lora-$run_id")
  full_ckpt=(--set "checkpoint.dir=$ckpt_dir/full-$run_id")
  echo "$me: checkpoints: LoRA in $ckpt_dir/lora-$run_id, full fine-tuning in $ckpt_dir/full-$run_id"
fi
launcher_for 1 "$gpus_per_node"
step lora "${launch[@]}" "$binary" run "$config" "${run_args[@]}" --set train.mode=lora \
  ${lora_ckpt[@]+"${lora_ckpt[@]}"} ${lora_sets[@]+"${lora_sets[@]}"} --out "$out/lora.json"
launcher_for "$nodes" $((gpus_per_node * nodes))
step full "${launch[@]}" "$binary" run "$config" "${run_args[@]}" \
  --set train.mode=full ${full_ckpt[@]+"${full_ckpt[@]}"} ${full_sets[@]+"${full_sets[@]}"} --out "$out/full.json"
running=report
code=0
python3 "$repo/scripts/report.py" --compare "$out/lora.json" "$out/full.json" \
  --lora-plan "$out/plan-lora.json" --full-plan "$out/plan-full.json" \
  --target-tokens "$target_tokens" --gpus-per-node "$gpus_per_node" --out "$out" < /dev/null || code=$?
running=""
if [ -n "$interrupted" ]; then echo "$me: report.py interrupted (SIG$interrupted)" >&2; give_up "" "$(signal_code)"; fi
if [ "$code" != 0 ]; then
  echo "$me: report.py --compare failed (exit $code)" >&2
  give_up "" "$code"
fi
# Complete: the earlier comparison's files go, and an older comparison's single
# plan.json, which would read as this one's.
trap - INT TERM HUP
for f in ${earlier[@]+"${earlier[@]}"}; do rm -f "$out/$f.previous"; done
rm -f "$out/plan.json" "$out/plan.log"
