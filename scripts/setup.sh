#!/usr/bin/env bash
# Installs every build and test dependency of trainbench, idempotently.
# Debian packages for the C++ side, pinned PyPI packages (scripts/requirements.txt)
# for the Python tools. Safe to run again: it only installs what is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

DEBIAN_PACKAGES=(
  cmake ninja-build g++ pkg-config git
  libopenblas-dev               # cblas_sgemm for the CPU engine
  libopenmpi-dev openmpi-bin    # MPI launcher and host-buffer communicator
  libarchive-dev                # tar shards
  zlib1g-dev                    # gzip shards, inflated with their CRC-32 checked
  libyaml-cpp-dev               # configs
  nlohmann-json3-dev            # result JSON
  libxxhash-dev                 # XXH64 of checkpoint files
  xxhash                        # xxhsum: the tests check our XXH64 against it
  libcli11-dev                  # command line
  libgtest-dev libgmock-dev     # unit tests
  libtorch-dev                  # the reference model in the kernel tests
  gcovr                         # scripts/coverage.sh's report of the tests' line and branch coverage
  iproute2                      # ip netns, tc: scripts/validate_fabric_projection.sh emulates a fabric
  slurmctld slurmd slurm-client munge   # a one-node Slurm (scripts/slurm/local_cluster.sh): the sbatch path's test
  python3 python3-pip           # Debian's python3 comes without pip
)

# A node of a real cluster has its site's Slurm (built from source, not
# Debian's): Debian's daemons beside it, installed only for one test, could
# start and meet the site's. There the one-node Slurm is left out, and the
# sbatch-path test skips, saying why; the site's sbatch is what scale.sh
# --slurm uses.
site_slurm=""
if command -v sbatch > /dev/null &&
   ! dpkg-query -W -f='${Status}' slurm-client 2>/dev/null | grep -q "install ok installed"; then
  site_slurm=$(command -v sbatch)
  echo "setup: a site Slurm is here ($site_slurm, not Debian's): Debian's one-node Slurm and munge are left out"
fi

missing=()
for pkg in "${DEBIAN_PACKAGES[@]}"; do
  if [ -n "$site_slurm" ]; then
    case $pkg in slurmctld | slurmd | slurm-client | munge) continue ;; esac
  fi
  if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$pkg")
  fi
done

SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi

if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
else
  echo "setup: Debian packages present"
fi

# Python tools (webdataset interop tests, report plots). python3 on PATH may be
# a non-Debian interpreter, so these come from PyPI, pinned in one file.
# Debian's own refuses installs into it (PEP 668, "externally-managed-
# environment") unless told: a machine set up for trainbench (CI's, a
# benchmark node) is told. Other interpreters ignore the variable.
if ! python3 -c "import importlib.metadata as m, sys
req = [l.split('==') for l in open('scripts/requirements.txt') if '==' in l]
sys.exit(0 if all(m.version(n.strip()) == v.strip() for n, v in req) else 1)" 2>/dev/null; then
  echo "setup: installing Python requirements"
  PIP_BREAK_SYSTEM_PACKAGES=1 python3 -m pip install -q --disable-pip-version-check -r scripts/requirements.txt
else
  echo "setup: Python requirements present"
fi

# The cuDNN frontend's headers (PyPI only), for the CUDA engine's fused
# attention; cuDNN itself comes with the CUDA toolkit. Only where nvcc is.
if [ -x /usr/local/cuda/bin/nvcc ] || command -v nvcc > /dev/null; then
  bash scripts/cudnn_frontend.sh /opt/cudnn-frontend/include
fi
