"""The embedded default workload: a Llama-3.1-8B-shaped attention batch on a paged FP8 KV cache.

32 q heads, 8 kv heads, head dim 128; a vLLM-style mixed batch (prefills, a chunked-prefill
continuation, decodes) over a shuffled paged cache, with per-tensor scales calibrated the way Quark
calibrates them (amax / max_F of q, k, v; P scale 1/max_F; the output scale from a calibration batch).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .quant import amax_scale, fp8_max, quantize
from .testing import paged_kv

# (new query tokens, total keys) per sequence: two prefills, a chunked-prefill continuation, decodes.
DEFAULT_SEQS = [(384, 384), (200, 200), (128, 900), *[(1, n) for n in (2048, 1500, 1024, 700, 333, 64, 1777, 1200)]]


@dataclass
class Workload:
    q: torch.Tensor  # [T, 32, 128] bf16 (quantized in the kernel with q_descale)
    key_cache: torch.Tensor  # [num_blocks, block_size, 8, 128] FP8
    value_cache: torch.Tensor
    kwargs: dict  # the remaining forward() arguments
    seqs: list[tuple[int, int]]

    @property
    def flops(self) -> float:
        """4·H·D per visible (query, key) pair, causal bottom-right."""
        H, D = self.q.shape[1], self.q.shape[2]
        pairs = sum(q * k - q * (q - 1) / 2 for q, k in self.seqs)
        return 4.0 * H * D * pairs

    def to(self, device: str | torch.device) -> Workload:
        mv = lambda x: x.to(device) if isinstance(x, torch.Tensor) else x  # noqa: E731
        return Workload(mv(self.q), mv(self.key_cache), mv(self.value_cache),
                        {k: mv(v) for k, v in self.kwargs.items()}, self.seqs)

    @property
    def kv_bytes(self) -> int:
        Hkv, D = self.key_cache.shape[2], self.key_cache.shape[3]
        return 2 * sum(k for _, k in self.seqs) * Hkv * D * self.key_cache.element_size()


def _activations(n: int, heads: int, dim: int, gen: torch.Generator) -> torch.Tensor:
    """Activation-like values: a few outlier channels, as RoPE'd q/k projections have."""
    x = torch.randn(n, heads, dim, generator=gen)
    chan = 1.0 + 4.0 * (torch.rand(heads, dim, generator=gen) ** 8)
    return x * chan


def llama_batch(seqs: list[tuple[int, int]] | None = None, *, fp8: torch.dtype = torch.float8_e4m3fn,
                heads: int = 32, kv_heads: int = 8, head_dim: int = 128, block_size: int = 16, seed: int = 0,
                device: str | torch.device = "cpu") -> Workload:
    """Build the mixed paged batch and its calibrated scales."""
    seqs = seqs or DEFAULT_SEQS
    gen = torch.Generator().manual_seed(seed)
    T, Tk = sum(q for q, _ in seqs), sum(k for _, k in seqs)
    q = _activations(T, heads, head_dim, gen)
    k = _activations(Tk, kv_heads, head_dim, gen)
    v = torch.randn(Tk, kv_heads, head_dim, generator=gen)
    q_s, k_s, v_s = amax_scale(q, fp8), amax_scale(k, fp8), amax_scale(v, fp8)
    k8, v8 = quantize(k, k_s, fp8), quantize(v, v_s, fp8)

    lens = [n for _, n in seqs]
    (kc, vc), table = paged_kv([k8, v8], lens, block_size, spare_blocks=8, generator=gen)
    kwargs = dict(
        cu_seqlens_q=torch.tensor([0, *torch.tensor([s for s, _ in seqs]).cumsum(0).tolist()], dtype=torch.int32),
        seqused_k=torch.tensor([n for _, n in seqs], dtype=torch.int32),
        max_seqlen_q=max(s for s, _ in seqs), max_seqlen_k=max(n for _, n in seqs),
        block_table=table, causal=True, q_descale=q_s, k_descale=k_s, v_descale=v_s,
        p_scale=torch.tensor([1.0 / fp8_max(fp8)]),
    )
    w = Workload(q.to(torch.bfloat16), kc, vc, kwargs, list(seqs))
    return w.to(device)

