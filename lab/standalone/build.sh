#!/usr/bin/env bash
# Builds the torch-free kernel checks of this folder for sm_90a with the CUDA toolkit on PATH (no
# GPU needed: the binaries are statically linked against cudart and run on any H100/H200).
#   lab/standalone/build.sh [OUTDIR]     (default build-standalone/)
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${1:-build-standalone}
mkdir -p "$out"
NVCC=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
# Each check that records traces also as NAME_trace: -DFP8ATTN_EVENT_TRACE records the kernels' trace events
# (csrc/kernels/trace.h, event_trace.h) and runs the trace mode instead of the check; each that accounts
# them also as NAME_stats (-DFP8ATTN_EVENT_STATS, event_stats.h: the cycles between events, whole launches).
for src in lab/standalone/*.cu; do
  modes=""
  grep -q event_trace.h "$src" && modes=_trace  # (only the checks that record traces)
  grep -q event_stats.h "$src" && modes="$modes _stats"
  for mode in "" $modes; do
    name=$(basename "$src" .cu)$mode
    flag=""
    [ "$mode" = _trace ] && flag=-DFP8ATTN_EVENT_TRACE
    [ "$mode" = _stats ] && flag=-DFP8ATTN_EVENT_STATS
    "$NVCC" -std=c++17 -O3 -lineinfo -I csrc -gencode=arch=compute_90a,code=sm_90a -cudart static \
      $flag -Xptxas -v "$src" -o "$out/$name" 2>"$out/$name.ptxas.log" ||
      { cat "$out/$name.ptxas.log"; exit 1; }
    echo "built $out/$name"
  done
done
