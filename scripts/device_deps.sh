#!/usr/bin/env bash
# Build dependencies for a GPU machine that has nvcc, CMake, ninja and PyTorch
# but no internet and none of the Debian -dev packages trainbench builds with.
#
#   scripts/device_deps.sh download   # here (has apt): the .deb files → .device/debs/,
#                                     # the cuDNN frontend's headers → .device/cudnn_frontend/
#   scripts/device_deps.sh install    # there: unpack into .device-prefix/, write .device/env.sh
#
# The device tool carries .device/ (git-ignored) with `carry: [".device"]`;
# scripts/gpu_check.sh runs `install` when it finds .device/debs and sources
# .device/env.sh. The packages are Debian 12's: the target's glibc must be
# 2.36 or newer (checked by `install`).
set -euo pipefail
# gpu_check.sh's table shows this script's last lines: a command that ends it
# under set -e says which one.
trap 'echo "device_deps: failed at line $LINENO (exit $?)" >&2' ERR
cd "$(dirname "$0")/.."
debs=.device/debs
# Beside .device, not in it: the 150 MB a dry run of gpu_check here unpacks
# would take the carried .device past the device tool's 64 MiB limit.
prefix=$PWD/.device-prefix
arch_dir=usr/lib/x86_64-linux-gnu

# What the build needs beyond a compiler, CMake and CUDA: -dev packages and the
# runtime libraries they link against. No libtorch (the GPU check uses
# PyTorch's Python package for its baseline; the libtorch tests are CPU-side).
PACKAGES=(
  libopenblas-dev libopenblas-pthread-dev libopenblas0-pthread libopenblas0 libgfortran5
  libyaml-cpp-dev libyaml-cpp0.7
  nlohmann-json3-dev libcli11-dev
  libxxhash-dev libxxhash0      # XXH64 of checkpoint files
  libgtest-dev libgmock-dev
  # tar shards: libarchive and the libraries Debian's build of it links
  libarchive-dev libarchive13 libacl1 libnettle8 libxml2 libicu72 liblz4-1 libzstd1
  zlib1g-dev                    # gzip shards: inflated by zlib (dataloader/gzip_tar_stream.h)
)

case "${1:-}" in
  download)
    # Into a fresh folder: an earlier download's packages, left beside a
    # point release's newer ones, were unpacked after them (glob order is
    # not version order: deb12u10 before deb12u9) and won.
    rm -rf "$debs.new" && mkdir -p "$debs.new"
    (cd "$debs.new" && apt-get download "${PACKAGES[@]}")
    rm -rf "$debs" && mv "$debs.new" "$debs"
    du -sh "$debs"
    # The cuDNN frontend's headers (PyPI only; kernels/cuda/CMakeLists.txt
    # finds them here). cuDNN itself is the device's: its CUDA toolkit's or
    # PyTorch's wheel (scripts/gpu_check.sh).
    bash scripts/cudnn_frontend.sh .device/cudnn_frontend/include
    # cuDNN's own headers (384 KB), for a device whose cuDNN (PyTorch's
    # wheel) comes without them: the API is cuDNN 9's either way.
    mkdir -p .device/cudnn_headers/include
    cp /usr/local/cuda/include/cudnn*.h .device/cudnn_headers/include/ 2> /dev/null ||
      echo "device_deps: no cuDNN headers here to carry (/usr/local/cuda/include/cudnn*.h)" >&2
    # A dry run of gpu_check here leaves links to this machine's wheels
    # (.device/cudnn, .device/nccl, .device/nvrtc) and an env.sh naming its prefix; the
    # device makes its own.
    rm -rf .device/env.sh .device/cudnn .device/nccl .device/nvrtc .device/prefix
    du -sh .device
    ;;
  install)
    [ -d "$debs" ] || { echo "device_deps: no $debs: run 'scripts/device_deps.sh download' where apt works" >&2; exit 2; }
    # getconf, not `ldd --version | head -1`: ldd is a script that goes on
    # writing after head has left, and its SIGPIPE under pipefail ended this
    # script on a few runs in a hundred.
    glibc=$(getconf GNU_LIBC_VERSION | awk '{print $2}')
    if [ "$(printf '%s\n2.36\n' "$glibc" | sort -V | head -1)" != "2.36" ]; then
      echo "device_deps: glibc $glibc is older than Debian 12's 2.36: these packages will not load" >&2
      exit 3
    fi
    rm -rf "$prefix"
    mkdir -p "$prefix"
    for deb in "$debs"/*.deb; do dpkg-deb -x "$deb" "$prefix"; done
    # Debian's package configs name /usr/... absolutely: point them at the prefix.
    # (No file to change is no failure: grep's exit 1 would end the script.)
    { grep -rlE '(^|[^A-Za-z0-9_])/usr/' "$prefix" --include='*.cmake' --include='*.pc' || true; } |
      while read -r file; do sed -i "s#\([^A-Za-z0-9_]\)/usr/#\1$prefix/usr/#g" "$file"; done
    # What update-alternatives would have linked on a real install: the
    # package ships cmake/openblas/ empty and the pthread variant's files.
    mkdir -p "$prefix/$arch_dir/cmake/openblas"
    for file in "$prefix/$arch_dir"/openblas-pthread/cmake/openblas/*.cmake; do
      ln -sf "../../openblas-pthread/cmake/openblas/$(basename "$file")" "$prefix/$arch_dir/cmake/openblas/"
    done
    # zlib1g-dev's libz.so links to /lib/.../libz.so.1.2.13, Debian 12's
    # runtime, which is not carried: the device's own libz.so.1 (the one its
    # libarchive and PyTorch load) is linked instead.
    if [ ! -e "$prefix/$arch_dir/libz.so" ]; then
      # awk reads all of ldconfig's output (no early exit): under pipefail,
      # ldconfig killed by SIGPIPE (its output is ~75 kB) ended this script.
      # ldconfig may be off a non-root PATH (/sbin): its failure under
      # set -e and pipefail ended install with exit 127, nothing unpacked.
      system_libz=$({ ldconfig -p 2> /dev/null || /sbin/ldconfig -p 2> /dev/null || true; } |
        awk '/libz\.so\.1 .*x86-64/ && !found { print $NF; found = 1 }')
      if [ -n "$system_libz" ]; then ln -sfn "$system_libz" "$prefix/$arch_dir/libz.so"; fi
    fi
    cat > .device/env.sh <<ENV
# Written by scripts/device_deps.sh install: the unpacked packages for CMake,
# the compiler and the loader.
export CMAKE_PREFIX_PATH="$prefix/usr\${CMAKE_PREFIX_PATH:+:\$CMAKE_PREFIX_PATH}"
export CPATH="$prefix/usr/include:$prefix/usr/include/x86_64-linux-gnu\${CPATH:+:\$CPATH}"
export LIBRARY_PATH="$prefix/$arch_dir:$prefix/$arch_dir/openblas-pthread\${LIBRARY_PATH:+:\$LIBRARY_PATH}"
export LD_LIBRARY_PATH="$prefix/$arch_dir:$prefix/$arch_dir/openblas-pthread\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}"
ENV
    echo "device_deps: unpacked $(ls "$debs" | wc -l) packages into $prefix; source .device/env.sh"
    ;;
  *)
    echo "usage: scripts/device_deps.sh download|install" >&2
    exit 2
    ;;
esac
