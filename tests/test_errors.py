"""Every bad input raises ValueError / TypeError naming the argument (never a crash or garbage)."""

from __future__ import annotations

import pytest
import torch
from cases import make_case

import fp8attn

F8 = torch.float8_e4m3fn


def _args(layout: str, q_lens: list[int], k_lens: list[int], over: dict) -> dict:
    """A valid call of the layout (as keyword arguments), with `over` replacing some of them."""
    case = make_case(layout=layout, q_lens=q_lens, k_lens=k_lens, heads=4, kv_heads=2, head_dim=64, seed=1)
    (q, k, v), kw = case.call_args()
    return {**dict(q=q, k=k, v=v, **kw), **over}


def dense(**over):
    return _args("dense", [8] * 2, [16] * 2, over)


def paged(**over):
    return _args("paged", [3, 5], [20, 40], over)


def varlen(**over):
    return _args("varlen", [3, 5], [20, 40], over)


def call(args):
    q, k, v = args.pop("q"), args.pop("k"), args.pop("v")
    return fp8attn.forward(q, k, v, **args)


CASES = [
    # dtypes
    ("k", TypeError, lambda: dense(k=dense()["k"].float())),
    ("v", TypeError, lambda: dense(v=dense()["v"].view(torch.uint8).view(torch.float8_e4m3fnuz))),
    ("q", TypeError, lambda: dense(q=dense()["q"].float())),
    ("q", TypeError, lambda: dense(q=dense()["q"].view(torch.uint8).view(torch.float8_e4m3fnuz))),
    ("out_dtype", TypeError, lambda: dense(out_scale=None, out_dtype=torch.float32)),
    ("out_dtype", TypeError, lambda: dense(out_dtype=torch.bfloat16)),  # out_scale given
    ("out", TypeError, lambda: dense(out=torch.empty(2, 8, 4, 64, dtype=torch.bfloat16))),
    ("q_descale", TypeError, lambda: dense(q_descale=torch.tensor([1.0], dtype=torch.float64))),
    ("cu_seqlens_q", TypeError, lambda: varlen(cu_seqlens_q=varlen()["cu_seqlens_q"].long())),
    ("block_table", TypeError, lambda: paged(block_table=paged()["block_table"].long())),
    ("q", TypeError, lambda: dense(q=[1, 2, 3])),
    # ranks and shapes
    ("q must be", ValueError, lambda: dense(q=dense()["q"][0, 0])),
    ("k must be", ValueError, lambda: dense(k=dense()["k"][0, 0])),
    ("v must have k's shape", ValueError, lambda: dense(v=dense()["v"][:, :8])),
    (
        "head dim",
        ValueError,
        lambda: dense(
            q=dense()["q"][..., :48].contiguous(),
            k=dense()["k"][..., :48].contiguous(),
            v=dense()["v"][..., :48].contiguous(),
        ),
    ),
    (
        "k head dim",
        ValueError,
        lambda: dense(k=torch.zeros(2, 16, 2, 128, dtype=F8), v=torch.zeros(2, 16, 2, 128, dtype=F8)),
    ),
    (
        "multiple of the number of k/v heads",
        ValueError,
        lambda: dense(
            k=torch.ones(2, 16, 3, 64).to(F8), v=torch.ones(2, 16, 3, 64).to(F8), k_descale=None, v_descale=None
        ),
    ),
    ("k batch size", ValueError, lambda: dense(k=dense()["k"][:1], v=dense()["v"][:1])),
    ("out must have q's shape", ValueError, lambda: dense(out=torch.empty(2, 8, 4, 32, dtype=F8))),
    (
        "last \\(head\\) dimension",
        ValueError,
        lambda: dense(q=dense()["q"].transpose(-1, -2).contiguous().transpose(-1, -2)),
    ),
    ("cu_seqlens_q is required", ValueError, lambda: varlen(cu_seqlens_q=None)),
    ("cu_seqlens_q is only valid", ValueError, lambda: dense(cu_seqlens_q=torch.tensor([0, 8, 16], dtype=torch.int32))),
    ("cu_seqlens_k is required", ValueError, lambda: varlen(cu_seqlens_k=None)),
    ("needs seqused_k or cu_seqlens_k", ValueError, lambda: paged(seqused_k=None)),
    ("seqused_k must have", ValueError, lambda: paged(seqused_k=torch.tensor([20], dtype=torch.int32))),
    ("block_table must have", ValueError, lambda: paged(block_table=paged()["block_table"][:1])),
    ("cu_seqlens_q must have 1 dimension", ValueError, lambda: varlen(cu_seqlens_q=varlen()["cu_seqlens_q"][None])),
    # index values
    (
        "cu_seqlens_q must be non-decreasing",
        ValueError,
        lambda: varlen(cu_seqlens_q=torch.tensor([0, 6, 5], dtype=torch.int32)),
    ),
    ("cu_seqlens_q\\[0\\]", ValueError, lambda: varlen(cu_seqlens_q=torch.tensor([1, 3, 8], dtype=torch.int32))),
    (
        "must equal the number of rows",
        ValueError,
        lambda: varlen(cu_seqlens_q=torch.tensor([0, 3, 7], dtype=torch.int32)),
    ),
    (
        "must equal the number of rows",
        ValueError,
        lambda: varlen(cu_seqlens_k=torch.tensor([0, 20, 61], dtype=torch.int32)),
    ),
    ("seqused_k\\[1\\]", ValueError, lambda: paged(seqused_k=torch.tensor([20, 10_000], dtype=torch.int32))),
    ("seqused_k\\[0\\]", ValueError, lambda: paged(seqused_k=torch.tensor([-1, 4], dtype=torch.int32))),
    ("block_table\\[1, 0\\]", ValueError, lambda: _bad_table(-1)),
    ("is out of range", ValueError, lambda: _bad_table(10_000)),
    # scales
    ("q_descale must have 1 element", ValueError, lambda: dense(q_descale=torch.ones(3))),
    ("k_descale must have 1 element", ValueError, lambda: dense(k_descale=torch.ones(4))),
    ("p_scale must have 1 element", ValueError, lambda: dense(p_scale=torch.ones(2))),
    ("out_scale must be positive", ValueError, lambda: dense(out_scale=torch.tensor([0.0]))),
    ("v_descale must be positive and finite", ValueError, lambda: dense(v_descale=torch.tensor([float("inf")]))),
    ("p_scale must be positive and finite", ValueError, lambda: dense(p_scale=torch.tensor([float("nan")]))),
    ("k_descale must be positive", ValueError, lambda: dense(k_descale=torch.tensor([-1.0]))),
    # scalars
    ("softmax_scale", ValueError, lambda: dense(softmax_scale=float("nan"))),
    ("softmax_scale", ValueError, lambda: dense(softmax_scale=-1.0)),
    ("softcap", ValueError, lambda: dense(softcap=-2.0)),
    ("window_size", ValueError, lambda: dense(window_size=(-5, 0))),
    ("window_size", ValueError, lambda: dense(window_size=3)),
    # (device mismatches need a second device: tests/gpu covers them)
]


def _bad_table(value: int):
    args = paged()
    table = args["block_table"].clone()
    table[1, 0] = value
    args["block_table"] = table
    return args


@pytest.mark.parametrize("match,exc,make", CASES, ids=[f"{i}-{c[0][:30]}" for i, c in enumerate(CASES)])
def test_bad_input_raises(match, exc, make):
    with pytest.raises(exc, match=match):
        call(make())


def test_valid_inputs_pass():
    for make in (dense, paged, varlen):
        call(make())
