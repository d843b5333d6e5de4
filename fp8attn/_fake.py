"""Fake (meta) implementations so torch.compile(fullgraph=True) traces through the ops."""

from __future__ import annotations

import torch

from . import _C  # noqa: F401  (defines the ops)


@torch.library.register_fake("fp8attn::forward")
def _forward_fake(q, k, v, out, cu_seqlens_q, cu_seqlens_k, seqused_k, max_seqlen_q, max_seqlen_k, block_table,
                  softmax_scale, causal, window_left, window_right, softcap, q_descale, k_descale, v_descale,
                  p_scale, out_scale, return_softmax_lse, kv_tile):
    if not return_softmax_lse:
        return q.new_empty((0,), dtype=torch.float32)
    if q.dim() == 3:
        return q.new_empty((q.shape[1], q.shape[0]), dtype=torch.float32)
    return q.new_empty((q.shape[0], q.shape[2], q.shape[1]), dtype=torch.float32)


@torch.library.register_fake("fp8attn::write_kv_cache")
def _write_kv_cache_fake(key, value, key_cache, value_cache, slot_mapping, k_scale, v_scale):
    return None
