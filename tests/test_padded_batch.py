"""The op's contract for padded batches, as vLLM's full CUDA-graph capture builds them: q rows past
cu_seqlens_q[-1] (never read; out not written there, as in FlashAttention's varlen forward), padded
requests with no queries and seqused_k = 0, block-table entries of vLLM's null block 0 past each
sequence's blocks (never read), and slot_mapping -1 (skipped by write_kv_cache)."""

from __future__ import annotations

import math

import torch
from cases import make_case
from test_forward_cpu import assert_matches_reference

import fp8attn
from fp8attn.reference import quantized_attention_bounds
from fp8attn.testing import NAN_CODE

PAD_ROWS = 5


def _padded(case):
    """The case as vLLM pads it: a null block 0 (NaN here) prepended to the caches, table entries past the
    used blocks and two padded requests pointing at it, cu_seqlens_q repeated, PAD_ROWS trailing q rows."""
    (q, k, v), kw = case.call_args()
    fp8 = k.dtype
    null = torch.full((1, *k.shape[1:]), NAN_CODE[fp8], dtype=torch.uint8).view(fp8)
    kc, vc = torch.cat([null, k]), torch.cat([null, v])
    bs, used = k.shape[1], kw["seqused_k"]
    table = kw["block_table"] + 1
    for b, n in enumerate(used.tolist()):
        table[b, math.ceil(n / bs):] = 0
    table = torch.cat([table, torch.zeros(2, table.shape[1], dtype=torch.int32)])
    cu = kw["cu_seqlens_q"]
    pad_q = torch.full((PAD_ROWS, *q.shape[1:]), float("nan")).to(q.dtype)
    kw_pad = {**kw, "block_table": table, "seqused_k": torch.cat([used, torch.zeros(2, dtype=torch.int32)]),
              "cu_seqlens_q": torch.cat([cu, cu[-1:], cu[-1:]])}
    return (torch.cat([q, pad_q]), kc, vc), kw_pad


def test_padded_paged_batch():
    # Sequence 2 has queries but no keys yet (seqused_k = 0): its rows are 0, lse -inf.
    case = make_case(layout="paged", q_lens=[3, 1, 2, 4], k_lens=[20, 33, 0, 4], fp8_out=False, seed=5)
    (q, k, v), kw = case.call_args()
    (qp, kc, vc), kw_pad = _padded(case)
    T = q.shape[0]
    out = torch.full(qp.shape, float("nan"), dtype=torch.bfloat16)
    _, lse = fp8attn.forward(qp, kc, vc, out=out, return_softmax_lse=True, **kw_pad)
    assert torch.isnan(out[T:].float()).all()  # padding rows: not written
    ref = quantized_attention_bounds(q, k, v, kv_tile=64, **kw)
    assert_matches_reference(out[:T], lse[:, :T], ref)
    rows = slice(4, 6)  # sequence 2
    assert (out[rows].float() == 0).all() and (lse[:, rows] == -math.inf).all()


def test_padded_batch_no_sync_path():
    """The same batch with max_seqlen_q / max_seqlen_k given (the graph-capture path) gives the same result."""
    case = make_case(layout="paged", q_lens=[3, 1, 4], k_lens=[20, 33, 4], seed=6)
    (qp, kc, vc), kw_pad = _padded(case)
    a = fp8attn.forward(qp, kc, vc, **kw_pad)
    b = fp8attn.forward(qp, kc, vc, max_seqlen_q=4, max_seqlen_k=33, **kw_pad)
    assert torch.equal(a[:8].view(torch.uint8), b[:8].view(torch.uint8))


def test_padded_write_kv_cache():
    """slot_mapping -1 (padding tokens, also past the real ones) is skipped."""
    key = torch.randn(6, 2, 64, dtype=torch.bfloat16)
    kc = torch.full((4, 16, 2, 64), 0x7F, dtype=torch.uint8).view(torch.float8_e4m3fn)
    vc = kc.clone()
    slots = torch.tensor([5, 17, 2, -1, -1, -1, -1])
    fp8attn.write_kv_cache(key, key, kc, vc, slots, torch.tensor([0.05]), torch.tensor([0.05]))
    flat = kc.view(-1, 2, 64).view(torch.uint8)
    assert torch.equal(flat[[5, 17, 2]], fp8attn.quantize(key[:3], torch.tensor([0.05]), kc.dtype).view(torch.uint8))
    untouched = torch.ones(64, dtype=torch.bool)
    untouched[[5, 17, 2]] = False
    assert (flat[untouched] == 0x7F).all()
