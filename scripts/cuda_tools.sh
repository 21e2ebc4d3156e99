#!/usr/bin/env bash
# The CUDA binary tools the device-code check needs (cuobjdump, and nvdisasm for its -sass),
# when the toolkit has nvcc but not them (the build machines' CUDA 13 install lacks both):
# NVIDIA's wheels from PyPI, unpacked OUTSIDE the clone into $BRAID_CUDA_TOOLS (default
# /var/cache/braid/cuda-tools), where tests/unit/cuda/check_device_code.py looks. Quick when
# already there; best effort: without them that check reports itself skipped.
set -euo pipefail
CUDA_BIN="${CUDA_BIN:-/usr/local/cuda/bin}"
DEST="${BRAID_CUDA_TOOLS:-/var/cache/braid/cuda-tools}"
VERSION=13.2.86
[ -x "$CUDA_BIN/nvcc" ] || exit 0                      # no toolkit: no device code to check
[ -x "$CUDA_BIN/cuobjdump" ] && [ -x "$CUDA_BIN/nvdisasm" ] && exit 0
if ls "$DEST"/nvidia/cu*/bin/cuobjdump "$DEST"/nvidia/cu*/bin/nvdisasm >/dev/null 2>&1; then exit 0; fi
PY="$(bash "$(dirname "${BASH_SOURCE[0]}")/python_env.sh" --print)/bin/python"
[ -x "$PY" ] || PY=python3
echo "== installing cuobjdump and nvdisasm $VERSION into $DEST"
"$PY" -m pip install -q --no-deps --target "$DEST" \
  "nvidia-cuda-cuobjdump==$VERSION" "nvidia-cuda-nvdisasm==$VERSION"
