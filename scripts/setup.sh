#!/usr/bin/env bash
# Set up fp8attn in the current Python environment on a fresh machine: torch (the pinned 2.13.0
# CPU wheel when no torch is installed — never an unpinned one, which would pull a multi-GB CUDA
# build), the build tools, and the package itself, built against that torch (CPU implementation;
# plus the GPU kernels when torch is a CUDA or ROCm build).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
pip_install() { "$PY" -m pip install --disable-pip-version-check --no-input --progress-bar off --root-user-action=ignore -q "$@"; }
if ! "$PY" -c "import torch" 2>/dev/null; then
  pip_install torch==2.13.0
fi
pip_install "setuptools>=64" "cmake>=3.22" ninja numpy
MAX_JOBS=${MAX_JOBS:-$(nproc)} pip_install --no-build-isolation -e .
"$PY" -c "import fp8attn, torch; print('fp8attn', fp8attn.__version__, 'on torch', torch.__version__)"
