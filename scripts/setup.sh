#!/usr/bin/env bash
# Set up fp8attn in the current Python environment on a fresh machine, with everything that
# `python -m fp8attn` needs:
#   - torch: the pinned 2.13.0 CPU wheel when no torch is installed (never an unpinned one, which would
#     pull a multi-GB CUDA build); an installed torch is kept, and nothing below may replace it;
#   - what the main job's model comparison imports (fp8attn/eval.py): transformers and its tokenizers,
#     safetensors and huggingface_hub, at versions that satisfy vLLM 0.33 (scripts/vllm/cpu-deps.txt);
#   - fp8attn itself: by default built against that torch (`pip install -e .`: the CPU implementation,
#     plus the GPU kernels when torch is a CUDA or ROCm build). With FP8ATTN_WHEEL=/path/to/fp8attn-*.whl
#     that prebuilt wheel is installed instead (no build; it must have been built against the same torch).
#     README's commands run from this checkout, where `python -m` finds ./fp8attn before site-packages,
#     so the wheel's compiled extension is also placed in the checkout's fp8attn/.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
pip_install() { "$PY" -m pip install --disable-pip-version-check --no-input --progress-bar off --root-user-action=ignore -q "$@"; }
if ! "$PY" -c "import torch" 2>/dev/null; then
  pip_install torch==2.13.0
fi
pins=$(mktemp -t fp8attn-pins.XXXXXX)
trap 'rm -f "$pins"' EXIT
"$PY" -c "import importlib.metadata as m; print('torch==' + m.version('torch'))" >"$pins"
pip_install -c "$pins" numpy transformers==5.20.2 tokenizers==0.23.3 safetensors==0.8.0 huggingface_hub==2.4.0
if [ -n "${FP8ATTN_WHEEL:-}" ]; then
  [ -f "$FP8ATTN_WHEEL" ] || { echo "setup.sh: FP8ATTN_WHEEL=$FP8ATTN_WHEEL is not a file" >&2; exit 1; }
  pip_install -c "$pins" --force-reinstall --no-deps "$FP8ATTN_WHEEL"
  pip_install -c "$pins" "$FP8ATTN_WHEEL"  # its dependencies, under the pins
  "$PY" - "$FP8ATTN_WHEEL" <<'EOF'
import sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as whl:
    ext = [n for n in whl.namelist() if n.startswith("fp8attn/_C.") and n.endswith((".so", ".pyd"))]
    if len(ext) != 1:
        sys.exit(f"setup.sh: {sys.argv[1]} holds {len(ext)} compiled fp8attn extensions, expected 1")
    whl.extract(ext[0], ".")
EOF
else
  pip_install -c "$pins" "setuptools>=64" "cmake>=3.22" ninja
  MAX_JOBS=${MAX_JOBS:-$(nproc)} pip_install -c "$pins" --no-build-isolation -e .
fi
"$PY" -c "import fp8attn, torch; print('fp8attn', fp8attn.__version__, 'on torch', torch.__version__)"
