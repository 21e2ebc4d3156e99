#!/usr/bin/env bash
# The whole test suite: set up, build, then every test under CTest (unit, world, transport,
# multiproc, chaos; gpu and python where available). Ends with CTest's summary line and
# fails if any test fails.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$ROOT/scripts/setup.sh"
cd "$BUILD_DIR"
echo "== ctest"
ctest --output-on-failure -j "${CTEST_JOBS:-2}" --timeout 900 "$@"
