"""One prefill call of fp8attn and one of cuDNN's FP8 SDPA, for Nsight Compute side by side.

    ncu --profile-from-start off --clock-control none ... python3 lab/scripts/ncu_prefill.py [--d 128] [--causal]

Inputs, scales and the cuDNN graph are those of ``python -m fp8attn.bench`` (1 x 32 heads x 8192 by default);
both run a few times first (cuDNN builds its plan, caches warm), then once each between
cudaProfilerStart / Stop, so ncu profiles exactly those two kernels.
"""

from __future__ import annotations

import argparse

import torch
from prefill_pair import add_shape_args, prefill_pair


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_shape_args(ap)
    ours, theirs, name = prefill_pair(ap.parse_args())
    for _ in range(3):
        ours()
        theirs()
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStart()
    ours()
    theirs()
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStop()
    print("profiled: fp8attn", name, "and cuDNN FP8 SDPA")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
