#!/usr/bin/env bash
# ROCm compile-check without a GPU (recipe: clang-22 from Debian bookworm-security + HIP headers +
# device libraries). Hipifies the kernel sources exactly as the ROCm build does (PyTorch's hipify,
# into a staging tree), then compiles EVERY generated forward instance -- and the other kernel
# translation units -- device-only to assembly for each target, and fails when
#   * a forward kernel lacks its MFMA atom: v_mfma_f32_32x32x16_fp8_fp8 on gfx942 (both kinds),
#     the f8f6f4 form v_mfma_scale_f32_32x32x64_f8f6f4 for fn on gfx950, and for fnuz on gfx950 the
#     exact f16 path v_mfma_f32_32x32x16_f16 (arch/amd_mfma.h says why); the native kinds
#     (gfx942 + fnuz, gfx950 + fn) must also quantize P with v_cvt_pk_fp8_f32;
#   * any kernel uses scratch: private segment > 0 or VGPR spills > 0;
#   * the portable sources use NVIDIA-only constructs: __shfl_*_sync, full-warp masks, cuda_fp8.h /
#     __nv_fp8, or 32-lane warp arithmetic, outside the NVIDIA-only files (grep, before compiling).
# Prints one summary line per target: forward kernels, max VGPRs (arch + acc), max LDS bytes.
# First, scripts/amd_tile_emulation.cpp runs the AMD tile's qk / pv code on the host for an
# emulated wavefront and checks every S and O element (fragment layouts, key order, P packing).
#
#   scripts/ci_rocm_check.sh                       # every instance, gfx942 + gfx950
#   JOBS=2 ROCM_CHECK_TARGETS=gfx942 FP8ATTN_HEAD_DIMS=128 scripts/ci_rocm_check.sh
# Needs python3 with torch (any build: only torch.utils.hipify is used). Installs the Debian
# packages when missing (as root). Knobs: JOBS (default 2), ROCM_CHECK_TARGETS, CLANG, KEEP=dir.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
JOBS=${JOBS:-2}
TARGETS=${ROCM_CHECK_TARGETS:-"gfx942 gfx950"}
CLANG=${CLANG:-clang++-22}
start=$(date +%s)

# ---- 1. portable-source rules (cheap; first) -------------------------------------------------
# NVIDIA-only files: the mma.sync and wgmma atoms, the sm_90 f16 and decode pipelines, decodewg and the
# Hopper wgmma pipeline (included by the sm90 / sm90a instances only).
# The AMD atoms may do lane arithmetic (64-lane wavefronts: lane & 31 is the MFMA column).
nv_only='csrc/kernels/arch/nv_(mma|wgmma).h|csrc/kernels/fwd/(pipeline_f16|pipeline_decode|pipeline_decode_wgmma|policy_wgmma|pipeline_wgmma|kernel_wgmma).h'
src="csrc/kernels csrc/cuda --include=*.h --include=*.cu --include=*.cuh"
viol=$( { grep -rnE '__shfl_[a-z_]*sync|__ballot_sync|__activemask|0xffffffff|cuda_fp8\.h|__nv_fp8|warpSize' $src || true
          grep -rnE '\b(threadIdx\.x|lane)\s*[/%&]\s*(32|31)\b|\b32\s*\*\s*kWarps' $src |
            grep -v '^csrc/kernels/arch/amd_mfma.h:' || true; } | grep -vE "^($nv_only):" || true)
if [ -n "$viol" ]; then
  echo "$viol"
  echo "FAILED: NVIDIA-only construct outside the NVIDIA atoms (use the Tile interface / lane_xor of arch/select.h)"
  exit 1
fi
echo "ok: portable sources (no *_sync shuffles, warp masks, cuda_fp8.h or 32-lane arithmetic outside $nv_only)"

# ---- 2. toolchain ------------------------------------------------------------------------------
if ! command -v "$CLANG" >/dev/null || [ ! -f /usr/include/hip/hip_runtime.h ] || \
   [ ! -d /usr/lib/x86_64-linux-gnu/amdgcn/bitcode ]; then
  echo "installing libamdhip64-dev rocm-device-libs clang-22 lld-22 llvm-22 (Debian bookworm-security)"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >/dev/null && apt-get install -y -qq libamdhip64-dev rocm-device-libs clang-22 lld-22 llvm-22 >/dev/null
fi
"$CLANG" --version | head -1

work=${KEEP:-$(mktemp -d)}
mkdir -p "$work"
[ -n "${KEEP:-}" ] || trap 'rm -rf "$work"' EXIT

# The AMD tile's fragment maps, run on the host for one emulated 64-lane wavefront (seconds).
$CLANG -std=c++17 -O1 -Wno-psabi -I csrc scripts/amd_tile_emulation.cpp -o "$work/amd_tile_emulation"
"$work/amd_tile_emulation"
# Device libraries: Debian's, plus the gfx942 / gfx950 ISA-version files it lacks (from gfx940's).
libs=$work/devlibs
mkdir -p "$libs"
for f in /usr/lib/x86_64-linux-gnu/amdgcn/bitcode/*.bc; do ln -sf "$f" "$libs/"; done
for v in 942 950; do
  [ -f "$libs/oclc_isa_version_$v.bc" ] || llvm-dis-22 "$libs/oclc_isa_version_940.bc" -o - |
    sed "s/i32 9400/i32 ${v}0/" | llvm-as-22 -o "$libs/oclc_isa_version_$v.bc"
done
# clang 22 + HIP 5.2's amd_hip_fp16.h need these two declarations first.
cat >"$work/pre.h" <<'EOF'
typedef _Float16 __2f16 __attribute__((ext_vector_type(2)));
extern "C" __device__ __attribute__((const)) _Float16 __llvm_amdgcn_rcp_f16(_Float16) __asm("llvm.amdgcn.rcp.f16");
extern "C" __device__ inline __2f16 __llvm_amdgcn_rcp_2f16(__2f16 x) {
  return __2f16{__llvm_amdgcn_rcp_f16(x.x), __llvm_amdgcn_rcp_f16(x.y)}; }
EOF

# HIP 5.2's __syncthreads() calls __atomic_work_item_fence, which Debian's device libraries lack
# (ROCm 6 headers inline __builtin_amdgcn_fence instead): an unresolved call would show up as a
# dynamic stack. Supply it, per target, as linked builtin bitcode.
cat >"$work/fence.hip" <<'EOF2'
extern "C" __attribute__((device, used)) void __atomic_work_item_fence(unsigned, int order, int scope) {
  if (scope <= 1) {  // work item / work group
    if (order == __ATOMIC_RELEASE) __builtin_amdgcn_fence(__ATOMIC_RELEASE, "workgroup");
    else if (order == __ATOMIC_ACQUIRE) __builtin_amdgcn_fence(__ATOMIC_ACQUIRE, "workgroup");
    else __builtin_amdgcn_fence(__ATOMIC_SEQ_CST, "workgroup");
  } else {
    __builtin_amdgcn_fence(__ATOMIC_SEQ_CST, "agent");
  }
}
EOF2
for t in $TARGETS; do
  $CLANG -x hip -std=c++17 -O3 -nogpulib -fgpu-rdc --offload-arch="$t" --offload-device-only -emit-llvm -c \
    -mcode-object-version=5 "$work/fence.hip" -o "$work/fence_$t.bc"
done

# ---- 3. generate + hipify (as cmake/gpu.cmake's ROCm branch does) --------------------------------
stage=$work/stage
rm -rf "$stage" && mkdir -p "$stage"
cp -r csrc "$stage/csrc"
python3 csrc/kernels/generate.py --out-dir "$stage/gen" --gpu rocm
hipified=$(python3 cmake/hipify.py "$stage" 2>/dev/null | tr ';' ' ')
others=$(for f in $hipified; do case $f in */gen/fwd_mfma_*) ;; *) echo "$f" ;; esac; done)  # launchers, kv cache
ls "$stage"/gen/fwd_mfma_*.hip >/dev/null

# ---- 4. compile every translation unit for every target -------------------------------------------
flags="-x hip -std=c++17 -O3 --rocm-path=/usr --rocm-device-lib-path=$libs -mcode-object-version=5
  -D__AMDGCN_WAVEFRONT_SIZE=64 -include $work/pre.h -I $stage/csrc -I $stage --offload-device-only -S"
# Forward instances get a probe with their policy's LDS bytes (dynamic shared memory: not in the
# kernel descriptor).
for f in "$stage"/gen/fwd_mfma_*.hip; do
  prob=$(grep -o 'FwdProblem<[^>]*>' "$f" | head -1)
  { echo "#include \"$f\""
    echo "namespace fp8attn { extern \"C\" __attribute__((used)) __device__ const int fp8attn_probe_lds ="
    echo "    FwdPolicyFp8<$prob>::kSmemBytes; }"
  } >"${f%.hip}.probe.hip"
done
units="$(ls "$stage"/gen/fwd_mfma_*.probe.hip) $others"
compile() {  # $1 = unit, $2 = target
  local out=$work/asm/$2/$(basename "$1" .hip).s
  if ! $CLANG $flags --offload-arch="$2" -Xclang -mlink-builtin-bitcode -Xclang "$work/fence_$2.bc" "$1" -o "$out" \
       >"$out.log" 2>&1; then
    cat "$out.log"; echo "FAILED: $1 for $2"; return 1
  fi
}
export -f compile
export CLANG flags work
for t in $TARGETS; do mkdir -p "$work/asm/$t"; done
for t in $TARGETS; do for u in $units; do echo "$u $t"; done; done |
  xargs -P "$JOBS" -n 2 bash -c 'compile "$0" "$1"'
# The host side of the hipified launchers / dispatch table / entry helpers (syntax only).
for u in $others; do
  $CLANG -x hip -std=c++17 --rocm-path=/usr -nogpulib -D__AMDGCN_WAVEFRONT_SIZE=64 -include "$work/pre.h" \
    -I "$stage/csrc" -I "$stage" --offload-arch=gfx942 --offload-host-only -fsyntax-only "$u" ||
    { echo "FAILED: host side of $u"; exit 1; }
done

# ---- 5. inspect the assembly -------------------------------------------------------------------
python3 - "$work/asm" $TARGETS <<'EOF'
import glob, os, re, sys
root, targets = sys.argv[1], sys.argv[2:]
bad = []
for t in targets:
    nfwd = nk = 0
    max_vgpr = max_lds = max_sspill = 0
    for s in sorted(glob.glob(os.path.join(root, t, "*.s"))):
        base = os.path.basename(s)[:-2]
        text = open(s).read()
        # kernel descriptors (amdhsa.kernels metadata)
        for m in re.finditer(r"\.name:\s+(\S+)(.*?)(?=\n\s+- \.|\n\s*amdhsa\.|\Z)", text, re.S):
            name, body = m.group(1), m.group(2)
            if ".private_segment_fixed_size" not in body:
                continue
            nk += 1
            get = lambda k: int(re.search(r"\." + k + r":\s+(\d+)", body).group(1)) if re.search(r"\." + k + r":", body) else 0
            if get("private_segment_fixed_size") > 0 or get("vgpr_spill_count") > 0:
                bad.append(f"{t} {base} {name[:60]}: scratch {get('private_segment_fixed_size')} B, "
                           f"VGPR spills {get('vgpr_spill_count')}")
            max_vgpr = max(max_vgpr, get("vgpr_count") + get("agpr_count"))
            max_sspill = max(max_sspill, get("sgpr_spill_count"))
        m = re.match(r"fwd_mfma_hd(\d+)_(e4m3fnuz|e4m3fn)_(\w+)_kv\d+\.probe$", base)
        if not m:
            continue
        nfwd += 1
        kind = m.group(2)
        want = {("gfx950", "e4m3fnuz"): "v_mfma_f32_32x32x16_f16",
                ("gfx950", "e4m3fn"): "v_mfma_scale_f32_32x32x64_f8f6f4"}.get((t, kind), "v_mfma_f32_32x32x16_fp8_fp8")
        native = (t == "gfx942" and kind == "e4m3fnuz") or (t == "gfx950" and kind == "e4m3fn")
        if want not in text:
            bad.append(f"{t} {base}: no {want} (the MFMA atom is missing)")
        if native and "v_cvt_pk_fp8_f32" not in text:
            bad.append(f"{t} {base}: no v_cvt_pk_fp8_f32 (hardware P quantization missing)")
        lds = re.search(r"fp8attn_probe_lds:\s*\n\s*\.long\s+(\d+)", text)
        if lds:
            max_lds = max(max_lds, int(lds.group(1)))
            if int(lds.group(1)) > 65536:
                bad.append(f"{t} {base}: {lds.group(1)} B of LDS > 64 KiB")
    print(f"{t}: {nfwd} forward instances ({nk} kernels), FP8 MFMA checked, scratch 0 required, "
          f"max VGPRs {max_vgpr} (arch+acc), max LDS {max_lds} B, max SGPR spills (to VGPR lanes) {max_sspill}")
    if nfwd == 0:
        bad.append(f"{t}: no forward instances compiled")
if bad:
    print("\n".join(bad))
    print("FAILED: ROCm compile-check")
    sys.exit(1)
EOF
echo "rocm compile-check passed in $(( $(date +%s) - start )) s"
