#!/usr/bin/env bash
# Builds fa3_peer (needs no GPU): FA3_DIR = a flash-attention checkout's hopper/ (tested at 0251105a),
# CUTLASS_DIR = the CUTLASS it pins (csrc/cutlass, 71275920). Nothing of either is committed here.
#   FA3_DIR=... CUTLASS_DIR=... [JOBS=2] bash build.sh [OUT_BINARY]   (default ./fa3_peer)
# Translation units: the dense prefill instances (fa3_inst.cu, one per head dim), the paged decode
# instance + split combine (fa3_inst_decode.cu), FA3's own varlen scheduler-metadata kernel
# (FA3_DIR/flash_prepare_scheduler.cu), the harness (fa3_peer.cu); at most JOBS nvcc at once.
set -euo pipefail
: "${FA3_DIR:?FA3_DIR: the hopper/ folder of a flash-attention checkout}" "${CUTLASS_DIR:?CUTLASS_DIR: the CUTLASS it pins}"
FA3_DIR=$(realpath "$FA3_DIR")
CUTLASS_DIR=$(realpath "$CUTLASS_DIR")
jobs_max=${JOBS:-2}
out=$(realpath -m "${1:-fa3_peer}")
cd "$(dirname "$0")"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
flags=(-std=c++17 -O3 --use_fast_math -DNDEBUG -DCUTE_SM90_EXTENDED_MMA_SHAPES_ENABLED -DCUTLASS_ENABLE_GDC_FOR_SM90
       -DCUTLASS_DEBUG_TRACE_LEVEL=0 -gencode=arch=compute_90a,code=sm_90a --expt-relaxed-constexpr
       -I"$FA3_DIR" -I"$CUTLASS_DIR/include" -I"$CUTLASS_DIR/tools/util/include")
pids=()
unit() {  # unit NVCC_ARGS...: compile one translation unit in the background, at most JOBS at once
  while [ "$(jobs -rp | wc -l)" -ge "$jobs_max" ]; do sleep 1; done
  nvcc "${flags[@]}" "$@" &
  pids+=($!)
}
for d in 64 128 256; do unit -DFA3_HDIM=$d -c fa3_inst.cu -o "$tmp/inst$d.o"; done
unit -c fa3_inst_decode.cu -o "$tmp/decode.o"
unit -c "$FA3_DIR/flash_prepare_scheduler.cu" -o "$tmp/prepare.o"
unit -c fa3_peer.cu -o "$tmp/main.o"
for pid in "${pids[@]}"; do wait "$pid"; done  # (set -e: a failed unit stops the build)
nvcc -gencode=arch=compute_90a,code=sm_90a -cudart static "$tmp"/*.o -o "$out"
strip "$out"
ls -l "$out"
