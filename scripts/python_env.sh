#!/usr/bin/env bash
# Creates (or reuses) the Python environment for braid's Python package, its PyTorch backend
# and tests/python: a venv OUTSIDE the clone (default /var/cache/braid/pyenv, override with
# BRAID_PYENV=...) so that repeated runs and fresh clones on the same machine reuse it.
# Idempotent: a stamp file records the pinned set; a matching stamp means nothing to do.
#
# torch comes from PyPI, pinned. Its Linux wheel declares ~3 GB of nvidia-* CUDA packages.
# braid's backend only needs torch on the CPU, but torch's shared libraries still link the
# CUDA runtime libraries at import time. torch 2.14.1 is built against CUDA 13.0, the same
# major as the toolkit on the project's machines (/usr/local/cuda, on the loader path), so we
# install torch with --no-deps plus only the four CUDA libraries that toolkit lacks (cuFile,
# cuSPARSELt, NVSHMEM, and an NCCL new enough for torch's symbols) - about 1 GB in all. If
# torch still does not import that way (no CUDA 13 toolkit), we fall back to the full,
# ordinary `pip install torch==2.14.1`.
#
# Usage: bash scripts/python_env.sh          then: source "$(bash scripts/python_env.sh --print)"/bin/activate
set -euo pipefail

ENV_DIR="${BRAID_PYENV:-/var/cache/braid/pyenv}"
if [ "${1:-}" = "--print" ]; then echo "$ENV_DIR"; exit 0; fi
PYTHON="${PYTHON:-python3}"

TORCH_VERSION=2.14.1
# Pure-Python dependencies of torch 2.14.1, pinned to what its resolver picks today.
TORCH_PURE_DEPS=(filelock==4.2.12 fsspec==2026.9.0 jinja2==3.1.6 markupsafe==3.0.4 networkx==3.6.1
                 sympy==1.14.0 mpmath==1.3.0 typing_extensions==4.16.0 setuptools==84.2.1)
# The CUDA libraries torch 2.14.1 needs that the CUDA 13.0 toolkit does not ship (or ships
# too old: its NCCL lacks ncclCommResume).
TORCH_CUDA_EXTRAS=(nvidia-cufile==1.15.1.6 nvidia-cusparselt-cu13==0.8.1 nvidia-nvshmem-cu13==3.4.5
                   nvidia-nccl-cu13==2.30.7)
# Building and testing braid's package.
TOOLS=(numpy==2.4.6 pytest==9.0.3 scikit-build-core==1.1.2 nanobind==3.1.0)
# Horovod's pure-Python front end (its last release), whose native core braid provides
# (python -m braid.horovod install), and the pure-Python packages it needs. Built from its
# source distribution with HOROVOD_SKIP_COMPILE=1: no compiler runs, nothing of Horovod's C++.
HOROVOD=horovod==0.28.1
HOROVOD_DEPS=(cloudpickle==3.1.2 psutil==7.2.2 pyyaml==6.0.3 cffi==2.1.1 pycparser==3.12 packaging==26.3)

# torchft (fault-tolerant training across replica groups; braid.torchft is its process group on
# braid) and what it needs besides torch. Installed with --no-deps too: pip would otherwise
# resolve torch's own requirements again and pull its 3 GB of CUDA wheels. Optional: where no
# wheel of it installs, its test says so and is skipped.
TORCHFT=torchft==0.2.0
TORCHFT_DEPS=(opentelemetry-api==1.45.2 opentelemetry-sdk==1.45.2 opentelemetry-exporter-otlp-proto-http==1.45.2
              opentelemetry-exporter-otlp-proto-common==1.45.2 opentelemetry-proto==1.45.2
              opentelemetry-semantic-conventions==0.66b2 opentelemetry-exporter-http-transport==0.66b2
              opentelemetry-exporter-otlp-common==0.66b2 googleapis-common-protos==1.76.0 protobuf==7.36.2
              requests==2.34.2 urllib3==2.8.0 certifi==2026.10.19.post1 charset-normalizer==3.5.3 idna==3.20)

STAMP_TEXT="torch=$TORCH_VERSION ${TORCH_PURE_DEPS[*]} ${TORCH_CUDA_EXTRAS[*]} ${TOOLS[*]} $HOROVOD ${HOROVOD_DEPS[*]} $TORCHFT ${TORCHFT_DEPS[*]}"
STAMP="$ENV_DIR/.braid-env-stamp"

if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$STAMP_TEXT" ] && "$ENV_DIR/bin/python" -c "import torch, numpy, nanobind, horovod" 2>/dev/null; then
  echo "== python env ready: $ENV_DIR (torch $TORCH_VERSION)"
  echo "   activate with: source $ENV_DIR/bin/activate"
  exit 0
fi

echo "== creating python env in $ENV_DIR"
mkdir -p "$(dirname "$ENV_DIR")"
# A venv module is part of CPython; Debian's system python needs python3-venv for it.
if ! "$PYTHON" -c "import venv, ensurepip" 2>/dev/null; then
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo"
  $SUDO apt-get update -q >/dev/null && $SUDO apt-get install -y -q python3-venv >/dev/null
fi
[ -x "$ENV_DIR/bin/python" ] || "$PYTHON" -m venv "$ENV_DIR"
PIP=("$ENV_DIR/bin/python" -m pip install -q --disable-pip-version-check)

"${PIP[@]}" "${TOOLS[@]}" "${TORCH_PURE_DEPS[@]}"
"${PIP[@]}" --no-deps "torch==$TORCH_VERSION" "${TORCH_CUDA_EXTRAS[@]}"

if ! "$ENV_DIR/bin/python" -c "import torch" 2>/tmp/braid-torch-import.$$; then
  if [ -e /usr/local/cuda/lib64/libcudart.so.13 ] &&
     LD_LIBRARY_PATH=/usr/local/cuda/lib64 "$ENV_DIR/bin/python" -c "import torch" 2>/dev/null; then
    # The toolkit is there but not on the loader path: put it there for this venv only.
    echo 'export LD_LIBRARY_PATH="/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"' >> "$ENV_DIR/bin/activate"
  else
    echo "== torch does not import with the local CUDA toolkit ($(tail -1 /tmp/braid-torch-import.$$));"
    echo "   installing torch $TORCH_VERSION with all of its CUDA dependencies"
    "${PIP[@]}" "torch==$TORCH_VERSION"
  fi
fi
rm -f /tmp/braid-torch-import.$$
"${PIP[@]}" "${HOROVOD_DEPS[@]}"
HOROVOD_SKIP_COMPILE=1 HOROVOD_WITHOUT_TENSORFLOW=1 HOROVOD_WITHOUT_MXNET=1 "${PIP[@]}" --no-deps "$HOROVOD"
if ! { "${PIP[@]}" "${TORCHFT_DEPS[@]}" && "${PIP[@]}" --no-deps "$TORCHFT" &&
       "$ENV_DIR/bin/python" -c "import torchft, torchft._torchft"; }; then
  echo "== $TORCHFT did not install here; tests/python/test_torchft.py will be skipped"
fi
"$ENV_DIR/bin/python" -c "import torch, torch.distributed as d; assert d.is_available() and d.is_gloo_available(); print('== torch', torch.__version__, 'imports (CPU)')"
echo "$STAMP_TEXT" > "$STAMP"
echo "== python env ready: $ENV_DIR"
echo "   activate with: source $ENV_DIR/bin/activate"
