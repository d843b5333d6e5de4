"""Random attention problems over the whole op contract, shared by the CPU and GPU test suites.

Inputs are random normal values quantized with random non-unit scales (never zeros); paged caches
hold more blocks than needed, in a shuffled block table, with the unused blocks filled with FP8 NaN
so a read of them shows up in the output.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from fp8attn.quant import amax_scale, fp8_max, quantize

NAN_CODE = {torch.float8_e4m3fn: 0x7F, torch.float8_e4m3fnuz: 0x80}


@dataclass
class Case:
    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    kwargs: dict = field(default_factory=dict)

    def call_args(self) -> tuple[tuple, dict]:
        return (self.q, self.k, self.v), dict(self.kwargs)


def _scale(x: torch.Tensor, fp8: torch.dtype, per_head: bool, head_dim: int, gen: torch.Generator) -> torch.Tensor:
    """A dequant scale that maps amax to ~70-100% of the FP8 range (per tensor or per head)."""
    jitter = 0.7 + 0.3 * torch.rand(1, generator=gen).item()
    if x.numel() == 0:  # an all-empty batch: any positive scale
        return torch.full((x.shape[-2] if per_head else 1,), jitter)
    if per_head:
        amax = x.abs().flatten(0, -3).amax(0).amax(-1).float()  # [heads]
        return (amax / (fp8_max(fp8) * jitter)).clamp_min(1e-6)
    return amax_scale(x, fp8) / jitter


def make_case(
    *,
    layout: str = "dense",
    q_lens: list[int],
    k_lens: list[int],
    heads: int = 4,
    kv_heads: int = 2,
    head_dim: int = 64,
    fp8: torch.dtype = torch.float8_e4m3fn,
    q_dtype: torch.dtype | None = None,
    per_head: bool = False,
    fp8_out: bool = True,
    causal: bool = False,
    window: tuple[int, int] = (-1, -1),
    softcap: float = 0.0,
    p_scale: float | None = None,
    block_size: int = 16,
    sinks: bool = False,
    seed: int = 0,
    device: str | torch.device = "cpu",
) -> Case:
    """One random problem. layout: 'dense' (all q_lens / k_lens equal), 'varlen' or 'paged'. sinks: one
    attention-sink logit per q head, spread from well below to well above the rows' largest logits (drawn
    after everything else, so a case's other inputs do not depend on it)."""
    gen = torch.Generator().manual_seed(seed)
    B = len(q_lens)
    D = head_dim
    q_dtype = q_dtype or fp8

    def randn(*shape):
        return torch.randn(*shape, generator=gen) * (0.5 + torch.rand(1, generator=gen).item() * 2)

    if layout == "dense":
        assert len(set(q_lens)) == 1 and len(set(k_lens)) == 1
        q_real = randn(B, q_lens[0], heads, D)
        k_real = randn(B, k_lens[0], kv_heads, D)
        v_real = randn(B, k_lens[0], kv_heads, D)
    else:
        q_real = randn(sum(q_lens), heads, D)
        k_real = randn(sum(k_lens), kv_heads, D)
        v_real = randn(sum(k_lens), kv_heads, D)
    qs = _scale(q_real, fp8, per_head, D, gen)
    ks = _scale(k_real, fp8, per_head, D, gen)
    vs = _scale(v_real, fp8, per_head, D, gen)
    hshape = (-1, 1) if per_head else ()
    if q_dtype in (torch.bfloat16, torch.float16):
        q = q_real.to(q_dtype)
    else:
        q = quantize(q_real, qs.view(hshape) if per_head else qs, fp8)
    k8 = quantize(k_real, ks.view(hshape) if per_head else ks, fp8)
    v8 = quantize(v_real, vs.view(hshape) if per_head else vs, fp8)

    kw: dict = dict(causal=causal, window_size=window, softcap=softcap, q_descale=qs, k_descale=ks, v_descale=vs)
    if p_scale is not None:
        kw["p_scale"] = torch.tensor([p_scale])
    if fp8_out:
        # Outputs are convex combinations of v rows, so amax(|v|) bounds them: no saturation.
        v_amax = (v8.float() * (vs.view(hshape) if per_head else vs)).abs().amax(dim=None) if v8.numel() else 1.0
        kw["out_scale"] = (torch.as_tensor(v_amax) / fp8_max(fp8)).reshape(1).float()
    if layout != "dense":
        kw["cu_seqlens_q"] = torch.tensor([0, *torch.tensor(q_lens).cumsum(0).tolist()], dtype=torch.int32)
    if layout == "varlen":
        kw["cu_seqlens_k"] = torch.tensor([0, *torch.tensor(k_lens).cumsum(0).tolist()], dtype=torch.int32)
    if layout == "paged":
        need = [math.ceil(n / block_size) for n in k_lens]
        max_blocks = max(need + [1]) + 1
        num_blocks = sum(need) + 3
        perm = torch.randperm(num_blocks, generator=gen)
        table = torch.full((B, max_blocks), num_blocks + 5, dtype=torch.int32)  # junk past the used blocks
        kc = torch.full((num_blocks, block_size, kv_heads, D), NAN_CODE[fp8], dtype=torch.uint8).view(fp8)
        vc = kc.clone()
        pos, start = 0, 0
        for b, n in enumerate(k_lens):
            for i in range(need[b]):
                blk = int(perm[pos])
                pos += 1
                table[b, i] = blk
                rows = slice(start + i * block_size, start + min(n, (i + 1) * block_size))
                cnt = rows.stop - rows.start
                kc[blk, :cnt] = k8[rows]
                vc[blk, :cnt] = v8[rows]
            start += n
        k8, v8 = kc, vc
        kw["block_table"] = table
        kw["seqused_k"] = torch.tensor(k_lens, dtype=torch.int32)
    if sinks:
        # The logits' spread: each is a sum of D products over sqrt(D) (the default softmax_scale).
        spread = float(q_real.std() * k_real.std()) if q_real.numel() > 1 and k_real.numel() > 1 else 1.0
        kw["sinks"] = (torch.randn(heads, generator=gen) * 2.5 * spread).float()
    case = Case(q, k8, v8, kw)
    return to_device(case, device)


def to_device(case: Case, device) -> Case:
    mv = lambda x: x.to(device) if isinstance(x, torch.Tensor) else x  # noqa: E731
    return Case(mv(case.q), mv(case.k), mv(case.v), {k: mv(v) for k, v in case.kwargs.items()})


def ordered_codes(x: torch.Tensor) -> torch.Tensor:
    """FP8 codes mapped to integers whose difference counts representable steps (ulps)."""
    c = x.view(torch.uint8).int()
    mag = c & 0x7F
    return torch.where((c & 0x80) != 0, -mag, mag)


def fp8_ulp_agreement(a: torch.Tensor, b: torch.Tensor) -> float:
    """Fraction of FP8 outputs within 1 ulp of each other."""
    if a.numel() == 0:
        return 1.0
    return ((ordered_codes(a) - ordered_codes(b)).abs() <= 1).float().mean().item()


def rel_l2(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.double(), b.double()
    return ((a - b).norm() / b.norm().clamp_min(1e-30)).item()


def kv_args(**over) -> dict:
    """write_kv_cache's arguments for 3 rows of 2 kv heads x 64 into a 4 x 16 FP8 cache; `over` replaces some."""
    a = dict(
        key=torch.randn(3, 2, 64, dtype=torch.bfloat16),
        value=torch.randn(3, 2, 64, dtype=torch.bfloat16),
        key_cache=torch.zeros(4, 16, 2, 64, dtype=torch.float8_e4m3fn),
        value_cache=torch.zeros(4, 16, 2, 64, dtype=torch.float8_e4m3fn),
        slot_mapping=torch.tensor([0, 1, 2]),
        k_scale=torch.tensor([0.1]),
        v_scale=torch.tensor([0.1]),
    )
    a.update(over)
    return a
