"""What the GPU and CPU benchmarks share: the scales every row uses, the fp64 oracle, the error metric,
the progress bar and the table formatting."""

from __future__ import annotations

import math
import sys

import torch

FN = torch.float8_e4m3fn
P_SCALE = 1.0 / 448.0  # Quark's prob_output_scale for e4m3fn
OUT_SCALE = 1.0 / 16.0


def progress(i: int, n: int, label: str) -> None:
    """A one-line progress bar on stderr: step i (0-based) of n."""
    w = 30
    done = int(w * (i + 1) / n)
    sys.stderr.write(f"\r[{'#' * done}{'.' * (w - done)}] {i + 1}/{n} {label[:60]:60s}")
    sys.stderr.flush()
    if i + 1 == n:
        sys.stderr.write("\n")


def ideal(q, k, v, causal, scale, heads=2):
    """fp64 attention on [B, S, H, D] real tensors for batch 0, the first `heads` q heads."""
    H, Hkv = q.shape[2], k.shape[2]
    qd = q[0, :, :heads].double().transpose(0, 1)
    kd = k[0].double().transpose(0, 1).repeat_interleave(H // Hkv, 0)[:heads]
    vd = v[0].double().transpose(0, 1).repeat_interleave(H // Hkv, 0)[:heads]
    s = qd @ kd.transpose(1, 2) * scale
    if causal:
        Sq, Sk = s.shape[1], s.shape[2]
        mask = torch.ones(Sq, Sk, dtype=torch.bool, device=q.device).tril(Sk - Sq)
        s = s.masked_fill(~mask, -math.inf)
    return (torch.softmax(s, -1) @ vd).transpose(0, 1)  # [S, heads, D]


def rel_err(o, ref):
    """Relative L2 error of o against the fp64 reference."""
    return float((o.double() - ref).norm() / ref.norm())


def fmt(x, nd=0):
    """A table cell: '-' for a missing value, floats with nd decimals."""
    return "-" if x is None else (f"{x:.{nd}f}" if isinstance(x, float) else str(x))
