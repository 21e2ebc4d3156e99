#!/usr/bin/env bash
# The whole test suite: set up, build, then every test under CTest (unit, world, transport,
# multiproc, chaos; gpu and python where available). Ends with CTest's summary line and
# fails if any test fails.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$ROOT/scripts/setup.sh"
# The PyTorch backend's tests need torch: a pinned, CPU-usable install cached outside the
# clone (quick when already there). Without it they report themselves skipped.
bash "$ROOT/scripts/python_env.sh" || echo "== python environment unavailable: python tests will be skipped"
# cuobjdump and nvdisasm for the CUDA device-code check, from PyPI when the toolkit lacks them.
bash "$ROOT/scripts/cuda_tools.sh" || echo "== CUDA binary tools unavailable: the device-code check will be skipped"
cd "$BUILD_DIR"
echo "== ctest"
ctest --output-on-failure -j "${CTEST_JOBS:-2}" --timeout 900 "$@"
