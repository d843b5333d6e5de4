"""One prefill call of fp8attn and one of cuDNN's FP8 SDPA, for Nsight Compute side by side.

    ncu --profile-from-start off --clock-control none ... python3 scripts/ncu_prefill.py [--d 128] [--causal]

Inputs, scales and the cuDNN graph are those of ``python -m fp8attn.bench`` (1 x 32 heads x 8192 by default);
both run a few times first (cuDNN builds its plan, caches warm), then once each between
cudaProfilerStart / Stop, so ncu profiles exactly those two kernels.
"""

from __future__ import annotations

import argparse
import math

import torch

import fp8attn
from fp8attn.bench import FN, OUT_SCALE, P_SCALE, cudnn_fp8_runner


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--b", type=int, default=1)
    ap.add_argument("--h", type=int, default=32)
    ap.add_argument("--s", type=int, default=8192)
    ap.add_argument("--d", type=int, default=128)
    ap.add_argument("--causal", action="store_true")
    a = ap.parse_args()
    gen = torch.Generator(device="cuda").manual_seed(0)
    q8, k8, v8 = (torch.randn(a.b, a.s, a.h, a.d, device="cuda", generator=gen).to(FN) for _ in range(3))
    ps, osc = torch.tensor([P_SCALE], device="cuda"), torch.tensor([OUT_SCALE], device="cuda")
    call = dict(causal=a.causal, p_scale=ps, out_scale=osc, out=torch.empty_like(q8))
    ours = lambda: fp8attn.forward(q8, k8, v8, **call)  # noqa: E731
    theirs, _ = cudnn_fp8_runner(*(x.transpose(1, 2).contiguous() for x in (q8, k8, v8)), a.causal,
                                 1.0 / math.sqrt(a.d))
    for _ in range(3):
        ours()
        theirs()
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStart()
    ours()
    theirs()
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStop()
    print("profiled: fp8attn", fp8attn.kernel_name(q8, k8, v8, **call), "and cuDNN FP8 SDPA")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
