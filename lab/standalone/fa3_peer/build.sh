#!/usr/bin/env bash
# Builds fa3_peer (needs no GPU): FA3_DIR = a flash-attention checkout's hopper/ (tested at 0251105a),
# CUTLASS_DIR = the CUTLASS it pins (csrc/cutlass, 71275920). Nothing of either is committed here.
#   FA3_DIR=... CUTLASS_DIR=... bash build.sh [OUT_BINARY]   (default ./fa3_peer)
set -euo pipefail
: "${FA3_DIR:?FA3_DIR: the hopper/ folder of a flash-attention checkout}" "${CUTLASS_DIR:?CUTLASS_DIR: the CUTLASS it pins}"
out=$(realpath -m "${1:-fa3_peer}")
cd "$(dirname "$0")"
tmp=$(mktemp -d)
flags=(-std=c++17 -O3 --use_fast_math -DNDEBUG -DCUTE_SM90_EXTENDED_MMA_SHAPES_ENABLED -DCUTLASS_ENABLE_GDC_FOR_SM90
       -DCUTLASS_DEBUG_TRACE_LEVEL=0 -gencode=arch=compute_90a,code=sm_90a --expt-relaxed-constexpr
       -I"$FA3_DIR" -I"$CUTLASS_DIR/include" -I"$CUTLASS_DIR/tools/util/include")
pids=()
for d in 64 128 256; do
  nvcc "${flags[@]}" -DFA3_HDIM=$d -c fa3_inst.cu -o "$tmp/inst$d.o" &
  pids+=($!)
done
nvcc "${flags[@]}" -c fa3_peer.cu -o "$tmp/main.o"
for pid in "${pids[@]}"; do wait "$pid"; done  # (set -e: a failed instance stops the build)
nvcc -gencode=arch=compute_90a,code=sm_90a -cudart static "$tmp"/*.o -o "$out"
rm -rf "$tmp"
