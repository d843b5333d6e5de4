#!/usr/bin/env bash
# DRAM and L2 bytes, cycles and instructions per call of fp8attn and cuDNN's FP8 SDPA (Nsight Compute over
# lab/scripts/ncu_prefill.py, whose options it passes on), for the energy reading of lab-notes:lab/hopper-wgmma-diary.md:
#   lab/scripts/ncu_bytes.sh [--d 128] [--causal] [--b B --h H --s S]
set -euo pipefail
cd "$(dirname "$0")/../.."
NCU=${NCU:-$(command -v ncu || echo /usr/local/cuda/bin/ncu)}
"$NCU" --profile-from-start off --clock-control none --csv \
  --metrics dram__bytes_read.sum,dram__bytes_write.sum,lts__t_bytes.sum,sm__cycles_elapsed.max,smsp__inst_executed.sum \
  python3 lab/scripts/ncu_prefill.py "$@"
