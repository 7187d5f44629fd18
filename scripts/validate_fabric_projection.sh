#!/usr/bin/env bash
# Validates the scale projection's network model against a fabric it can
# measure: two "nodes" = two network namespaces joined by a veth pair,
# rate-limited with tc (tbf), one rank in each. First the link's latency:
# a 4-byte all-reduce between the two ranks, no rate limit (2 ring steps).
# (The plain MPI_Allreduce: the link's latency, not the wake-up of the
# trainer's progress thread, which the measured comm then shows as error.)
# Then for each rate:
#   1. project: `trainbench project` on ONE rank (no link measured) with
#      --fabric <tc rate in GB/s>,<that latency in us> gives the comm time per
#      step of 2 nodes (the ring all-reduce model, nccl-tests' busbw);
#   2. measure: `trainbench run` on 2 ranks across the namespaces (MPI over
#      TCP through the veth), the median comm_s per step, and `bench comm`'s
#      gradient step (the same buckets all-reduced back to back, nothing else);
#   3. print projected vs measured and the relative errors.
# Needs root (ip netns, tc), iproute2 (scripts/setup.sh) and a build with MPI.
# Usage: scripts/validate_fabric_projection.sh [RATE_MBIT ...]   (default: 200 800)
#   RATE_MBIT: a link rate in Mbit/s, a positive number (200, 12.5), at most
#   1e6 (1 Tbit/s); -h/--help prints this.
# Env: TRAINBENCH_BINARY (or TRAINBENCH; else trainbench in the build folder,
#      found as the other scripts find it: $TRAINBENCH_BUILD_DIR, relative to
#      the source tree, else $BUILD_DIR, else build/), CONFIG (cpu-small),
#      LAYERS (2), STEPS (8), OUT (folder for the JSON and log files, default
#      a fresh one under /tmp); relative paths are taken from the current
#      folder. Each step's output is in OUT; a step that fails is named with
#      its log's last lines. Namespaces and links are named after the
#      script's pid, so that two runs do not take each other's.
# Exit codes: 2 bad usage (a CONFIG, LAYERS or STEPS trainbench refuses too:
# `trainbench plan` reads them first) or a missing tool, all checked before any
# setup, 3 not built, else the failed step's.
# (netem would add a delay, but this VM's kernel has no sch_netem: tbf only.)
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
. "$repo/scripts/lib/common.sh"  # build_folder, print_usage
me=validate_fabric_projection
die() { echo "$me: $1" >&2; exit "${2:-2}"; }

case "${1:-}" in
  -h|--help) print_usage; exit 0 ;;
esac
RATES=("$@")
[ ${#RATES[@]} -gt 0 ] || RATES=(200 800)
# Every rate is checked before any setup (tc refused a bad one a minute in):
# a decimal number of Mbit/s above 0; tc and the Python summary read it as is.
for rate in "${RATES[@]}"; do
  [[ "$rate" =~ ^([0-9]{1,7}(\.[0-9]{1,6})?|\.[0-9]{1,6})$ ]] ||
    die "rate '$rate': expected a link rate in Mbit/s, a positive number like 200 or 12.5 (usage: --help)"
  awk -v r="$rate" 'BEGIN { exit !(r > 0 && r <= 1e6) }' ||
    die "rate '$rate': expected more than 0 and at most 1e6 Mbit/s"
done
LAYERS="${LAYERS:-2}"
STEPS="${STEPS:-8}"
[[ "$LAYERS" =~ ^[1-9][0-9]{0,2}$ ]] || die "LAYERS='$LAYERS': expected a whole number from 1 to 999"
[[ "$STEPS" =~ ^[1-9][0-9]{0,5}$ ]] || die "STEPS='$STEPS': expected a positive whole number"
CONFIG="${CONFIG:-cpu-small}"
# Paths given are the caller's (the script runs in the source tree): a config
# file is made absolute, anything else is a preset name and goes as it is.
if [ -f "$CONFIG" ]; then CONFIG=$(cd "$(dirname "$CONFIG")" && pwd)/$(basename "$CONFIG"); fi
BIN="${TRAINBENCH_BINARY:-${TRAINBENCH:-$(build_folder)/trainbench}}"
case "$BIN" in /*) ;; *) BIN="$PWD/$BIN" ;; esac
if [ -n "${OUT:-}" ]; then case "$OUT" in /*) ;; *) OUT="$PWD/$OUT" ;; esac; fi
cd "$repo"

[ -x "$BIN" ] || { echo "validate_fabric_projection: $BIN not built (scripts/build.sh)" >&2; exit 3; }
BIN="$(readlink -f "$BIN")"
# micro-batch 1 x 128 tokens: little compute beside cpu-small's 57 MB of gradients at 2 layers.
COMMON=(--set "model.n_layers=$LAYERS" --set train.micro_batch=1 --set model.seq_len=128 --set train.threads=1 --set data.readers=1 --set checkpoint.every_steps=0
        --set report.progress_every=0)
# CONFIG with the runs' settings, read as `run` reads them (`trainbench plan`
# allocates nothing), before root is asked for and before any setup:
# CONFIG=nosuch was met by the first 2-rank run, once the namespaces were up
# and the latency measured. Its message names the variables as typed.
plan_code=0
plan_error=$("$BIN" plan "$CONFIG" "${COMMON[@]}" --set "train.steps=$STEPS" 2>&1 >/dev/null) ||
  plan_code=$?
if [ "$plan_code" != 0 ]; then
  plan_error=$(tail -n 1 <<<"$plan_error")
  plan_error=${plan_error#trainbench: }
  plan_error=${plan_error//--set model.n_layers=$LAYERS/LAYERS=$LAYERS}
  plan_error=${plan_error//--set train.steps=$STEPS/STEPS=$STEPS}
  die "CONFIG=$CONFIG: $plan_error" "$plan_code"
fi

[ "$(id -u)" = 0 ] || { echo "validate_fabric_projection: needs root (ip netns, tc)" >&2; exit 2; }
command -v ip >/dev/null && command -v tc >/dev/null ||
  { echo "validate_fabric_projection: ip and tc missing: apt-get install iproute2 (scripts/setup.sh)" >&2; exit 3; }
MPIRUN="$(command -v mpirun)" || { echo "validate_fabric_projection: mpirun missing" >&2; exit 3; }
# After every check, so a bad command line leaves nothing behind.
OUT="${OUT:-$(mktemp -d /tmp/trainbench-fabric-XXXXXX)}"
mkdir -p "$OUT" || die "OUT=$OUT: cannot create the folder"
echo "$me: files in $OUT"

# step NAME LOG COMMAND...: runs it with its output in LOG; a failure is
# named with the log's last lines and ends the script with its exit code
# (set -e ended it without a word, the output in a log nobody was told of).
step() {
  local name=$1 log=$2 code=0
  shift 2
  "$@" > "$log" 2>&1 || code=$?
  if [ "$code" != 0 ]; then
    echo "$me: $name failed (exit $code); the last lines of $log:" >&2
    tail -n 15 "$log" | sed 's/^/  /' >&2
    exit "$code"
  fi
}

# Named after this run: a second run at the same time deleted the first's
# namespaces (and a veth name is at most 15 characters).
NS_A=tbfab-a-$$ NS_B=tbfab-b-$$
LINK_A=tbf$$a LINK_B=tbf$$b
IP_A=10.77.0.1 IP_B=10.77.0.2
# The rsh agent lives where no space can be in its path: Open MPI splits
# plm_rsh_agent's value on spaces (OUT may have them).
AGENT_DIR=$(mktemp -d /tmp/trainbench-fabric-agent-XXXXXX)
cleanup() {
  ip netns del "$NS_A" 2>/dev/null || true
  ip netns del "$NS_B" 2>/dev/null || true
  ip link del "$LINK_A" 2>/dev/null || true
  rm -rf "$AGENT_DIR"
}
trap cleanup EXIT
ip netns add "$NS_A"
ip netns add "$NS_B"
ip link add "$LINK_A" type veth peer name "$LINK_B"
ip link set "$LINK_A" netns "$NS_A"
ip link set "$LINK_B" netns "$NS_B"
ip -n "$NS_A" addr add "$IP_A/24" dev "$LINK_A"
ip -n "$NS_B" addr add "$IP_B/24" dev "$LINK_B"
for ns in "$NS_A" "$NS_B"; do ip -n "$ns" link set lo up; done
ip -n "$NS_A" link set "$LINK_A" up
ip -n "$NS_B" link set "$LINK_B" up

# mpirun (in namespace A) starts the remote daemon through this "rsh": it
# enters namespace B under a hostname of its own, so Open MPI sees two nodes.
AGENT="$AGENT_DIR/netns-rsh"
cat >"$AGENT" <<EOF
#!/bin/sh
host="\$1"; shift
[ "\$host" = "$IP_B" ] || { echo "netns-rsh: unknown host \$host" >&2; exit 1; }
exec ip netns exec $NS_B unshare --uts sh -c "hostname tbfab-node-b; \$*"
EOF
chmod +x "$AGENT"

mpi_two_nodes() {
  ip netns exec "$NS_A" env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
    MALLOC_MMAP_THRESHOLD_=1073741824 timeout 900 \
    "$MPIRUN" -np 2 --host "$IP_A,$IP_B" --map-by node \
    --mca plm_rsh_agent "$AGENT" --mca btl tcp,self --mca btl_tcp_if_include 10.77.0.0/24 \
    --mca oob_tcp_if_include 10.77.0.0/24 -x MALLOC_MMAP_THRESHOLD_ "$@"
}

step "the latency measurement" "$OUT/latency.log" mpi_two_nodes "$BIN" bench comm tiny --set comm.backend=mpi \
  --min-bytes 4 --max-bytes 4 --iters 200 --warmup-iters 20 --out "$OUT/latency.json"
HOP_US=$(python3 -c "
import json, sys; b = json.load(open(sys.argv[1]))
t = next(r['time_s'] for r in b['collectives'] if r['collective'] == 'all_reduce' and r['path'] == 'raw')
print(f'{t / 2 * 1e6:.1f}')" "$OUT/latency.json")
echo "validate_fabric_projection: $CONFIG at $LAYERS layers, rates ${RATES[*]} Mbit/s; hop latency ${HOP_US} us" \
     "(4-byte MPI_Allreduce / 2, no rate limit); files in $OUT"
for rate in "${RATES[@]}"; do
  for pair in "$NS_A $LINK_A" "$NS_B $LINK_B"; do
    set -- $pair
    # Both directions limited (an all-reduce sends both ways at once); a
    # generous queue so TCP is paced, not dropped.
    ip netns exec "$1" tc qdisc replace dev "$2" root tbf rate "${rate}mbit" burst 256kb latency 2s
  done
  gbs=$(awk -v r="$rate" 'BEGIN { printf "%.6f", r * 1e6 / 8 / 1e9 }')
  fabric="$gbs,$HOP_US"
  # 1. projected on one rank (nothing crosses a link here).
  step "the projection at $rate Mbit/s" "$OUT/project-$rate.log" "$BIN" project "$CONFIG" --layers "$LAYERS" \
    --steps "$STEPS" --fabric "$fabric" --nodes 1,2 "${COMMON[@]}" --set comm.backend=local \
    --out "$OUT/project-$rate.json"
  # 2. measured on two ranks across the emulated link.
  step "the 2-rank run at $rate Mbit/s" "$OUT/run-$rate.log" mpi_two_nodes "$BIN" run "$CONFIG" --steps "$STEPS" \
    "${COMMON[@]}" --set comm.backend=mpi --out "$OUT/run-$rate.json"
  step "bench comm at $rate Mbit/s" "$OUT/bench-$rate.log" mpi_two_nodes "$BIN" bench comm "$CONFIG" \
    --set "model.n_layers=$LAYERS" --set comm.backend=mpi --min-bytes 4K --max-bytes 4K --iters 5 \
    --warmup-iters 1 --out "$OUT/bench-$rate.json"
done
# 3. projected vs measured. The second projection scales the first by the
# share of the line rate MPI achieved at the OTHER rates (bench busbw / tc
# rate): what a user does with a preset's efficiency, checked on a rate that
# did not calibrate it.
python3 - "$OUT" "${RATES[@]}" <<'EOF'
import json, sys
out, rates = sys.argv[1], sys.argv[2:]
rows = {}
for rate in rates:
    project = json.load(open(f"{out}/project-{rate}.json"))
    run = json.load(open(f"{out}/run-{rate}.json"))
    bench = json.load(open(f"{out}/bench-{rate}.json"))
    line_gbs = float(rate) * 1e6 / 8 / 1e9
    # The step on the trainer's path: the buckets' all-reduces, or ZeRO-1's
    # reduce-scatter and all-gather (bench comm's gradient_step_s).
    path = "bucketed" if "bucketed" in bench["gradient_step_s"] else "comm"
    step = dict(time_s=bench["gradient_step_s"][path], busbw_gbs=bench["gradient_step_busbw_gbs"][path])
    rows[rate] = dict(
        fabric=project["scale"]["fabric"]["name"],
        projected=next(p["comm_s"] for p in project["scale"]["table"] if p["nodes"] == 2),
        run=run["summary"]["comm_s"]["median"], bench=step["time_s"],
        achieved=step["busbw_gbs"] / line_gbs)
err = lambda p, m: (p - m) / m * 100
print(f"{'rate':<9} {'--fabric':<16} {'projected':>10} {'run comm_s':>11} {'error':>7} {'bench step':>11} {'error':>7}"
      f" {'achieved':>9} {'calibrated':>11} {'err run':>8} {'err bench':>9}")
for rate, r in rows.items():
    others = [o["achieved"] for k, o in rows.items() if k != rate] or [r["achieved"]]
    calibrated = r["projected"] / (sum(others) / len(others))
    print(f"{rate + ' Mb/s':<9} {r['fabric']:<16} {r['projected']:9.3f}s {r['run']:10.3f}s {err(r['projected'], r['run']):+6.1f}%"
          f" {r['bench']:10.3f}s {err(r['projected'], r['bench']):+6.1f}% {100 * r['achieved']:8.1f}%"
          f" {calibrated:10.3f}s {err(calibrated, r['run']):+7.1f}% {err(calibrated, r['bench']):+8.1f}%")
EOF
