#!/usr/bin/env bash
# Compile-check the GPU kernel library with nvcc, without torch: every generated forward instance
# (or the subset selected by FP8ATTN_HEAD_DIMS / FP8ATTN_FP8_KINDS), the Hopper wgmma kernels, the
# kernel table, launchers and dispatch, for sm_90a and sm_89. Also asserts that the e4m3 mma.sync
# atom is what the fn instances use (the PTX must contain mma...e4m3.e4m3), that the wgmma
# and decodewg instances issue FP8 wgmma, reports register spills (fails on them in those instances) and fails on
# ptxas-serialized wgmma (C7511 / C7513 / C7520 ...). Then the equivalence check of the compiled
# kernels against scripts/ci_nvcc_baseline.json (scripts/ci_nvcc_sass.py): per instance, arch and
# kernel no more registers or spills, and the same opcode mix in the SASS main loop (within 1 %).
#
#   scripts/ci_nvcc_check.sh            # all instances, both archs
#   JOBS=2 FP8ATTN_HEAD_DIMS=64,128 scripts/ci_nvcc_check.sh
#   FP8ATTN_SASS=write scripts/ci_nvcc_check.sh   # record the built kernels in the baseline (with
#                                                 # filters: theirs only); the commit says why, with the diff
#   FP8ATTN_SASS=off ...                          # skip the SASS check
set -euo pipefail
cd "$(dirname "$0")/.."
NVCC=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
JOBS=${JOBS:-2}
ARCHS=${NVCC_CHECK_ARCHS:-"90a 89"}
SASS=${FP8ATTN_SASS:-check}
work=${KEEP:-$(mktemp -d)}
mkdir -p "$work"
[ -n "${KEEP:-}" ] || trap 'rm -rf "$work"' EXIT
start=$(date +%s)
python3 csrc/kernels/generate.py --out-dir "$work/gen" --sm90a
"$NVCC" --version | tail -1

gencode=""
for a in $ARCHS; do gencode="$gencode -gencode=arch=compute_${a},code=sm_${a}"; done
flags="-std=c++17 -O3 -I csrc $gencode -Xptxas -v -Werror all-warnings"

compile() {  # $1 = source
  local src=$1 base
  base=$(basename "$src" .cu)
  if ! "$NVCC" $flags -c "$src" -o "$work/$base.o" >"$work/$base.log" 2>&1; then
    cat "$work/$base.log"; echo "FAILED: $src"; return 1
  fi
  if grep "spill stores" "$work/$base.log" | grep -vq " 0 bytes spill stores"; then
    echo "warning: register spills in $base: $(grep "spill stores" "$work/$base.log" | grep -v " 0 bytes spill" | sort -u | tr -s ' ' | paste -sd';')"
    # The Hopper instances run at their register limits (setmaxnreg budgets): a spill there is a
    # regression of the fast path (issue 4: no spills), not a fallback's warning.
    case $base in fwd_wgmma_*|fwd_decodewg_*) echo "FAILED: register spills in the wgmma instance $base"; return 1 ;; esac
  fi
  # ptxas info lines, not warnings (C7513, C7514, C7520, ...): every wgmma is then waited for one by
  # one, which silently removes the softmax / P.V overlap -- a performance bug, so it fails the check.
  if grep -q "wgmma.mma_async instructions are serialized" "$work/$base.log"; then
    grep "serialized" "$work/$base.log" | sed 's/ in the function.*//' | sort -u
    echo "FAILED: wgmma serialized by ptxas in $base"; return 1
  fi
  echo "ok: $base"
}
export -f compile
export NVCC flags work

ls "$work"/gen/*.cu "$work"/gen/fwd_table.cpp csrc/kernels/fwd/dispatch.cpp | xargs -P "$JOBS" -I{} bash -c 'compile {}'

# The fn instances must use the native e4m3 mma (PTX of one instance, sm_90a).
one=$(ls "$work"/gen/fwd_fp8mma_hd*_e4m3fn_band_kv64.cu 2>/dev/null | head -1 || true)
if [ -n "$one" ]; then
  "$NVCC" -std=c++17 -O3 -I csrc -arch=compute_90a -ptx "$one" -o "$work/one.ptx"
  grep -q "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32" "$work/one.ptx" || { echo "e4m3 mma missing in $one"; exit 1; }
  grep -q "cvt.rn.satfinite.e4m3x2.f32" "$work/one.ptx" || { echo "hardware P quantization missing in $one"; exit 1; }
  echo "ok: e4m3 mma.sync + cvt.rn.satfinite.e4m3x2 present"
fi
# The Hopper instances must issue FP8 wgmma (QGMMA) for both products and the l row sums.
one=$(ls "$work"/gen/fwd_wgmma_hd128_e4m3fn_nomask_kv64.cu 2>/dev/null | head -1 || true)
if [ -n "$one" ]; then
  "$NVCC" -std=c++17 -O3 -I csrc -arch=compute_90a -ptx "$one" -o "$work/wg.ptx"
  for shape in m64n64k32 m64n128k32 m64n8k32; do
    grep -q "wgmma.mma_async.sync.aligned.$shape.f32.e4m3.e4m3" "$work/wg.ptx" || { echo "wgmma $shape missing in $one"; exit 1; }
  done
  echo "ok: FP8 wgmma m64n64k32 / m64n128k32 / m64n8k32 present"
fi
# The decodewg instances too: both products and l as FP8 wgmma with the rows on N (8 and 16).
one=$(ls "$work"/gen/fwd_decodewg_hd128_e4m3fn_band_kv64.cu 2>/dev/null | head -1 || true)
if [ -n "$one" ]; then
  "$NVCC" -std=c++17 -O3 -I csrc -arch=compute_90a -ptx "$one" -o "$work/dwg.ptx"
  for shape in m64n8k32 m64n16k32; do
    grep -q "wgmma.mma_async.sync.aligned.$shape.f32.e4m3.e4m3" "$work/dwg.ptx" || { echo "wgmma $shape missing in $one"; exit 1; }
  done
  echo "ok: FP8 wgmma m64n8k32 / m64n16k32 present in the decodewg kernels"
fi
echo "compile: $(( $(date +%s) - start )) s"

# SASS / register equivalence with the baseline. cuobjdump (and the nvdisasm it runs) of the pinned
# version the baseline was read with, from PyPI when not given (CUOBJDUMP=path); cached.
if [ "$SASS" = check ] && [ ! -f scripts/ci_nvcc_baseline.json ]; then
  echo "sass: no baseline (scripts/ci_nvcc_baseline.json): check skipped"
elif [ "$SASS" != off ]; then
  tools_version=13.2.51
  if [ -z "${CUOBJDUMP:-}" ]; then
    tools=${FP8ATTN_CUDA_TOOLS:-${XDG_CACHE_HOME:-$HOME/.cache}/fp8attn/cuda-tools-$tools_version}
    if [ ! -x "$tools/nvidia/cu13/bin/cuobjdump" ] || [ ! -x "$tools/nvidia/cu13/bin/nvdisasm" ]; then
      python3 -m pip download --disable-pip-version-check --no-deps -q -d "$tools/wheels" \
        "nvidia-cuda-cuobjdump==$tools_version" "nvidia-cuda-nvdisasm==$tools_version"
      python3 -c 'import glob, sys, zipfile
for w in glob.glob(sys.argv[1] + "/wheels/*.whl"): zipfile.ZipFile(w).extractall(sys.argv[1])' "$tools"
      chmod +x "$tools"/nvidia/cu13/bin/*
    fi
    CUOBJDUMP=$tools/nvidia/cu13/bin/cuobjdump
  fi
  NVCC_VERSION=$("$NVCC" --version | sed -n 's/.*, V\([0-9.]*\)$/\1/p')
  [ "$SASS" = write ] || SASS=check
  PATH="$(dirname "$CUOBJDUMP"):$PATH" CUOBJDUMP=$CUOBJDUMP NVCC_VERSION=$NVCC_VERSION \
    python3 scripts/ci_nvcc_sass.py "$SASS" "$work" scripts/ci_nvcc_baseline.json
fi
echo "nvcc compile-check passed in $(( $(date +%s) - start )) s"
