"""The op signature is written once (csrc/fwd_args.h, kForwardArgs) and what users see stays as it was."""

from __future__ import annotations

import inspect

import torch

import fp8attn

FORWARD_ARGS = (
    "Tensor q, Tensor k, Tensor v, Tensor(a!) out, Tensor? cu_seqlens_q, Tensor? cu_seqlens_k, Tensor? seqused_k, "
    "int max_seqlen_q, int max_seqlen_k, Tensor? block_table, float softmax_scale, bool causal, int window_left, "
    "int window_right, float softcap, Tensor? q_descale, Tensor? k_descale, Tensor? v_descale, Tensor? p_scale, "
    "Tensor? out_scale, bool return_softmax_lse, int kv_tile, Tensor? sinks=None")


def test_schemas_unchanged():
    assert str(torch.ops.fp8attn.forward.default._schema) == f"fp8attn::forward({FORWARD_ARGS}) -> Tensor"
    assert str(torch.ops.fp8attn.forward_kernel.default._schema) == f"fp8attn::forward_kernel({FORWARD_ARGS}) -> str"
    assert str(torch.ops.fp8attn.write_kv_cache.default._schema) == (
        "fp8attn::write_kv_cache(Tensor key, Tensor value, Tensor(a!) key_cache, Tensor(b!) value_cache, "
        "Tensor slot_mapping, Tensor? k_scale, Tensor? v_scale) -> ()")


def test_python_signature_unchanged():
    assert list(inspect.signature(fp8attn.forward).parameters) == [
        "q", "k", "v", "cu_seqlens_q", "cu_seqlens_k", "seqused_k", "max_seqlen_q", "max_seqlen_k", "block_table",
        "softmax_scale", "causal", "window_size", "softcap", "sinks", "q_descale", "k_descale", "v_descale", "p_scale",
        "out_scale", "out_dtype", "out", "return_softmax_lse", "kv_tile"]


def test_positional_and_keyword_calls_agree():
    """The registered op takes its arguments positionally (as tests/gpu and older callers pass them, without
    the later `sinks`, which defaults to None) and by name (as fp8attn.forward and the vLLM backend should)."""
    q = torch.randn(1, 8, 2, 64).to(torch.float8_e4m3fn)
    one = torch.tensor([1.0])
    pos = torch.empty(q.shape, dtype=torch.bfloat16)
    lse = torch.ops.fp8attn.forward(q, q, q, pos, None, None, None, 0, 0, None, 0.125, True, -1, -1, 0.0, one, one,
                                    one, None, None, True, 0)
    kw = torch.empty_like(pos)
    lse_kw = torch.ops.fp8attn.forward(
        q=q, k=q, v=q, out=kw, cu_seqlens_q=None, cu_seqlens_k=None, seqused_k=None, max_seqlen_q=0, max_seqlen_k=0,
        block_table=None, softmax_scale=0.125, causal=True, window_left=-1, window_right=-1, softcap=0.0,
        q_descale=one, k_descale=one, v_descale=one, p_scale=None, out_scale=None, return_softmax_lse=True,
        kv_tile=0, sinks=None)
    assert torch.equal(pos, kw) and torch.equal(lse, lse_kw)
    assert torch.equal(pos, fp8attn.forward(q, q, q, softmax_scale=0.125, causal=True, q_descale=one, k_descale=one,
                                            v_descale=one))
