"""fp8attn and cuDNN's FP8 SDPA set up on the same prefill inputs, for the scripts that compare the two kernels.

Inputs, scales and the cuDNN graph are those of ``python -m fp8attn.bench``.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable

import torch

import fp8attn
from fp8attn.bench.gpu import FN, OUT_SCALE, P_SCALE, cudnn_fp8_runner


def add_shape_args(ap: argparse.ArgumentParser) -> None:
    """The shape options: --b --h --s --d --causal (1 x 32 heads x 8192 x 128, non-causal by default)."""
    ap.add_argument("--b", type=int, default=1)
    ap.add_argument("--h", type=int, default=32)
    ap.add_argument("--s", type=int, default=8192)
    ap.add_argument("--d", type=int, default=128)
    ap.add_argument("--causal", action="store_true")
    ap.add_argument("--layout", choices=["bshd", "bhsd"], default="bshd",
                    help="fp8attn's memory layout of q / k / v / out (strided views; cuDNN always gets bhsd)")


def prefill_pair(a: argparse.Namespace) -> tuple[Callable[[], object], Callable[[], object], str]:
    """(one fp8attn call, one cuDNN FP8 call, the fp8attn kernel's name) for the shape in ``a``."""
    gen = torch.Generator(device="cuda").manual_seed(0)
    q8, k8, v8 = (torch.randn(a.b, a.s, a.h, a.d, device="cuda", generator=gen).to(FN) for _ in range(3))
    ps, osc = torch.tensor([P_SCALE], device="cuda"), torch.tensor([OUT_SCALE], device="cuda")
    bhsd = [x.transpose(1, 2).contiguous() for x in (q8, k8, v8)]  # each head's rows contiguous: cuDNN's layout
    theirs, _ = cudnn_fp8_runner(*bhsd, a.causal, 1.0 / math.sqrt(a.d))
    if a.layout == "bhsd":
        q8, k8, v8 = (x.transpose(1, 2) for x in bhsd)
    call = dict(causal=a.causal, p_scale=ps, out_scale=osc, out=torch.empty_like(q8))
    return (lambda: fp8attn.forward(q8, k8, v8, **call)), theirs, fp8attn.kernel_name(q8, k8, v8, **call)
