"""Pure-PyTorch fp64 references.

- ``ideal_attention``: exact attention on the dequantized FP8 inputs (no quantization of P or O).
- ``quantized_attention``: the normative math of docs/design.md §1 with every quantization point, tiled
  over KV like the kernels (tiles aligned at multiples of ``kv_tile`` from key 0, ascending), so the
  CPU and GPU implementations can be compared with it exactly.

Both take the keyword arguments of ``fp8attn.forward``, and both follow the NaN rule every
implementation follows (docs/numerics.md, "NaN"):

- a NaN in a query row's q (a 16-bit q stays NaN through ``sat(q / q_descale)``), or in the k row of a
  key the row sees (visible under the causal / window masks, inside the sequence), makes that row's
  whole output and its lse NaN;
- a NaN in the v row of a key the row sees makes those output columns NaN, whatever P is there;
- a NaN in the k of a key the row does not see never affects the row (masked scores are replaced by
  -inf), and keys outside the sequence are never read; NaN in the v of a masked key inside the
  sequence is unspecified (the kernels multiply it by P = 0, and 0 * NaN = NaN);
- rows with no visible key give 0 and lse = -inf (with ``sinks``: 0 and lse = the row's sink); ±inf in a
  16-bit q saturates like any large value.

Attention sinks (``sinks``, one logit per q head in the units of the final logits) add one term to each
row's softmax that carries no value: ``exp(sink - m)`` in the denominator, nothing in the output; the
lse includes it.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass

import torch

from .ops import resolve_out_dtype
from .quant import FP8_DTYPES, default_p_scale, fp8_max

__all__ = ["QuantizedBounds", "ideal_attention", "quantized_attention", "quantized_attention_bounds", "sequences"]

_LOG2E = 1.0 / math.log(2.0)


@dataclass
class Sequence:
    """One sequence of a call, unpacked: q8 ``[H, Sq, D]`` and k8/v8 ``[Hkv, Sk, D]`` as fp64 values of
    their FP8 codes (not yet descaled), and where its rows live in q/out and lse."""

    q8: torch.Tensor
    k8: torch.Tensor
    v8: torch.Tensor
    q_rows: slice  # rows of q (varlen) or of the batch entry (dense)
    b: int


def _scale(t: torch.Tensor | None, heads: int) -> torch.Tensor:
    if t is None:
        return torch.ones(heads, dtype=torch.float64)
    t = t.detach().double().cpu().reshape(-1)
    return t.expand(heads) if t.numel() == 1 else t


def _sinks(sinks: torch.Tensor | None) -> torch.Tensor | None:
    """The sinks as fp64 ``[H, 1, 1]`` (natural units), or None."""
    return None if sinks is None else sinks.detach().double().cpu().reshape(-1, 1, 1)


def sequences(q, k, v, *, cu_seqlens_q=None, cu_seqlens_k=None, seqused_k=None, block_table=None,
              q_descale=None, **_) -> Iterator[Sequence]:
    """Unpack a call's dense / varlen / paged layout into per-sequence fp64 tensors (q quantized to FP8
    first when it is 16-bit, as the kernels do)."""
    fp8 = k.dtype
    q, k, v = q.detach().cpu(), k.detach().cpu(), v.detach().cpu()
    H = q.shape[-2]
    if q.dtype not in FP8_DTYPES:
        qs = _scale(q_descale, H).float()
        inv = (1.0 / qs).view(H, 1)
        m = fp8_max(fp8)
        q = (q.float() * inv).clamp(-m, m).to(fp8)
    cu_q = cu_seqlens_q.cpu().tolist() if cu_seqlens_q is not None else None
    cu_k = cu_seqlens_k.cpu().tolist() if cu_seqlens_k is not None else None
    used = seqused_k.cpu().tolist() if seqused_k is not None else None
    B = len(cu_q) - 1 if cu_q is not None else q.shape[0]
    for b in range(B):
        if cu_q is not None:
            rows = slice(cu_q[b], cu_q[b + 1])
            qb = q[rows]
        else:
            rows = slice(0, q.shape[1])
            qb = q[b]
        if block_table is not None:
            n = used[b] if used is not None else cu_k[b + 1] - cu_k[b]
            bs = k.shape[1]
            blocks = block_table[b, : (n + bs - 1) // bs].cpu().long()
            kb = k[blocks].reshape(-1, *k.shape[2:])[:n]
            vb = v[blocks].reshape(-1, *v.shape[2:])[:n]
        elif cu_k is not None:
            n = used[b] if used is not None else cu_k[b + 1] - cu_k[b]
            kb, vb = k[cu_k[b]: cu_k[b] + n], v[cu_k[b]: cu_k[b] + n]
        else:
            n = used[b] if used is not None else k.shape[1]
            kb, vb = k[b, :n], v[b, :n]
        yield Sequence(qb.double().transpose(0, 1), kb.double().transpose(0, 1), vb.double().transpose(0, 1), rows, b)


def _logits(seq: Sequence, *, softmax_scale, softcap, q_descale, k_descale, causal, window_size) -> torch.Tensor:
    """Scaled, soft-capped, masked logits ``[H, Sq, Sk]`` (natural units, -inf where masked)."""
    H, Sq, D = seq.q8.shape
    Hkv, Sk, _ = seq.k8.shape
    g = H // Hkv
    k8 = seq.k8.repeat_interleave(g, 0)
    scale = float(softmax_scale) if softmax_scale is not None else 1.0 / math.sqrt(D)
    qk_scale = (_scale(q_descale, H) * _scale(k_descale, Hkv).repeat_interleave(g)).view(H, 1, 1)
    s = torch.einsum("hqd,hkd->hqk", seq.q8, k8) * scale * qk_scale
    if softcap:
        softcap = float(softcap)
        s = softcap * torch.tanh(s / softcap)
    left, right = window_size
    if causal:
        right = 0
    i = torch.arange(Sq).view(-1, 1)
    j = torch.arange(Sk).view(1, -1)
    d = j - i - (Sk - Sq)
    visible = torch.ones(Sq, Sk, dtype=torch.bool)
    if right >= 0:
        visible &= d <= right
    if left >= 0:
        visible &= -d <= left
    return s.masked_fill(~visible, -math.inf)


def _empty_like_outputs(q):
    H = q.shape[-2]
    lse_shape = (H, q.shape[0]) if q.dim() == 3 else (q.shape[0], H, q.shape[1])
    return torch.zeros(q.shape, dtype=torch.float64), torch.full(lse_shape, -math.inf, dtype=torch.float64)


def _place(o_all, lse_all, q, seq: Sequence, o, lse):
    """Write one sequence's ``o [H, Sq, D]`` and ``lse [H, Sq]`` into the call-shaped outputs."""
    if q.dim() == 3:
        o_all[seq.q_rows] = o.transpose(0, 1)
        lse_all[:, seq.q_rows] = lse
    else:
        o_all[seq.b, seq.q_rows] = o.transpose(0, 1)
        lse_all[seq.b, :, seq.q_rows] = lse


def ideal_attention(q, k, v, *, softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0, sinks=None,
                    q_descale=None, k_descale=None, v_descale=None, **kw) -> tuple[torch.Tensor, torch.Tensor]:
    """Exact fp64 attention on the dequantized inputs. Returns ``(O, lse)`` in fp64 (O is the real-valued
    output, before any output quantization); rows with no visible key give 0 and lse = -inf (the sink with
    ``sinks``)."""
    o_all, lse_all = _empty_like_outputs(q)
    sink = _sinks(sinks)
    for seq in sequences(q, k, v, q_descale=q_descale, **kw):
        s = _logits(seq, softmax_scale=softmax_scale, softcap=softcap, q_descale=q_descale, k_descale=k_descale,
                    causal=causal, window_size=window_size)
        H, Hkv = seq.q8.shape[0], seq.v8.shape[0]
        v_real = (seq.v8 * _scale(v_descale, Hkv).view(Hkv, 1, 1)).repeat_interleave(H // Hkv, 0)
        terms = s if sink is None else torch.cat([s, sink.expand(H, s.shape[1], 1)], dim=-1)
        lse = torch.logsumexp(terms, dim=-1)
        p = torch.where(lse.unsqueeze(-1) == -math.inf, 0.0, torch.exp(s - lse.unsqueeze(-1)))  # empty rows: 0
        o = p @ v_real
        _place(o_all, lse_all, q, seq, o, lse)
    return o_all, lse_all


def quantized_attention(q, k, v, *, kv_tile: int | None = None, l_mode: str = "quantized",
                        sink_in_max: bool = False, softmax_scale=None, causal=False, window_size=(-1, -1),
                        softcap=0.0, q_descale=None, k_descale=None, v_descale=None, p_scale=None, out_scale=None,
                        out_dtype=None, **kw) -> tuple[torch.Tensor, torch.Tensor]:
    """docs/design.md §1 in fp64 with every quantization point, tiled like the kernels.

    Args:
      kv_tile: KV tile length of the online softmax (None: one tile spanning all keys).
      l_mode: ``"quantized"`` sums the FP8 values of P (numerator and denominator consistent, the
        kernels' choice); ``"exact"`` sums the unquantized p (vLLM's ROCm Triton kernel).
      sink_in_max: with ``sinks``, whether the running max starts at the sink (vLLM's Triton kernel: P is
        then quantized against max(sink, logits)); False, the kernels' choice, adds the sink once after the
        last tile (docs/numerics.md, "Attention sinks").

    Returns ``(out, lse)`` as ``forward`` does: out in the output dtype, lse float32.
    """
    b = _quantized(q, k, v, kv_tile=kv_tile, l_mode=l_mode, sink_in_max=sink_in_max, tie_tol=None,
                   softmax_scale=softmax_scale, causal=causal, window_size=window_size, softcap=softcap,
                   q_descale=q_descale, k_descale=k_descale, v_descale=v_descale, p_scale=p_scale,
                   out_scale=out_scale, out_dtype=out_dtype, **kw)
    return b.out, b.lse


@dataclass
class QuantizedBounds:
    """``quantized_attention``'s result and the range it spans over every rounding of the P codes that
    lie on (within ``tie_tol`` of) an FP8 rounding boundary.

    ``out`` / ``lse`` are exactly ``quantized_attention``'s; ``out_lo <= out <= out_hi`` and
    ``lse_lo <= lse <= lse_hi`` elementwise (same dtypes). Rows without such a code (``tie`` False,
    shaped like ``lse``) have ``out_lo == out == out_hi`` and ``lse_lo == lse == lse_hi``.
    """

    out: torch.Tensor
    lse: torch.Tensor
    out_lo: torch.Tensor
    out_hi: torch.Tensor
    lse_lo: torch.Tensor
    lse_hi: torch.Tensor
    tie: torch.Tensor


def quantized_attention_bounds(q, k, v, *, tie_tol: float = 2.0**-20, kv_tile: int | None = None,
                               l_mode: str = "quantized", **kw) -> QuantizedBounds:
    """``quantized_attention`` plus the range an implementation with float32 logits may legitimately reach.

    A P code sits on a tie when p / p_scale lies so close to an FP8 rounding boundary that the
    rounding error of float32 logits can put it on either side. Each logit s (log2 units, against the
    row max m) is taken as uncertain by ``tie_tol * max(1, |s|, |m|)``; every P code is rounded at both
    ends of that range, and the online softmax is carried through with the low and the high codes,
    bounding each output by interval arithmetic (exact: P is non-negative, the rescale factors are
    shared). With ``tie_tol=0`` the bounds collapse onto ``quantized_attention``'s result.

    Args:
      tie_tol: relative logit uncertainty; the default (2^-20, 8 float32 ulps) covers the CPU
        implementation's float32 dot product, scaling, tanh softcap and exp2.
      kv_tile, l_mode: as for ``quantized_attention``; other keywords are ``forward``'s.
    """
    if tie_tol < 0:
        raise ValueError(f"tie_tol must be >= 0, got {tie_tol}")
    return _quantized(q, k, v, kv_tile=kv_tile, l_mode=l_mode, sink_in_max=False, tie_tol=tie_tol, **kw)


def _normalize(acc: torch.Tensor, l_sum: torch.Tensor, m: torch.Tensor, ps: float, v_scale: torch.Tensor):
    """The epilogue: ``O = acc * p_scale * v_descale / l`` and ``lse = m ln2 + ln l`` (0 and -inf for empty rows)."""
    empty = m == -math.inf
    o = torch.where(empty, 0.0, acc * ps * v_scale / l_sum.clamp_min(1e-300))
    lse = torch.where(empty, -math.inf, m / _LOG2E + torch.log(l_sum.clamp_min(1e-300))).squeeze(-1)
    return o, lse


def _quantized(q, k, v, *, kv_tile, l_mode, sink_in_max, tie_tol, softmax_scale=None, causal=False,
               window_size=(-1, -1), softcap=0.0, sinks=None, q_descale=None, k_descale=None, v_descale=None,
               p_scale=None, out_scale=None, out_dtype=None, **kw) -> QuantizedBounds:
    """The quantized reference; with ``tie_tol`` not None also the tie bounds (else they alias the result)."""
    if l_mode not in ("quantized", "exact"):
        raise ValueError(f"l_mode must be 'quantized' or 'exact', got {l_mode!r}")
    fp8 = k.dtype
    dtype = resolve_out_dtype(q, k, out_scale, out_dtype)
    ps = float(p_scale.reshape(-1)[0]) if p_scale is not None else default_p_scale(fp8)
    inv_ps = float(torch.tensor(1.0 / ps, dtype=torch.float32))  # the kernels multiply by the fp32 reciprocal
    pmax = fp8_max(fp8)
    bounds = tie_tol is not None
    sink = _sinks(sinks)
    sink2 = None if sink is None else sink * _LOG2E

    def quantize_p(x: torch.Tensor) -> torch.Tensor:
        return x.clamp(max=pmax).float().to(fp8).double()

    o_all, lse_all = _empty_like_outputs(q)
    if bounds:
        o_lo_all, lse_lo_all = _empty_like_outputs(q)
        o_hi_all, lse_hi_all = _empty_like_outputs(q)
        tie_all = torch.zeros(lse_all.shape, dtype=torch.bool)
    for seq in sequences(q, k, v, q_descale=q_descale, **kw):
        s = _logits(seq, softmax_scale=softmax_scale, softcap=softcap, q_descale=q_descale, k_descale=k_descale,
                    causal=causal, window_size=window_size) * _LOG2E
        H, Sq, Sk = s.shape
        Hkv, D = seq.v8.shape[0], seq.v8.shape[2]
        v8 = seq.v8.repeat_interleave(H // Hkv, 0)
        m = torch.full((H, Sq, 1), -math.inf, dtype=torch.float64)
        l_sum = torch.zeros(H, Sq, 1, dtype=torch.float64)
        if sink2 is not None and sink_in_max:  # the sink's term exp2(sink - m) = 1 at m = sink
            m, l_sum = sink2.expand(H, Sq, 1).clone(), torch.ones(H, Sq, 1, dtype=torch.float64)
        acc = torch.zeros(H, Sq, D, dtype=torch.float64)
        if bounds:
            l_lo, l_hi = l_sum.clone(), l_sum.clone()
            acc_lo, acc_hi = acc.clone(), acc.clone()
            tie = torch.zeros(H, Sq, dtype=torch.bool)
        tile = kv_tile or max(Sk, 1)
        for t0 in range(0, Sk, tile):
            st = s[:, :, t0: t0 + tile]
            m_new = torch.maximum(m, st.amax(-1, keepdim=True))  # both propagate NaN
            # Only -inf - -inf (nothing visible yet) is defined as 0; a NaN score stays NaN.
            alpha = torch.where(m == -math.inf, 0.0, torch.exp2(m - m_new))
            p = torch.where(m_new == -math.inf, 0.0, torch.exp2(st - m_new))
            p8 = quantize_p(p * inv_ps)
            l_tile = p8.sum(-1, keepdim=True) * ps if l_mode == "quantized" else p.sum(-1, keepdim=True)
            l_sum = l_sum * alpha + l_tile
            vt = v8[:, t0: t0 + tile]
            acc = acc * alpha + p8 @ vt
            m = m_new
            if bounds:
                # p8 at both ends of the logit's uncertainty (masked keys: p = 0, no uncertainty).
                delta = torch.where(torch.isfinite(st), tie_tol * torch.maximum(st.abs(), m_new.abs()).clamp_min(1.0),
                                    0.0)
                # (p = 0 stays 0 however uncertain its logit: 0 * exp2(inf) would be NaN)
                p8_lo = quantize_p(p * inv_ps * torch.exp2(-delta))
                p8_hi = quantize_p(torch.where(p == 0, 0.0, p * inv_ps * torch.exp2(delta)))
                tie |= (p8_lo != p8_hi).any(-1)
                if l_mode == "quantized":
                    l_lo = l_lo * alpha + p8_lo.sum(-1, keepdim=True) * ps
                    l_hi = l_hi * alpha + p8_hi.sum(-1, keepdim=True) * ps
                else:
                    l_lo, l_hi = l_sum, l_sum
                # P >= 0, so the smallest P·V takes the low codes on positive v and the high ones on negative v.
                v_pos, v_neg = vt.clamp(min=0.0), vt.clamp(max=0.0)
                acc_lo = acc_lo * alpha + p8_lo @ v_pos + p8_hi @ v_neg
                acc_hi = acc_hi * alpha + p8_hi @ v_pos + p8_lo @ v_neg
        if sink2 is not None and not sink_in_max:  # softmax.h's add_sink, once after the last tile
            m_new = torch.maximum(m, sink2)  # (NaN propagates)
            alpha = torch.exp2(m - m_new)  # a row that saw nothing: 0
            l_sum = l_sum * alpha + torch.exp2(sink2 - m_new)
            acc = acc * alpha
            if bounds:
                l_lo = l_lo * alpha + torch.exp2(sink2 - m_new)
                l_hi = l_hi * alpha + torch.exp2(sink2 - m_new)
                acc_lo, acc_hi = acc_lo * alpha, acc_hi * alpha
            m = m_new
        v_scale = _scale(v_descale, Hkv).repeat_interleave(H // Hkv).view(H, 1, 1)
        o, lse = _normalize(acc, l_sum, m, ps, v_scale)
        _place(o_all, lse_all, q, seq, o, lse)
        if bounds:
            # O = acc / l: the extremes lie at the ends of both intervals.
            (o_ll, lse_lo), (o_lh, _) = (_normalize(acc_lo, l_, m, ps, v_scale) for l_ in (l_lo, l_hi))
            (o_hl, _), (o_hh, lse_hi) = (_normalize(acc_hi, l_, m, ps, v_scale) for l_ in (l_lo, l_hi))
            _place(o_lo_all, lse_lo_all, q, seq, torch.minimum(o_ll, o_lh), lse_lo)
            _place(o_hi_all, lse_hi_all, q, seq, torch.maximum(o_hl, o_hh), lse_hi)
            if q.dim() == 3:
                tie_all[:, seq.q_rows] = tie
            else:
                tie_all[seq.b, :, seq.q_rows] = tie

    def finish_out(o_real: torch.Tensor) -> torch.Tensor:
        if dtype in FP8_DTYPES:
            osc = float(out_scale.reshape(-1)[0])
            return (o_real / osc).clamp(-pmax, pmax).float().to(dtype)
        return o_real.to(dtype)

    out, lse_out = finish_out(o_all), lse_all.float()
    if not bounds:
        return QuantizedBounds(out, lse_out, out, out, lse_out, lse_out, torch.zeros(lse_all.shape, dtype=torch.bool))
    return QuantizedBounds(out, lse_out, finish_out(o_lo_all), finish_out(o_hi_all), lse_lo_all.float(),
                           lse_hi_all.float(), tie_all)
