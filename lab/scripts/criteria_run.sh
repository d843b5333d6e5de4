#!/usr/bin/env bash
# Issue 29's criteria on the card the device tool gives, in one call: build (D 64 / 128 / 256, e4m3fn, sm_90a), the
# GPU suite on the default pipelines and its decode tests on the mma.sync decode kernels (FP8ATTN_PIPELINE=decode),
# the sanitizers, the benchmark with its peers in one bench.json (SDPA bf16, cuDNN FP8 through a carried
# nvidia-cudnn-frontend wheel, FlashAttention-3 FP8 from a carried fa3_peer binary, built here by
# lab/standalone/fa3_peer/build.sh, as --fa3-peer: prefill rows and vLLM's paged FP8 decode; decode as % of the card's
# copy bandwidth), gather_bw (the paged cache's read ceiling), decode_timeline.py (each decode kernel and the gaps of
# a call), and criteria_table.py (the bars against this run). Results in $OUT.
#   run: [QUICK=1] bash lab/scripts/criteria_run.sh     carry: .carry (fa3_peer, wheels/), build-standalone (gather_bw)
set -uo pipefail
export PATH=/usr/local/cuda/bin:$PATH CXX=/usr/bin/g++ CC=/usr/bin/gcc CUDAHOSTCXX=/usr/bin/g++ TORCH_CUDA_ARCH_LIST=9.0a
export FP8ATTN_HEAD_DIMS=64,128,256 FP8ATTN_FP8_KINDS=e4m3fn PYTHONUNBUFFERED=1
OUT=${OUT:-criteria-out}
mkdir -p "$OUT"
step() { echo "== $1 ($(date -u +%H:%M:%SZ))"; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee "$OUT/gpu.txt"
python3 -m pip install -q --no-deps --no-index --target /tmp/pylib .carry/wheels/nvidia_cudnn_frontend-*.whl \
  >"$OUT/pip.log" 2>&1 || tail -3 "$OUT/pip.log"
export PYTHONPATH=$PWD:/tmp/pylib
step build
s=$(date +%s)
MAX_JOBS=16 python3 setup.py build_ext --inplace >"$OUT/build.log" 2>&1 || { tail -40 "$OUT/build.log"; exit 1; }
echo "build $(($(date +%s) - s)) s"
step "GPU suite"
timeout 220 python3 -m pytest -q -rs tests/gpu >"$OUT/tests_gpu.log" 2>&1
echo "rc=$?"; tail -2 "$OUT/tests_gpu.log"; grep -E "^FAILED" "$OUT/tests_gpu.log" | head
if [ -z "${QUICK:-}" ]; then  # QUICK=1: the GPU suite, bench and peers only (a short device budget)
  step "decode tests on the mma.sync decode kernels"
  FP8ATTN_PIPELINE=decode timeout 120 python3 -m pytest -q -rs tests/gpu -k "decode or paged" >"$OUT/tests_gpu_decode.log" 2>&1
  echo "rc=$?"; tail -1 "$OUT/tests_gpu_decode.log"; grep -E "^FAILED" "$OUT/tests_gpu_decode.log" | head
  for tool in memcheck racecheck; do
    step "compute-sanitizer $tool"
    timeout 120 compute-sanitizer --tool $tool --error-exitcode 9 python3 tests/gpu/sanitize_cases.py >"$OUT/sanitizer_$tool.log" 2>&1
    echo "rc=$?"; tail -1 "$OUT/sanitizer_$tool.log"
  done
fi
step "bench (FA3 FP8 from .carry/fa3_peer when carried)"
fa3=()
[ -x .carry/fa3_peer ] && fa3=(--fa3-peer .carry/fa3_peer)
timeout 300 python3 -m fp8attn.bench --out-dir "$OUT" "${fa3[@]}" 2>"$OUT/bench.err" | grep -v "^$"
step "decode timeline (torch.profiler over graph replays)"
timeout 60 python3 lab/scripts/decode_timeline.py --out "$OUT/decode_timeline.json" 2>&1 | tee "$OUT/decode_timeline.txt" | tail -30
step "gather_bw"
timeout 40 build-standalone/gather_bw 2>&1 | tee "$OUT/gather_bw.txt" | tail -8
step "criteria table"
python3 lab/scripts/criteria_table.py "$OUT" 2>&1 | tee "$OUT/criteria.md"
step done
