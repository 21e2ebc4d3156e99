#!/usr/bin/env bash
# Builds the braid Python package against a given libbraid and runs tests/python under
# pytest. Called by CTest (tests/python/CMakeLists.txt); usable by hand:
#   bash tests/python/run_pytest.sh ENV_DIR LIBBRAID BUILD_DIR REPO_ROOT [pytest args...]
# Exits 77 (CTest: skipped) when ENV_DIR has no Python.
set -euo pipefail
ENV_DIR="$1" LIB="$2" OUT="$3" ROOT="$4"
shift 4
if [ ! -x "$ENV_DIR/bin/python" ]; then
  echo "SKIPPED: no braid Python environment at $ENV_DIR; create it with: bash scripts/python_env.sh"
  exit 77
fi
PY="$ENV_DIR/bin/python"
# BRAID_PYTEST_MODE: build (only build the package), test (only run pytest on the package
# built before), all (the default: both), gpu (only the CUDA tests, on the package built
# before).
MODE="${BRAID_PYTEST_MODE:-all}"
if [ "$MODE" != test ] && [ "$MODE" != gpu ]; then
  echo "== building the braid Python package against $LIB"
  # --upgrade replaces the previous build in the target folder; the CMake build dir is kept so
  # that an unchanged tree rebuilds in seconds.
  "$PY" -m pip install -q --disable-pip-version-check --upgrade --no-build-isolation --no-deps \
    -C build-dir="$OUT/pybuild" -C cmake.define.BRAID_PREBUILT_LIBRARY="$LIB" -C cmake.define.BRAID_PY_TORCH=ON \
    -C cmake.define.BRAID_PREBUILT_PROGRAMS="${BRAID_PY_PROGRAMS//:/;}" \
    --target "$OUT/site" "$ROOT/python"
fi
[ "$MODE" = build ] && exit 0
if [ ! -d "$OUT/site/braid" ]; then
  echo "no package at $OUT/site (its build step failed or did not run)"
  exit 1
fi
cd "$ROOT/tests/python"
if [ "$MODE" = gpu ]; then
  # The CUDA tests alone; skipped (77) where torch sees no GPU, saying why.
  if ! why=$("$PY" -c 'import sys, torch
if torch.cuda.is_available():
    sys.exit(0)
print("torch", torch.__version__, "sees no GPU (torch.cuda.is_available() is False)")
sys.exit(1)' 2>&1); then
    echo "SKIPPED: $why"
    exit 77
  fi
fi
# Every temporary file of the run (the ranks' logs and results, torchrun's and torchft's
# folders) goes to a folder of its own, removed when the run passed and kept, named, when not.
export TMPDIR
TMPDIR=$(mktemp -d /tmp/braid-py-XXXXXX)
status=0
if [ "$MODE" = gpu ]; then
  echo "== pytest tests/python/test_cuda.py"
  BRAID_PYTHON_SITE="$OUT/site" "$PY" -m pytest -q -rfEs -p no:cacheprovider "$@" test_cuda.py || status=$?
else
  echo "== pytest tests/python"
  BRAID_PYTHON_SITE="$OUT/site" "$PY" -m pytest -q -rfEs -p no:cacheprovider --ignore=test_cuda.py "$@" . || status=$?
fi
if [ "$status" = 0 ] || [ "$status" = 5 ]; then
  rm -rf "$TMPDIR"
else
  echo "== the run's temporary files are kept in $TMPDIR"
fi
exit "$status"
