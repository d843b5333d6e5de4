#!/usr/bin/env bash
# The one GPU command: on any CUDA machine, build fp8attn with its GPU kernels, run the GPU test
# suite, optionally compute-sanitizer, the benchmark (FlashAttention-3's FP8 kernel among its peers
# when built or named); results in OUTDIR.
#
#   scripts/gpu_check.sh [OUTDIR]          (default: gpu-results/)
# Knobs (env): FP8ATTN_HEAD_DIMS / FP8ATTN_FP8_KINDS (build filter), TORCH_CUDA_ARCH_LIST (default:
# this GPU, with the 'a' suffix on sm_90), MAX_JOBS, PYTEST_ARGS, BENCH_ARGS, SKIP_SANITIZE=1,
# SKIP_BUILD=1, SKIP_TESTS=1, SKIP_BENCH=1, SKIP_PORTABLE=1 (no f16 / mma.sync-decode test passes on Hopper),
# STEP_TIMEOUT (seconds per test / sanitizer / bench step, default 1200: a kernel that hangs fails
# its step instead of the whole run); FA3_DIR (a flash-attention checkout's hopper/) and
# CUTLASS_DIR (the CUTLASS it pins): before the benchmark, build lab/standalone/fa3_peer (sm_90a), which
# the benchmark then runs as its FA3 FP8 peer (FP8ATTN_FA3_PEER; set that alone for a binary built elsewhere).
set -uo pipefail
cd "$(dirname "$0")/.."
OUTDIR=${1:-gpu-results}
T=${STEP_TIMEOUT:-1200}
mkdir -p "$OUTDIR"
export PATH=/usr/local/cuda/bin:$PATH
export PYTHONUNBUFFERED=1
# The extension must share torch's libstdc++: a compiler wrapper that links libstdc++ statically
# (this workplace's /opt/gcc/bin/g++ does) makes every C++ error message crash in std::locale.
if [ -x /usr/bin/g++ ] && [ -z "${FP8ATTN_KEEP_CXX:-}" ]; then
  export CXX=/usr/bin/g++ CC=/usr/bin/gcc CUDAHOSTCXX=/usr/bin/g++
fi
if [ -z "${TORCH_CUDA_ARCH_LIST:-}" ]; then
  TORCH_CUDA_ARCH_LIST=$(python3 -c 'import torch; c = torch.cuda.get_device_capability(); print(f"{c[0]}.{c[1]}" + ("a" if c == (9, 0) else ""))')
  export TORCH_CUDA_ARCH_LIST
fi
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee "$OUTDIR/gpu.txt"
rc=0
if [ -z "${SKIP_BUILD:-}" ]; then
  echo "== build (TORCH_CUDA_ARCH_LIST=$TORCH_CUDA_ARCH_LIST FP8ATTN_HEAD_DIMS=${FP8ATTN_HEAD_DIMS:-all})"
  start=$(date +%s)
  rm -rf build/temp.*/fp8attn._C  # the compiler and the generated instance list are configure-time
  if ! MAX_JOBS=${MAX_JOBS:-$(nproc)} python3 setup.py build_ext --inplace >"$OUTDIR/build.log" 2>&1; then
    tail -60 "$OUTDIR/build.log"; echo "BUILD FAILED"; exit 1
  fi
  echo "build ok in $(( $(date +%s) - start )) s"
  if ! ldd fp8attn/_C*.so | grep -q libstdc++; then echo "WARNING: _C links libstdc++ statically (CXX=$CXX)"; fi
fi
if [ -z "${SKIP_TESTS:-}" ]; then
  echo "== GPU tests (default pipelines)"
  timeout "$T" python3 -m pytest -q -rs tests/gpu ${PYTEST_ARGS:-} 2>&1 | tee "$OUTDIR/tests_gpu.log" | tail -40
  [ "${PIPESTATUS[0]}" = 0 ] || rc=1
  # On Hopper the defaults are the wgmma and decode pipelines where they have a kernel for a call: run
  # the suite again on the portable f16 one (every call), so all three are verified on this card.
  if [ -z "${SKIP_PORTABLE:-}" ] && python3 -c 'import sys, torch; sys.exit(torch.cuda.get_device_capability() != (9, 0))'; then
    echo "== GPU tests (FP8ATTN_PIPELINE=f16: the portable pipeline)"
    FP8ATTN_PIPELINE=f16 timeout "$T" python3 -m pytest -q -rs tests/gpu ${PYTEST_ARGS:-} 2>&1 | tee "$OUTDIR/tests_gpu_f16.log" | tail -15
    [ "${PIPESTATUS[0]}" = 0 ] || rc=1
    # ... and on the mma.sync decode kernels, which decodewg replaces for paged D 128 calls there.
    echo "== GPU tests (FP8ATTN_PIPELINE=decode: the mma.sync decode kernels)"
    FP8ATTN_PIPELINE=decode timeout "$T" python3 -m pytest -q -rs tests/gpu ${PYTEST_ARGS:-} 2>&1 | tee "$OUTDIR/tests_gpu_decode.log" | tail -15
    [ "${PIPESTATUS[0]}" = 0 ] || rc=1
  fi
fi
if [ -z "${SKIP_SANITIZE:-}" ]; then
  for tool in memcheck racecheck; do
    echo "== compute-sanitizer --tool $tool"
    PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} timeout "$T" compute-sanitizer --tool $tool --error-exitcode 9 \
      python3 tests/gpu/sanitize_cases.py \
      >"$OUTDIR/sanitizer_$tool.log" 2>&1
    src=$?; echo "$tool rc=$src" | tee -a "$OUTDIR/sanitizer_$tool.log"; [ $src = 0 ] || rc=1
    tail -4 "$OUTDIR/sanitizer_$tool.log"
  done
fi
if [ -n "${FA3_DIR:-}" ]; then
  echo "== FlashAttention-3 FP8 peer build (FA3_DIR=$FA3_DIR)"
  mkdir -p build/standalone
  if FA3_DIR=$FA3_DIR CUTLASS_DIR=${CUTLASS_DIR:?CUTLASS_DIR: the CUTLASS that FA3_DIR pins} \
       bash lab/standalone/fa3_peer/build.sh build/standalone/fa3_peer >"$OUTDIR/fa3_build.log" 2>&1; then
    export FP8ATTN_FA3_PEER=$PWD/build/standalone/fa3_peer
  else
    tail -30 "$OUTDIR/fa3_build.log"; echo "FA3 PEER BUILD FAILED"; rc=1
  fi
fi
if [ -z "${SKIP_BENCH:-}" ]; then
  echo "== bench${FP8ATTN_FA3_PEER:+ (FA3 FP8: $FP8ATTN_FA3_PEER)}"
  timeout "$T" python3 -m fp8attn.bench --out-dir "$OUTDIR" ${BENCH_ARGS:-} 2>"$OUTDIR/bench.err" || rc=1
fi
exit $rc
