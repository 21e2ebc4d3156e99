#!/usr/bin/env bash
# Runs tests/horovod under pytest: Horovod's front end from ENV_DIR, copied into OUT/hvd and
# made to run on the braid package at SITE (python -m braid.horovod install), so the
# environment's own Horovod stays untouched. Called by CTest; by hand:
#   bash tests/horovod/run_horovod.sh ENV_DIR SITE OUT REPO_ROOT BRAIDRUN [pytest args...]
# Exits 77 (CTest: skipped) when ENV_DIR has no Python or no Horovod front end.
set -euo pipefail
ENV_DIR="$1" SITE="$2" OUT="$3" ROOT="$4" BRAIDRUN="$5"
shift 5
PY="$ENV_DIR/bin/python"
if [ ! -x "$PY" ]; then
  echo "SKIPPED: no braid Python environment at $ENV_DIR; create it with: bash scripts/python_env.sh"
  exit 77
fi
HVD=$("$PY" -c 'import importlib.util as u, os; s = u.find_spec("horovod"); print(os.path.dirname(s.origin) if s else "")')
if [ -z "$HVD" ]; then
  echo "SKIPPED: Horovod's front end is not installed in $ENV_DIR; install it with: bash scripts/python_env.sh"
  exit 77
fi
if [ ! -d "$SITE/braid/horovod" ]; then
  echo "no braid package with its Horovod core at $SITE (python_build failed or did not run)"
  exit 1
fi
rm -rf "$OUT/hvd"
mkdir -p "$OUT/hvd"
cp -r "$HVD" "$OUT/hvd/horovod"
PYTHONPATH="$SITE" "$PY" -m braid.horovod install --horovod-dir "$OUT/hvd/horovod"
echo "== pytest tests/horovod"
cd "$ROOT/tests/horovod"
# Temporary files (torch's elastic folders among them) in a folder of the run's own, removed
# when it passed and kept, named, when not.
export TMPDIR
TMPDIR=$(mktemp -d /tmp/braid-hvd-run-XXXXXX)
status=0
PYTHONPATH="$OUT/hvd:$SITE" BRAIDRUN="$BRAIDRUN" PATH="$ENV_DIR/bin:$PATH" \
  "$PY" -m pytest -q -rfEs -p no:cacheprovider "$@" . || status=$?
if [ "$status" = 0 ]; then
  rm -rf "$TMPDIR"
else
  echo "== the run's temporary files are kept in $TMPDIR"
fi
exit "$status"
