#!/usr/bin/env bash
# The cuDNN frontend's header-only C++ API (NVIDIA's graph API over cuDNN,
# which the CUDA engine's fused attention is built with), from its PyPI wheel:
# no Debian package carries it. Unpacks the wheel's include/ into DEST,
# idempotently (nothing is done when DEST already holds this version).
#
#   scripts/cudnn_frontend.sh DEST     # e.g. /opt/cudnn-frontend/include
#
# scripts/setup.sh puts it in /opt/cudnn-frontend/include and
# scripts/device_deps.sh in .device/cudnn_frontend/include, both of which
# kernels/cuda/CMakeLists.txt looks in (or set CUDNN_FRONTEND_INCLUDE).
set -euo pipefail
version=1.32.0
dest=${1:?usage: scripts/cudnn_frontend.sh DEST}
if grep -qs "CUDNN_FRONTEND_MINOR_VERSION $(echo "$version" | cut -d. -f2)\$" "$dest/cudnn_frontend_version.h"; then
  echo "cudnn_frontend: $version present in $dest"
  exit 0
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
python3 -m pip download -q --disable-pip-version-check --no-deps --only-binary=:all: \
  -d "$work" "nvidia-cudnn-frontend==$version"
mkdir -p "$dest"
python3 - "$work" "$dest" <<'PY'
import glob, os, sys, zipfile
work, dest = sys.argv[1], sys.argv[2]
wheel = glob.glob(os.path.join(work, "*.whl"))[0]
with zipfile.ZipFile(wheel) as z:
    members = [m for m in z.namelist() if m.startswith("include/") and not m.endswith("/")]
    # The version header is what marks DEST complete (the check above):
    # written last, so an unpacking cut short is done again, not taken as present.
    members.sort(key=lambda m: m.endswith("/cudnn_frontend_version.h"))
    for m in members:
        target = os.path.join(dest, m[len("include/"):])
        os.makedirs(os.path.dirname(target), exist_ok=True)
        with z.open(m) as src, open(target, "wb") as out:
            out.write(src.read())
print(f"cudnn_frontend: {len(members)} headers from {os.path.basename(wheel)} into {dest}")
PY
