#!/usr/bin/env bash
# The one command for a GPU machine (DESIGN.md "GPU checks"): build for sm_90,
# run the CUDA tests, measure the cuBLASLt bf16 GEMM ceiling, train the GPU
# presets, run the PyTorch baseline on the same shapes, print one table.
# Every step is logged, under out/gpu_check/logs, or, where $OUT is set (the
# device tool's output folder, which brings back 8 files at most), packed
# into $OUT/logs.tgz beside table.txt and summary.txt; every row is printed
# as it is reached. A failing step is reported in the table and the rest go on.
# The rows' text from the runs' result files is scripts/lib/gpu_check_rows.py,
# which CI checks against results of the current schema.
#
#   scripts/gpu_check.sh            # all steps
#   GPU_CHECK_SKIP_TORCH=1 ...      # without the PyTorch baseline and its tests
#   GPU_CHECK_TESTS_ONLY=1 ...      # build and tests only
#   GPU_CHECK_SKIP_PROFILE=1 ...    # without the per-op breakdown of each preset's step
#   GPU_CHECK_SKIP_SANITIZER=1 ...  # without compute-sanitizer over the op tests
#   GPU_CHECK_SKIP_EXTRAS=1 ...     # only build, tests, ceiling, presets, PyTorch and the ratios (then PyTorch's tests)
#   GPU_CHECK_EXTRAS_ONLY=1 ...     # only the build and the extra rows (a second call)
#   GPU_CHECK_DEADLINE_S=470 ...    # the whole script's time (8 min less 10 s); steps past it are cut or skipped
#
# On the device tool, one call does it all (15 minutes of device time a
# session, start-up included, leave no room for a second start):
#   run  kind nvidia-h200  command "OUT=$OUT GPU_CHECK_DEADLINE_S=540 scripts/gpu_check.sh"  timeout_s 580
#        carry [".device"]   (the H200 of the figures in docs/perf.md; an H100 is not comparable)
# then give_back at once. The issue's comparison (sections 2-5) comes first
# and takes ~400 s; the extras after it run until the deadline: first that
# the engine learns one repeated batch at GPT-2's widths (~20 s), then in the
# order of what they tell about issue 3's gap (per-op times first, the
# sanitizer last).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
# The settings, checked before anything runs: a typo costs a GPU session.
# A flag is 1 or 0 (0 used to count as set: GPU_CHECK_SKIP_TORCH=0 skipped
# PyTorch); a time is whole seconds.
for flag in GPU_CHECK_SKIP_TORCH GPU_CHECK_TESTS_ONLY GPU_CHECK_SKIP_PROFILE GPU_CHECK_SKIP_SANITIZER \
            GPU_CHECK_SKIP_EXTRAS GPU_CHECK_EXTRAS_ONLY; do
  case "${!flag:-}" in
    "" | 0) declare "$flag=" ;;
    1) ;;
    *) echo "gpu_check: $flag='${!flag}': expected 1 (or 0, or unset)" >&2; exit 2 ;;
  esac
done
for seconds in GPU_CHECK_DEADLINE_S GPU_CHECK_TEST_TIMEOUT GPU_CHECK_TESTS_TIMEOUT GPU_CHECK_RUN_TIMEOUT \
               GPU_CHECK_TORCH_TIMEOUT GPU_CHECK_PROFILE_TIMEOUT GPU_CHECK_SANITIZER_TIMEOUT \
               GPU_CHECK_INSTRUMENT_TIMEOUT GPU_CHECK_BURNIN_TIMEOUT; do
  if [ -n "${!seconds:-}" ] && ! [[ "${!seconds}" =~ ^[1-9][0-9]{0,5}$ ]]; then
    echo "gpu_check: $seconds='${!seconds}': expected whole seconds from 1 to 999999" >&2; exit 2
  fi
done
out=${OUT:-out/gpu_check}
mkdir -p "$out"
# The logs and results of every step. The device tool brings back at most 8
# files from $OUT, so there they are kept outside it and packed into
# $OUT/logs.tgz after every row (a run cut off still brings back what it
# reached): $OUT holds table.txt, summary.txt and logs.tgz.
if [ -n "${OUT:-}" ]; then
  logs=${GPU_CHECK_LOGS:-$(mktemp -d "${TMPDIR:-/tmp}/gpu_check_logs.XXXXXX")}
elif [ -n "${GPU_CHECK_LOGS:-}" ]; then
  logs=$GPU_CHECK_LOGS
else
  # A second call's rows must be its own: an earlier call's preset result
  # or PyTorch figures, left in the folder, made a ratio row of this one.
  logs=$out/logs
  if [ -d "$logs" ]; then rm -rf "$logs.previous" && mv "$logs" "$logs.previous"; fi
fi
mkdir -p "$logs"
rm -f "$logs/failed_rows"
rm -f "$out/table.txt"
# The device tool drops a file over 16 MiB without a word: packed over 12
# MiB (a test spewing errors, a sanitizer's report), the logs go again with
# every file over 1 MiB cut to its last 1 MiB, where the error is (in a
# copy made of hard links where it can be: the logs stay whole). A pack that
# fails leaves the previous logs.tgz in place.
pack_logs() {
  [ -n "${OUT:-}" ] || return 0
  local packed=$out/logs.tgz.tmp cut
  tar czf "$packed" -C "$logs" . 2> /dev/null || { rm -f "$packed"; return 0; }
  if [ "$(stat -c %s "$packed")" -gt $(( 12 << 20 )) ]; then
    cut=$(mktemp -d "${TMPDIR:-/tmp}/gpu_check_cut.XXXXXX") || { rm -f "$packed"; return 0; }
    cp -al "$logs/." "$cut/" 2> /dev/null || cp -a "$logs/." "$cut/" 2> /dev/null
    # Each cut file replaces its link by a rename: the log itself is untouched.
    find "$cut" -type f -size +1M -print0 | while IFS= read -r -d '' f; do
      { echo "[gpu_check: cut to its last 1 MiB of $(stat -c %s "$f") bytes]"; tail -c 1M "$f"; } > "$f.cut" &&
        mv -f "$f.cut" "$f"
    done
    tar czf "$packed" -C "$cut" . 2> /dev/null || rm -f "$packed"
    rm -rf "$cut"
    [ -f "$packed" ] || return 0
  fi
  mv -f "$packed" "$out/logs.tgz"
}
trap pack_logs EXIT
build=${GPU_CHECK_BUILD_DIR:-build-gpu}
presets=(h200-llama8b-4l h200-gpt2-124m)
started=$(date +%s)
declare -a table

# Each row also goes to table.txt and to stdout at once, so a run cut off by
# its time limit still shows every row it reached (the device tool returns
# stdout's tail even when no file comes back).
row() {
  table+=("$(printf '%-34s %s' "$1" "$2")")
  printf '%-34s %s  [%s]\n' "$1" "$2" "$(elapsed)" | tee -a "$out/table.txt"
  pack_logs
}
elapsed() { echo "$(( $(date +%s) - started ))s"; }

# A deadline for the whole script, GPU_CHECK_DEADLINE_S seconds from its
# start (default 470: the issue's "under 8 minutes", with the device tool's
# call limit above it). Every step runs
# under `bounded`: at most its own cap and at most the time left, so one hung
# step (a GPU test, a run, the ceiling tool) cannot take the table with it.
# A step with no time left is not started and its row says so.
deadline_s=${GPU_CHECK_DEADLINE_S:-470}
deadline=$(( started + deadline_s ))
# bounded CAP COMMAND...: COMMAND under timeout(1), which signals its whole
# process group (a test's children too): SIGTERM after at most CAP seconds
# and at most the time left less 20 s for the rows after it, SIGKILL 10 s
# later. Exit 124 or 137 when cut, 200 when not started.
bounded() {
  local cap=$1 left
  shift
  left=$(( deadline - $(date +%s) - 20 ))
  if [ "$left" -lt 15 ]; then return 200; fi
  if [ "$cap" -gt "$left" ]; then cap=$left; fi
  timeout -k 10 "$cap" "$@"
}
# failed_row NAME: a row that did not pass, for the exit status (a file:
# rows are made in subshells).
failed_row() { echo "$1" >> "$logs/failed_rows"; }
# failure STATUS LOG: the row's words for a step that did not succeed (and
# the exit status says so).
failure() {
  failed_row "exit $1: $(basename "$2")"
  case $1 in
    200) echo "SKIPPED: too little left of GPU_CHECK_DEADLINE_S=${deadline_s} at $(elapsed)" ;;
    124 | 137) echo "TIMED OUT (exit $1, at $(elapsed)): $(tail -1 "$2" 2> /dev/null)" ;;
    *) echo "FAILED (exit $1): $(tail -1 "$2" 2> /dev/null)" ;;
  esac
}

# The table once more, whole, and the exit status: 1 when a row did not
# pass (a failed, cut or skipped step, failed or skipped GPU tests, a FAIL
# verdict, sanitizer errors), so that a wrapper tells a red check from a
# green one; 0 otherwise. (It was 0 whatever failed, but the build.)
# Defined here: GPU_CHECK_EXTRAS_ONLY=1 skips the sections it stood in
# and ended with "finish: command not found", exit 127, no table.
finish() {
  printf '%s\n' "${table[@]}" | tee -a "$out/summary.txt"
  if [ -s "$logs/failed_rows" ]; then
    echo "gpu_check: $(wc -l < "$logs/failed_rows") row(s) did not pass: $(tr '\n' ';' < "$logs/failed_rows")" |
      tee -a "$out/summary.txt"
    exit 1
  fi
  exit 0
}

echo "== gpu_check: $(date -u +%FT%TZ), commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown)" | tee "$out/summary.txt"
if command -v nvidia-smi > /dev/null; then
  timeout 20 nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader > "$logs/gpu.txt" 2>&1
  row "gpu" "$(head -1 "$logs/gpu.txt")"
else
  row "gpu" "nvidia-smi not found"
fi

# Dependencies the device image may lack: carried as .device/debs (see
# scripts/device_deps.sh), unpacked here for this machine's paths.
if [ -d .device/debs ]; then
  if bounded 120 bash scripts/device_deps.sh install > "$logs/device_deps.log" 2>&1; then
    # shellcheck disable=SC1091
    source .device/env.sh
    row "dependencies" "unpacked from .device/debs"
  else
    row "dependencies" "$(failure $? "$logs/device_deps.log")"
  fi
else
  # The device image has no libarchive, yaml-cpp, ... headers: without them
  # the configure below fails. Said here, not only in configure.log.
  row "dependencies" "no .device/debs: the system's own (on the device tool: scripts/device_deps.sh download first, carry .device)"
fi

# The folder of one of PyTorch's nvidia-* wheels (e.g. nvidia.nccl), "" when
# python3 has none.
wheel_dir() {
  python3 -c 'import importlib, os, sys; m = importlib.import_module(sys.argv[1]); print(os.path.dirname(m.__file__) if m.__file__ else list(m.__path__)[0])' "$1" 2>/dev/null
}

# NCCL: the toolkit's copy, NCCL_HOME, or else the one PyTorch's wheels carry
# (nvidia-nccl-cu13: include/nccl.h and lib/libnccl.so.2 with no unversioned
# link, which find_library needs: made here in a folder of our own).
if [ -z "${NCCL_HOME:-}" ] && [ ! -f /usr/local/cuda/include/nccl.h ]; then
  wheel_nccl=$(wheel_dir nvidia.nccl)
  if [ -n "$wheel_nccl" ] && [ -f "$wheel_nccl/include/nccl.h" ]; then
    export NCCL_HOME=$PWD/.device/nccl
    mkdir -p "$NCCL_HOME/lib"
    ln -sfn "$wheel_nccl/include" "$NCCL_HOME/include"
    for lib in "$wheel_nccl"/lib/libnccl.so*; do ln -sf "$lib" "$NCCL_HOME/lib/"; done
    ln -sf "$(ls "$wheel_nccl"/lib/libnccl.so.* | head -1)" "$NCCL_HOME/lib/libnccl.so"
    export LD_LIBRARY_PATH="$NCCL_HOME/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    row "NCCL source" "PyTorch's wheel: $wheel_nccl"
  fi
fi

# cuDNN, for the fused attention (train.attention auto): the toolkit's copy,
# CUDNN_ROOT, or else PyTorch's wheel (nvidia-cudnn-cu13: include/cudnn*.h,
# lib/libcudnn.so.9, which kernels/cuda/CMakeLists.txt finds by that name).
# The cuDNN frontend's headers are carried in .device/cudnn_frontend.
if [ -z "${CUDNN_ROOT:-}" ] && [ ! -f /usr/local/cuda/include/cudnn.h ]; then
  wheel_cudnn=$(wheel_dir nvidia.cudnn)
  if [ -n "$wheel_cudnn" ] && ls "$wheel_cudnn"/lib/libcudnn.so.9* > /dev/null 2>&1; then
    # The wheel's library; its headers, or else the cuDNN 9 headers carried
    # in .device/cudnn_headers (scripts/device_deps.sh download).
    export CUDNN_ROOT=$PWD/.device/cudnn
    mkdir -p "$CUDNN_ROOT"
    ln -sfn "$wheel_cudnn/lib" "$CUDNN_ROOT/lib"
    if [ -f "$wheel_cudnn/include/cudnn.h" ]; then
      ln -sfn "$wheel_cudnn/include" "$CUDNN_ROOT/include"
      headers="its headers"
    else
      ln -sfn "$PWD/.device/cudnn_headers/include" "$CUDNN_ROOT/include"
      headers="carried headers $(grep -m1 -oE 'CUDNN_MINOR [0-9]+' .device/cudnn_headers/include/cudnn_version.h 2> /dev/null)"
    fi
    export LD_LIBRARY_PATH="$wheel_cudnn/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    row "cuDNN source" "PyTorch's wheel: $wheel_cudnn ($headers)"
  fi
fi
# cuDNN's run-time compiled SDPA engines dlopen NVRTC of the toolkit's major
# version (libnvrtc.so.13), which the loader looks for on LD_LIBRARY_PATH and
# in ld.so.cache, not in the binary's RUNPATH: without it, train.attention
# auto falls back to GEMM attention. Where the cache lacks it: the toolkit's
# copy, else PyTorch's wheel (nvidia-cuda-nvrtc: nvidia/cu13/lib).
nvrtc_major=$("$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)" --version 2> /dev/null | sed -n 's/.*release \([0-9][0-9]*\)\..*/\1/p' | head -1)
# grep reads all of ldconfig's output (no -q): under pipefail, ldconfig
# killed by SIGPIPE after an early match would read as "not found".
if [ -n "$nvrtc_major" ] && ! ldconfig -p 2> /dev/null | grep "libnvrtc\.so\.$nvrtc_major " > /dev/null; then
  for nvrtc_dir in /usr/local/cuda/lib64 "$(wheel_dir "nvidia.cu$nvrtc_major")"; do
    [ "$nvrtc_dir" = /usr/local/cuda/lib64 ] || nvrtc_dir=${nvrtc_dir:+$nvrtc_dir/lib}
    if [ -n "$nvrtc_dir" ] && [ -e "$nvrtc_dir/libnvrtc.so.$nvrtc_major" ]; then
      # NVRTC's libraries only, linked into a folder of our own: the whole
      # toolkit lib64 on LD_LIBRARY_PATH would win over PyTorch's RUNPATH,
      # and torch would load the toolkit's cuBLAS/cuSPARSE/nvJitLink.
      nvrtc_links=$PWD/.device/nvrtc
      rm -rf "$nvrtc_links" && mkdir -p "$nvrtc_links"
      for lib in "$nvrtc_dir"/libnvrtc*.so*; do ln -sf "$lib" "$nvrtc_links/"; done
      export LD_LIBRARY_PATH="${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}$nvrtc_links"
      row "NVRTC (cuDNN)" "$nvrtc_dir"
      break
    fi
  done
fi

# 1. Build for Hopper only: half the compile time of the default 80;90.
# Each GPU test gets GPU_CHECK_TEST_TIMEOUT seconds (its TIMEOUT property:
# ctest --timeout does not override it).
configure() {
  bounded 120 cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DTRAINBENCH_CUDA=ON \
    -DCMAKE_CUDA_ARCHITECTURES=90 -DTRAINBENCH_GPU_TEST_TIMEOUT="${GPU_CHECK_TEST_TIMEOUT:-150}" "$@" \
    > "$logs/configure.log" 2>&1
}
# Only what this script runs (tests/CMakeLists.txt gpu_check_targets: the
# CLI, the GPU tests, the ceiling tool), not the CPU-only suites.
# -k 0: a test that fails to compile costs that test, not the CLI and the rest.
compile() { bounded 420 cmake --build "$build" -j "$(nproc)" --target gpu_check_targets -- -k 0 > "$logs/build.log" 2>&1; }
# The targets that failed to build ("" when none), for the build row
# (ninja 1.12 writes "FAILED: [code=1] target").
failed_targets() {
  grep -E '^FAILED: ' "$logs/build.log" | sed -E 's/^FAILED: (\[code=[0-9]+\] )?//; s/ .*//' |
    xargs -r -n1 basename | sort -u | head -5 | tr '\n' ' '
}
# Whether the build failed in cuDNN's attention (its headers, the frontend,
# the library): the one failure building again without it can mend.
# (grep -c, not -q: a -q that leaves at the first match kills the writer
# with SIGPIPE when it has more than a pipe's 64 kB left, and under pipefail
# the pipeline then reads as "no match".)
failed_in_cudnn() {
  [ "$(grep -E '^FAILED: |error:|undefined reference' "$logs/build.log" | grep -ci cudnn)" -gt 0 ]
}
# Nothing after the build can run without it: the logs' tails, the table, exit 1.
stop_after_failed_build() {
  row "build (sm_90)" "$1"
  # (tail -n: coreutils refuses the old "tail -20" form with two files.)
  tail -n 20 "$logs/build.log" "$logs/configure.log" 2>/dev/null
  printf '%s\n' "${table[@]}" | tee -a "$out/summary.txt"
  exit 1
}
# build_once [CONFIGURE ARGS...]: configure, then compile, from no CLI binary
# and no build log, so that an earlier call's (same build folder, same logs
# folder) never passes for this one's. build_phase says which step ended it.
build_once() {
  rm -f "$build/trainbench" "$logs/build.log"
  build_phase=configure
  configure "$@" || return $?
  build_phase=compile
  compile
}
# build_once after a configure that failed with cuDNN attention: its log
# kept aside, the second one's result.
build_once_without_cudnn() {
  mv "$logs/configure.log" "$logs/configure-with-cudnn.log"
  build_once -DTRAINBENCH_CUDNN=OFF
  build_status=$?
  return "$build_status"
}
is_cut() { [ "$1" -eq 124 ] || [ "$1" -eq 137 ] || [ "$1" -eq 200 ]; }
# The log of the step that ended build_once.
build_phase_log() { if [ "$build_phase" = configure ]; then echo "$logs/configure.log"; else echo "$logs/build.log"; fi; }
build_once
build_status=$?
if [ "$build_status" -eq 0 ]; then
  row "build (sm_90)" "ok ($(elapsed))"
elif is_cut "$build_status"; then
  # Cut by its time limit, not failed: building again without cuDNN would
  # only be cut again, with less time left.
  stop_after_failed_build "$(failure "$build_status" "$(build_phase_log)") ($build_phase)"
elif [ "$build_phase" = configure ] && [ "$(grep -A4 'CMake Error' "$logs/configure.log" | grep -ciE 'cudnn|nvrtc')" -gt 0 ] &&
     build_once_without_cudnn; then
  # A configure that failed on cuDNN attention's parts (its library, the
  # frontend, NVRTC) is no reason to lose the call: built without it.
  row "build (sm_90)" "ok WITHOUT cuDNN attention ($(elapsed)); with it the configure FAILED: see configure-with-cudnn.log"
elif [ "$build_phase" = configure ]; then
  stop_after_failed_build "FAILED in configure: $(failure "$build_status" "$logs/configure.log")"
elif [ -x "$build/trainbench" ]; then
  # Some targets failed (kept going: -k 0), the CLI was built by this call:
  # what can run, runs, with cuDNN attention as built (a test of its own that
  # fails to compile is no reason to rebuild without it).
  # A target that failed is a red check: its tests are missing from ctest -L
  # gpu (a placeholder without the label stands in), which no row counts.
  failed_row "build (sm_90)"
  row "build (sm_90)" "PARTIAL ($(elapsed)): failed $(failed_targets)(build.log)"
elif grep -q 'cuDNN attention ON' "$logs/configure.log" && failed_in_cudnn; then
  # cuDNN attention has never been built on the device image before its first
  # run there (its headers, library and frontend come from three places): if
  # the CLI fails to build with it, build without it rather than lose the
  # call. The engine then runs attention as GEMMs, which the table's
  # attention column and the "cuDNN attention" row say. The cache keeps OFF
  # for a second call.
  mv "$logs/build.log" "$logs/build-with-cudnn.log"
  cudnn_error=$(grep -m1 -E 'error|Error' "$logs/build-with-cudnn.log" | cut -c1-160)
  build_once -DTRAINBENCH_CUDNN=OFF
  build_status=$?
  if [ "$build_status" -eq 0 ]; then
    row "build (sm_90)" "ok WITHOUT cuDNN attention ($(elapsed)); with it: FAILED: ${cudnn_error:-see build-with-cudnn.log}"
  elif is_cut "$build_status"; then
    stop_after_failed_build "without cuDNN attention, $(failure "$build_status" "$(build_phase_log)") ($build_phase); with it: FAILED"
  elif [ "$build_phase" = compile ] && [ -x "$build/trainbench" ]; then
    failed_row "build (sm_90)"
    row "build (sm_90)" "PARTIAL WITHOUT cuDNN attention ($(elapsed)): failed $(failed_targets)(build.log); with it: ${cudnn_error:-see build-with-cudnn.log}"
  else
    stop_after_failed_build "FAILED with and without cuDNN attention: see build-with-cudnn.log / build.log / configure.log"
  fi
else
  stop_after_failed_build "FAILED: $(failed_targets)(see build.log)"
fi
timeout 20 "$build/trainbench" --version > "$logs/version.txt" 2>&1
# Whether this build has the CUDA engine: every trainbench row below needs it.
has_cuda_engine=false
grep -q "compute engines:.*cuda" "$logs/version.txt" && has_cuda_engine=true
row "cuDNN attention" "$(grep -o 'cuDNN attention: .*' "$logs/version.txt" | cut -d' ' -f3-) ($(grep -o 'cuDNN attention [A-Z]*' "$logs/configure.log" | head -1))"

# PyTorch baseline's own tests (PyTorch exists on GPU machines). They train
# on the CPU for 20-40 s, which a full run spends after the comparison (in
# the extras, 6i2), not before its figures; a tests-only run has them here.
torch_baseline_tests() {
  [ -z "${GPU_CHECK_SKIP_TORCH:-}" ] || return 0
  bounded 240 ctest --test-dir "$build" -R torch_baseline --output-on-failure > "$logs/ctest_torch_baseline.log" 2>&1
  local status=$?
  local result
  result=$(grep -E 'tests passed|tests failed' "$logs/ctest_torch_baseline.log" | tail -1)
  # A test that skipped (exit 77: CMake's python3 without torch) counts as
  # passed in ctest's line: said, as the CUDA tests' skips are.
  local skipped
  skipped=$(grep -c "(Skipped)" "$logs/ctest_torch_baseline.log" || true)
  row "torch_baseline.py tests" "${result:-$(failure $status "$logs/ctest_torch_baseline.log")} (skipped: $skipped)"
}

# Sections 2-5, the issue's comparison; GPU_CHECK_EXTRAS_ONLY=1 skips them
# (a second call on a machine that already ran them keeps its build).
if [ -z "${GPU_CHECK_EXTRAS_ONLY:-}" ]; then

# 2. CUDA tests (label gpu): they must run here, not skip.
# The NCCL communicator's tests run on their own in 2b (their own log and
# row), not twice.
# 180 s: they took well under a minute on the H200 (run 3's whole check 140 s);
# a hung one is cut at its own GPU_CHECK_TEST_TIMEOUT, and the comparison
# after them must keep its time.
bounded "${GPU_CHECK_TESTS_TIMEOUT:-180}" ctest --test-dir "$build" -L gpu -E '^NcclCommunicator' -j 4 \
  --output-on-failure > "$logs/ctest_gpu.log" 2>&1
ctest_status=$?
gpu_tests=$(grep -E "tests passed|tests failed" "$logs/ctest_gpu.log" | tail -1)
[ -n "$gpu_tests" ] || gpu_tests=$(failure $ctest_status "$logs/ctest_gpu.log")
skipped=$(grep -c "(Skipped)" "$logs/ctest_gpu.log" || true)
# On a GPU machine a skipped CUDA test means the GPU was not visible to it.
row "CUDA tests" "${gpu_tests:-no result: see ctest_gpu.log} (skipped: $skipped, must be 0 on a GPU)"
if [ "$ctest_status" -ne 0 ] || [ "$skipped" -gt 0 ]; then failed_row "CUDA tests"; fi
grep -E "^ *[0-9]+/[0-9]+ Test" "$logs/ctest_gpu.log" | grep -vE " Passed " | head -20 >> "$out/table.txt"
# A tests-only run has the PyTorch baseline's tests with the CUDA tests.
[ -z "${GPU_CHECK_TESTS_ONLY:-}" ] || torch_baseline_tests

# 2b. The NCCL communicator on one rank (world size 1, the local bootstrap):
# every collective checked element by element, bf16 and averages, background
# requests, and the timeouts that abort instead of hanging. Also under ctest -L
# gpu, which leaves them to this row so that its log says what NCCL did.
nccl_test="$build/tests/comm/test_nccl_communicator"
if [ -x "$nccl_test" ]; then
  bounded 120 "$nccl_test" > "$logs/nccl_1rank.log" 2>&1
  nccl_status=$?
  nccl_passed=$(grep -oE '^\[  PASSED  \] [0-9]+' "$logs/nccl_1rank.log" | grep -oE '[0-9]+$')
  nccl_skipped=$(grep -oE '^\[  SKIPPED \] [0-9]+' "$logs/nccl_1rank.log" | grep -oE '[0-9]+$')
  nccl_failed=$(grep -oE '^\[  FAILED  \] [0-9]+' "$logs/nccl_1rank.log" | grep -oE '[0-9]+$')
  nccl_lib=$(grep -oE 'NCCL [0-9]+\.[0-9]+\.[0-9]+' "$logs/nccl_1rank.log" | head -1)
  if [ "$nccl_status" -ne 0 ] && [ -z "$nccl_passed" ] && [ -z "$nccl_failed" ]; then
    # Cut, not started or crashed: no count to show ("passed 0, failed 0"
    # read as an empty success).
    row "NCCL comm (1 rank)" "$(failure "$nccl_status" "$logs/nccl_1rank.log")"
  else
    row "NCCL comm (1 rank)" "${nccl_lib:-NCCL ?}: passed ${nccl_passed:-0}, failed ${nccl_failed:-0}, skipped ${nccl_skipped:-0} (exit $nccl_status; skipped must be 0 on a GPU)"
    if [ "$nccl_status" -ne 0 ] || [ -n "$nccl_skipped" ]; then failed_row "NCCL comm (1 rank)"; fi
  fi
  # One rank per GPU when the machine has several (optional: needs mpirun).
  gpus=$(timeout 20 nvidia-smi -L 2> /dev/null | grep -c '^GPU' || true)
  # Without the MPI backend each rank would be a world of its own (the test
  # skips, saying so); the device image's carried packages have no MPI.
  if [ "${gpus:-0}" -ge 2 ] && command -v mpirun > /dev/null && grep -q "MPI backend ON" "$logs/configure.log"; then
    bounded 300 mpirun -np "$gpus" --allow-run-as-root "$nccl_test" --gtest_filter='NcclCommunicatorTest.*' \
      > "$logs/nccl_${gpus}ranks.log" 2>&1
    nccl_ranks_status=$?
    [ "$nccl_ranks_status" -eq 0 ] || failed_row "NCCL comm ($gpus ranks)"
    row "NCCL comm ($gpus ranks)" "exit $nccl_ranks_status ($(grep -c '^\[       OK \]' "$logs/nccl_${gpus}ranks.log") OK lines, $(grep -c '^\[  SKIPPED \]' "$logs/nccl_${gpus}ranks.log") skipped over all ranks)"
  fi
else
  # The NCCL tests, bench comm's on the GPU among them, were not registered.
  failed_row "NCCL comm (1 rank)"
  row "NCCL comm (1 rank)" "not built: $(grep -o 'NCCL backend.*' "$logs/configure.log" | head -1)"
fi

if [ -n "${GPU_CHECK_TESTS_ONLY:-}" ]; then
  row "total time" "$(elapsed) (tests only)"
  finish
fi

# 3. bf16 GEMM ceiling: a square GEMM and the Llama-3-8B MLP projection.
ceiling_tool="$build/tests/cuda/cuda_gemm_ceiling"
if bounded 120 "$ceiling_tool" 8192 8192 8192 16384 14336 4096 > "$logs/gemm_ceiling.jsonl" 2> "$logs/gemm_ceiling.err"; then
  while read -r line; do
    row "bf16 GEMM ceiling $(python3 -c 'import json,sys; d=json.loads(sys.argv[1]); print("%dx%dx%d" % (d["m"], d["n"], d["k"]))' "$line")" \
        "$(python3 -c 'import json,sys; d=json.loads(sys.argv[1]); print("%.0f TFLOP/s (%.0f%% of 989); with candidates timed %.0f TFLOP/s" % (d["flops_per_s"] / 1e12, 100 * d["flops_per_s"] / 989e12, d["timed_flops_per_s"] / 1e12))' "$line")"
  done < "$logs/gemm_ceiling.jsonl"
else
  row "bf16 GEMM ceiling" "$(failure $? "$logs/gemm_ceiling.err")"
fi

# 4. The GPU presets on trainbench's CUDA engine.
for preset in "${presets[@]}"; do
  if ! $has_cuda_engine; then
    row "trainbench $preset" "pending: this build has no CUDA engine ($(grep 'compute engines' "$logs/version.txt"))"
    continue
  fi
  # A result left by an earlier call, or by this run's failure (a failed
  # check still writes one), must not make the ratio row below.
  rm -f "$logs/$preset.json"
  if bounded "${GPU_CHECK_RUN_TIMEOUT:-150}" "$build/trainbench" run "$preset" --out "$logs/$preset.json" > "$logs/$preset.log" 2>&1; then
    row "trainbench $preset" "$(python3 scripts/lib/gpu_check_rows.py preset "$logs/$preset.json")"
    row "trainbench $preset gemm" "$(python3 scripts/lib/gpu_check_rows.py gemm "$logs/$preset.json")"
    touch "$logs/$preset.ok"
  else
    row "trainbench $preset" "$(failure $? "$logs/$preset.log")"
    rm -f "$logs/$preset.ok"
  fi
done

# 5. PyTorch on the same shapes, eager and torch.compile, right after the
# presets so that the issue's comparison is in the table even when a time
# limit cuts the extra rows below; then the ratios and the targets. The
# vocabulary padded to a multiple of 64 rows, as nanoGPT pads GPT-2's 50257
# to 50304: trainbench pads its LM head's GEMMs so, and the ratio is against
# the faster PyTorch a user would write (Llama's 128256 is a multiple already).
if [ -z "${GPU_CHECK_SKIP_TORCH:-}" ]; then
  for preset in "${presets[@]}"; do
    rm -f "$logs/torch_$preset.jsonl"
    bounded "${GPU_CHECK_TORCH_TIMEOUT:-180}" python3 scripts/torch_baseline.py --config "configs/$preset.yaml" --mode both \
      --pad-vocab 64 --json \
      > "$logs/torch_$preset.jsonl" 2> "$logs/torch_$preset.err"
    torch_status=$?
    # Every figure written, also when cut during torch.compile (the eager
    # one came first); then the failure, if any.
    while read -r line; do
      row "pytorch $preset $(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["mode"])' "$line")" \
          "$(python3 -c 'import json,sys; d=json.loads(sys.argv[1]); print(d["error"] if "error" in d else "{:,.0f} tokens/s".format(d["tokens_per_s"]))' "$line")"
    done < <(grep '^{' "$logs/torch_$preset.jsonl" 2> /dev/null)
    [ "$torch_status" -eq 0 ] || row "pytorch $preset" "$(failure "$torch_status" "$logs/torch_$preset.err")"
  done
fi

for preset in "${presets[@]}"; do
  $has_cuda_engine || continue
  if [ ! -f "$logs/$preset.ok" ]; then
    row "ratio $preset" "not computed: the trainbench run failed (its row above)"
  elif [ -s "$logs/torch_$preset.jsonl" ]; then
    row "ratio $preset" "$(python3 scripts/lib/gpu_check_rows.py ratio "$logs/$preset.json" "$logs/torch_$preset.jsonl" "$preset")"
  else
    row "ratio $preset" "no PyTorch figures in this run (GPU_CHECK_SKIP_TORCH, or it failed)"
  fi
done

# The issue's "one command under 8 minutes" is this part: build, tests,
# ceiling, presets, PyTorch and the ratios.
row "time to the ratios" "$(elapsed)"

fi  # sections 2-5

# Without the extras, the PyTorch baseline's tests (6i2) run here, after
# the comparison they would otherwise follow.
[ -z "${GPU_CHECK_SKIP_EXTRAS:-}" ] || torch_baseline_tests

# 6. Extra rows (later issues' GPU checks and the diagnostics of issue 3's
# gap), after the comparison above; GPU_CHECK_SKIP_EXTRAS=1 leaves them out.
if [ -z "${GPU_CHECK_SKIP_EXTRAS:-}" ]; then

# 6a. The engine learns at a preset's widths: GPT-2's shapes trained on one
# micro-batch over and over, whose loss must fall (it is memorised). The
# CUDA tests hold every op and the whole model to the CPU engine, at small
# shapes; the presets train on random tokens, in which there is nothing to
# learn, so a gradient wrong only at the presets' widths would pass unseen.
if $has_cuda_engine; then
  learn_run=h200-gpt2-124m-one-batch
  if bounded "${GPU_CHECK_RUN_TIMEOUT:-150}" "$build/trainbench" run h200-gpt2-124m --steps 30 \
       --set train.warmup_steps=2 --set data.source=synthetic --set data.synthetic_batches=1 \
       --out "$logs/$learn_run.json" > "$logs/$learn_run.log" 2>&1; then
    learned=$(python3 scripts/lib/gpu_check_rows.py learns "$logs/$learn_run.json")
    row "trainbench h200-gpt2-124m one batch" "$learned"
    case "$learned" in *"did not fall"* | "no row"*) failed_row "trainbench h200-gpt2-124m one batch" ;; esac
  else
    row "trainbench h200-gpt2-124m one batch" "$(failure $? "$logs/$learn_run.log")"
  fi
fi

# 6b. Where each preset's GPU time goes, by kind of op (the issue 3 targets'
# gap: Llama's MFU, GPT-2's distance to torch.compile): a short run with
# report.op_times, CUDA events between the engine's ops (no profiler needed:
# nsys is not on the device image).
if $has_cuda_engine && [ -z "${GPU_CHECK_SKIP_PROFILE:-}" ]; then
  for preset in "${presets[@]}"; do
    ops_run=$preset-op-times
    if bounded "${GPU_CHECK_PROFILE_TIMEOUT:-120}" "$build/trainbench" run "$preset" --steps 8 \
         --set train.warmup_steps=3 --set report.op_times=true --out "$logs/$ops_run.json" > "$logs/$ops_run.log" 2>&1; then
      row "$preset compute by op" "$(python3 scripts/lib/gpu_check_rows.py ops "$logs/$ops_run.json")"
    else
      row "$preset compute by op" "$(failure $? "$logs/$ops_run.log")"
    fi
  done
fi

# 6c. PyTorch on GPT-2's own 50257 rows, unpadded: how much of the PyTorch
# figure above (padded to 50304, as trainbench's LM head is) that padding is.
if [ -z "${GPU_CHECK_SKIP_TORCH:-}" ]; then
  unpadded=torch_h200-gpt2-124m-unpadded
  if bounded "${GPU_CHECK_TORCH_TIMEOUT:-180}" python3 scripts/torch_baseline.py --config configs/h200-gpt2-124m.yaml \
       --mode both --json > "$logs/$unpadded.jsonl" 2> "$logs/$unpadded.err"; then
    while read -r line; do
      row "pytorch h200-gpt2-124m $(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["mode"])' "$line") vocab unpadded" \
          "$(python3 -c 'import json,sys; d=json.loads(sys.argv[1]); print(d["error"] if "error" in d else "{:,.0f} tokens/s ({} rows)".format(d["tokens_per_s"], d["vocab_rows"]))' "$line")"
    done < <(grep '^{' "$logs/$unpadded.jsonl")
  else
    row "pytorch h200-gpt2-124m vocab unpadded" "$(failure $? "$logs/$unpadded.err")"
  fi
fi

# 6d. What the fused attention buys: the Llama-3-8B-shaped preset with
# attention as cuBLASLt GEMMs around a causal softmax (train.attention=gemm),
# side by side with the row above when that one ran cuDNN's SDPA; and what
# its deterministic backward costs. Skipped only when that row ran the GEMM
# attention already.
main_attention=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["environment"]["attention"]["kernel"])' \
                   "$logs/h200-llama8b-4l.json" 2> /dev/null || echo "not run here")
if $has_cuda_engine && [ "$main_attention" = "not run here" ] && [ -z "${GPU_CHECK_EXTRAS_ONLY:-}" ]; then
  # The preset's own run failed or was not reached in this call: its
  # variants would spend up to three run timeouts failing the same way. (A
  # GPU_CHECK_EXTRAS_ONLY call never ran it, and runs them.)
  row "trainbench h200-llama8b-4l variants" "not run: the preset's own run has no result (see h200-llama8b-4l.log)"
elif $has_cuda_engine && [ "$main_attention" != gemm ]; then
  gemm_run=h200-llama8b-4l-gemm-attention
  if bounded "${GPU_CHECK_RUN_TIMEOUT:-150}" "$build/trainbench" run h200-llama8b-4l --set train.attention=gemm \
       --out "$logs/$gemm_run.json" > "$logs/$gemm_run.log" 2>&1; then
    row "trainbench h200-llama8b-4l gemm attn" "$(python3 scripts/lib/gpu_check_rows.py variant "$logs/$gemm_run.json")"
  else
    row "trainbench h200-llama8b-4l gemm attn" "$(failure $? "$logs/$gemm_run.log")"
  fi

  # What bit-exact runs cost: each preset with cuDNN's deterministic
  # attention backward (train.deterministic=true, the default outside these
  # presets, which keeps dP, B·H·T² bf16, in cuDNN's workspace on Hopper),
  # beside the preset's own row (cuDNN's fastest backward, as PyTorch's
  # SDPA). The GEMM attention is deterministic either way.
  for preset in "${presets[@]}"; do
    det_run=$preset-deterministic
    if bounded "${GPU_CHECK_RUN_TIMEOUT:-150}" "$build/trainbench" run "$preset" --set train.deterministic=true \
         --out "$logs/$det_run.json" > "$logs/$det_run.log" 2>&1; then
      row "trainbench $preset deterministic" "$(python3 scripts/lib/gpu_check_rows.py deterministic "$logs/$det_run.json")"
    else
      row "trainbench $preset deterministic" "$(failure $? "$logs/$det_run.log")"
    fi
  done
fi

# 6e. LoRA on the Llama-3-8B-shaped preset: the adapters on q,k,v,o with the
# base frozen in bf16 (what `trainbench plan` calls the LoRA row).
if $has_cuda_engine; then
  lora_run=h200-llama8b-4l-lora
  if bounded "${GPU_CHECK_RUN_TIMEOUT:-150}" "$build/trainbench" run h200-llama8b-4l --set train.mode=lora \
       --out "$logs/$lora_run.json" > "$logs/$lora_run.log" 2>&1; then
    row "trainbench h200-llama8b-4l lora" "$(python3 scripts/lib/gpu_check_rows.py lora "$logs/$lora_run.json")"
  else
    row "trainbench h200-llama8b-4l lora" "$(failure $? "$logs/$lora_run.log")"
  fi
fi

# 6f. comm.backend=nccl through `trainbench run` on one rank: the gradient
# buckets all-reduced on the GPU by NCCL, each after its compute-stream event
# (a sum over one rank moves nothing, so comm_s is the events' overhead).
if grep -q "NCCL backend ON" "$logs/configure.log"; then
  nccl_run=h200-gpt2-124m-nccl
  if bounded 120 "$build/trainbench" run h200-gpt2-124m --steps 12 --set comm.backend=nccl \
       --out "$logs/$nccl_run.json" > "$logs/$nccl_run.log" 2>&1; then
    row "trainbench h200-gpt2-124m nccl" "$(python3 scripts/lib/gpu_check_rows.py nccl "$logs/$nccl_run.json")"
  else
    row "trainbench h200-gpt2-124m nccl" "$(failure $? "$logs/$nccl_run.log")"
  fi
else
  row "trainbench h200-gpt2-124m nccl" "not built: $(grep -o 'NCCL backend.*' "$logs/configure.log" | head -1)"
fi

# 6f2. bench comm on NCCL's device buffers (bench_buffer.h): the gradient
# step of h200-gpt2-124m and a sweep to 256 MiB, every data check exact. On
# one GPU busbw is 0 and the times are the launch and wait cost; on several
# (with mpirun and the MPI backend) one rank per GPU gives the busbw.
gpus=$(timeout 20 nvidia-smi -L 2> /dev/null | grep -c '^GPU' || true)
if grep -q "NCCL backend ON" "$logs/configure.log"; then
  comm_ranks=1
  comm_cmd=("$build/trainbench" bench comm h200-gpt2-124m --set comm.backend=nccl --max-bytes 256M --iters 10
            --out "$logs/bench_comm_nccl.json")
  if [ "${gpus:-0}" -ge 2 ] && command -v mpirun > /dev/null && grep -q "MPI backend ON" "$logs/configure.log"; then
    comm_ranks=$gpus
    comm_cmd=(mpirun -np "$gpus" --allow-run-as-root "${comm_cmd[@]}")
  fi
  if bounded 120 "${comm_cmd[@]}" > "$logs/bench_comm_nccl.log" 2>&1; then
    row "bench comm nccl ($comm_ranks GPU(s))" "$(python3 scripts/lib/gpu_check_rows.py bench_comm "$logs/bench_comm_nccl.json")"
  else
    row "bench comm nccl ($comm_ranks GPU(s))" "$(failure $? "$logs/bench_comm_nccl.log")"
  fi
fi

# 6g, several GPUs (and mpirun): data parallelism over NCCL
# with ZeRO-1, one rank per GPU (ZeRO-1 needs two ranks at least). The ranks'
# parameter checksums must agree; the row gives the AdamW state per rank.
if [ "${gpus:-0}" -ge 2 ] && command -v mpirun > /dev/null && grep -q "NCCL backend ON" "$logs/configure.log" &&
   grep -q "MPI backend ON" "$logs/configure.log"; then
  zero_run=h200-gpt2-124m-zero1
  if bounded 180 mpirun -np "$gpus" --allow-run-as-root "$build/trainbench" run h200-gpt2-124m --steps 12 \
       --set comm.zero=1 --out "$logs/$zero_run.json" > "$logs/$zero_run.log" 2>&1; then
    row "trainbench h200-gpt2-124m zero1 ($gpus GPUs)" "$(python3 scripts/lib/gpu_check_rows.py zero1 "$logs/$zero_run.json")"
  else
    row "trainbench h200-gpt2-124m zero1 ($gpus GPUs)" "$(failure $? "$logs/$zero_run.log")"
  fi
fi

# 6h. A one-minute burn-in on the GPU: golden step, NVML sampling every 5 s
# (temperature, power, SM clock, clock-event reasons, ECC, PCIe replays),
# storage at the start and every 20 s. Exit 4 is a FAIL verdict: the row says why.
if $has_cuda_engine; then
  # checkpoint.every_steps: the preset has none; a burn-in checkpoints as a
  # job does (the storage check needs the folder, and waits for a
  # checkpoint in flight before it measures): 2.67 GB every 200 steps, a few
  # in the minute.
  rm -f "$logs/burnin.json"
  bounded "${GPU_CHECK_BURNIN_TIMEOUT:-150}" "$build/trainbench" burnin h200-gpt2-124m --duration 1m \
    --set burnin.nvml_every_s=5 --set burnin.golden_every=50 --set burnin.health_every_s=20 \
    --set checkpoint.every_steps=200 \
    --set report.progress_every=0 --out "$logs/burnin.json" > "$logs/burnin.log" 2>&1
  burnin_status=$?
  if [ -s "$logs/burnin.json" ] && [ "$burnin_status" -le 4 ]; then
    row "trainbench burnin 1m" "$(python3 scripts/lib/gpu_check_rows.py burnin "$logs/burnin.json" "$burnin_status")"
    [ "$burnin_status" -eq 0 ] || failed_row "trainbench burnin 1m (exit $burnin_status)"
  else
    row "trainbench burnin 1m" "$(failure "$burnin_status" "$logs/burnin.log")"
  fi
else
  row "trainbench burnin 1m" "pending: this build has no CUDA engine ($(grep 'compute engines' "$logs/version.txt"))"
fi

# 6i. What the per-step timing costs on the GPU (issue 7's <= 1%): timed and
# untimed blocks of steps alternating in one process, the CUDA engine's
# timing events included (trainbench bench instrument).
if $has_cuda_engine; then
  if bounded "${GPU_CHECK_INSTRUMENT_TIMEOUT:-90}" "$build/trainbench" bench instrument h200-gpt2-124m --pairs 20 \
       --block-steps 5 --out "$logs/instrument.json" > "$logs/instrument.log" 2>&1; then
    row "trainbench bench instrument" "$(python3 scripts/lib/gpu_check_rows.py instrument "$logs/instrument.json")"
  else
    row "trainbench bench instrument" "$(failure $? "$logs/instrument.log")"
  fi
fi

# 6i2. The PyTorch baseline's own tests (CPU work: after every GPU figure
# but the sanitizer's).
torch_baseline_tests

# 6j (last: the slowest for what it tells about the targets). compute-sanitizer
# over the op tests: kernels written or changed since
# the last GPU run were read, not run. memcheck finds out-of-bounds and
# misaligned accesses, racecheck shared-memory races; the tests pass or fail
# on values alone, so neither would show there. Where the image has it. Our
# kernels only: cuDNN's test runs its library's kernels, 10-100x slower there.
if [ -z "${GPU_CHECK_SKIP_SANITIZER:-}" ]; then
  sanitizer=$(command -v compute-sanitizer || true)
  nvcc_dir=$(dirname "$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)")
  for candidate in "$nvcc_dir/compute-sanitizer" "$nvcc_dir/../compute-sanitizer/compute-sanitizer" \
                   /usr/local/cuda/bin/compute-sanitizer /usr/local/cuda/compute-sanitizer/compute-sanitizer; do
    [ -z "$sanitizer" ] && [ -x "$candidate" ] && sanitizer=$candidate
  done
  if [ -z "$sanitizer" ]; then
    row "compute-sanitizer" "not found (not on PATH nor beside nvcc): not run"
  elif [ ! -x "$build/tests/cuda/test_cuda_ops" ]; then
    row "compute-sanitizer" "not run: $build/tests/cuda/test_cuda_ops was not built"
  else
    for tool in memcheck racecheck; do
      log=$logs/sanitizer_$tool.log
      bounded "${GPU_CHECK_SANITIZER_TIMEOUT:-60}" "$sanitizer" --tool "$tool" --error-exitcode 9 \
        "$build/tests/cuda/test_cuda_ops" --gtest_filter='CudaOps.*:-CudaOps.Cudnn*' > "$log" 2>&1
      status=$?
      case $status in
        0) row "compute-sanitizer $tool CudaOps" "$(grep -m1 -oE '[0-9]+ tests? from' "$log" | cut -d' ' -f1) tests, $(grep -oE 'ERROR SUMMARY: [0-9]+ errors?' "$log" | tail -1)" ;;
        9) failed_row "compute-sanitizer $tool"
           row "compute-sanitizer $tool CudaOps" "ERRORS: $(grep -oE 'ERROR SUMMARY: [0-9]+ errors?' "$log" | tail -1); first: $(grep -m1 -E '^========= [A-Z]' "$log" | cut -c1-160)" ;;
        *) row "compute-sanitizer $tool CudaOps" "$(failure $status "$log")" ;;
      esac
    done
  fi
fi

fi  # extras

row "total time" "$(elapsed)"
echo
finish
