"""The public op: ``fp8attn.forward`` over ``torch.ops.fp8attn.forward``."""

from __future__ import annotations

import math
import operator
import re

import torch

from . import _C  # noqa: F401  (registers torch.ops.fp8attn)
from .quant import FP8_DTYPES

__all__ = ["forward", "kernel_name", "kernel_kv_tile", "write_kv_cache", "resolve_out_dtype"]

_16BIT = (torch.bfloat16, torch.float16)


def resolve_out_dtype(q: torch.Tensor, k: torch.Tensor, out_scale: torch.Tensor | None,
                      out_dtype: torch.dtype | None) -> torch.dtype:
    """The output dtype of a call: k's FP8 type with out_scale, else out_dtype, else q's 16-bit
    dtype, else bfloat16."""
    if out_scale is not None:
        if out_dtype is not None and out_dtype != k.dtype:
            raise TypeError(f"out_dtype must be k's FP8 dtype ({k.dtype}) when out_scale is given, got {out_dtype}")
        return k.dtype
    if out_dtype is not None:
        if out_dtype not in _16BIT:
            raise TypeError(f"out_dtype must be torch.bfloat16 or torch.float16 (FP8 output needs out_scale), "
                            f"got {out_dtype}")
        return out_dtype
    return q.dtype if q.dtype in _16BIT else torch.bfloat16


def _check_tensor(x: object, name: str, optional: bool = False) -> None:
    if x is None and optional:
        return
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor{' or None' if optional else ''}, got {type(x).__name__}")


_INT64 = (-(2**63), 2**63 - 1)


def _int(x: object, name: str) -> int:
    """x as an int for an ``int`` argument of the op (int64; the op checks the field's own range)."""
    if isinstance(x, torch.SymInt):
        return x
    if isinstance(x, bool):
        raise TypeError(f"{name} must be an int, got bool")
    try:
        v = operator.index(x)
    except TypeError:
        raise TypeError(f"{name} must be an int, got {type(x).__name__}") from None
    if not _INT64[0] <= v <= _INT64[1]:
        raise ValueError(f"{name} = {v} does not fit in int64")
    return v


def _float(x: object, name: str) -> float:
    """x as a float for a ``float`` argument of the op (the op checks that it is finite as a float32)."""
    if isinstance(x, torch.SymFloat):
        return x
    if isinstance(x, (bool, str, bytes)) or not hasattr(type(x), "__float__"):
        raise TypeError(f"{name} must be a float, got {type(x).__name__}")
    try:
        return float(x)
    except (TypeError, ValueError, OverflowError) as e:
        raise TypeError(f"{name} must be a float, got {x!r} ({e})") from None


def _bool(x: object, name: str) -> bool:
    if isinstance(x, torch.SymBool):
        return x
    if not isinstance(x, bool):
        raise TypeError(f"{name} must be a bool, got {type(x).__name__}")
    return x


def _window(window_size: tuple[int, int]) -> tuple[int, int]:
    try:
        left, right = window_size
    except (TypeError, ValueError):
        raise ValueError(f"window_size must be a pair of ints (left, right), got {window_size!r}") from None
    return _int(left, "window_size[0]"), _int(right, "window_size[1]")


def forward(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    cu_seqlens_q: torch.Tensor | None = None,
    cu_seqlens_k: torch.Tensor | None = None,
    seqused_k: torch.Tensor | None = None,
    max_seqlen_q: int | None = None,
    max_seqlen_k: int | None = None,
    block_table: torch.Tensor | None = None,
    softmax_scale: float | None = None,
    causal: bool = False,
    window_size: tuple[int, int] = (-1, -1),
    softcap: float = 0.0,
    sinks: torch.Tensor | None = None,
    q_descale: torch.Tensor | None = None,
    k_descale: torch.Tensor | None = None,
    v_descale: torch.Tensor | None = None,
    p_scale: torch.Tensor | None = None,
    out_scale: torch.Tensor | None = None,
    out_dtype: torch.dtype | None = None,
    out: torch.Tensor | None = None,
    return_softmax_lse: bool = False,
    kv_tile: int = 0,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """FP8 attention: ``softmax(q·kᵀ·scale)·v`` with FP8 Q/K/V, FP8-quantized P and optional FP8 output.

    Layouts (names follow ``flash_attn_varlen_func``):
      - dense: q ``[B, Sq, H, D]``, k/v ``[B, Sk, Hkv, D]``;
      - varlen: q ``[T, H, D]`` with ``cu_seqlens_q`` (int32 ``[B+1]``), k/v ``[Tk, Hkv, D]`` with
        ``cu_seqlens_k`` (``seqused_k`` may shorten each sequence);
      - paged: k/v caches ``[num_blocks, block_size, Hkv, D]`` with ``block_table`` (int32
        ``[B, max_blocks]``) and ``seqused_k`` (int32 ``[B]``).

    Padded batches (vLLM's full CUDA-graph capture): q may hold rows past ``cu_seqlens_q[-1]``; they are
    never read, and their ``out`` rows and lse columns are not written (as in FlashAttention's varlen
    forward). Padded requests have no queries (``cu_seqlens_q`` repeats) and ``seqused_k = 0``; a
    sequence with queries and ``seqused_k = 0`` gives 0 and lse = -inf. Block-table entries past a
    sequence's ``ceil(seqused_k / block_size)`` blocks (vLLM's null block 0) are never read.

    Args:
      q: FP8 (k's type), bfloat16 or float16. A 16-bit q is quantized in the kernel as
        ``sat(q / q_descale)`` (``q_descale`` None means 1.0).
      k, v: float8_e4m3fn or float8_e4m3fnuz (the same type).
      max_seqlen_q, max_seqlen_k: bounds on the per-sequence lengths. When both are given (or the
        layout is dense) the call never synchronises with the host and is safe under CUDA/HIP graph
        capture; when left None they are derived from the index tensors, which are then validated.
      softmax_scale: defaults to ``1/sqrt(D)``.
      causal: causal mask, aligned bottom-right when ``Sq < Sk``.
      window_size: ``(left, right)`` sliding window, -1 = unbounded.
      softcap: logits soft cap ``softcap·tanh(s/softcap)`` (0 = off).
      sinks: attention sinks (gpt-oss), float32 ``[H]`` on q's device, contiguous: one logit per q head in
        the units of the final logits (after softmax_scale, the descales and softcap; not itself capped).
        Each row's softmax gains that logit, which carries no value: it adds ``exp(sink - m)`` to the
        denominator and nothing to the output, and the lse includes it; a row with no visible key gives 0
        and lse = sink. Finite (checked on CPU tensors; the caller's contract on a GPU). None: no sinks.
      q_descale, k_descale, v_descale: float32 dequantization scales, 1 element or one per head
        (H for q, Hkv for k/v). None means 1.0. Every scale is positive, finite and within the bounds of
        docs/numerics.md ("Scale bounds"), checked on CPU tensors (the caller's contract on a GPU).
      p_scale: float32 ``[1]``; P is stored as ``sat(p / p_scale)``. None: 2^-8 (e4m3fn) or 2^-7 (e4m3fnuz).
      out_scale: float32 ``[1]``; when given, out is FP8 of k's type, ``sat(O / out_scale)``.
      out_dtype: the 16-bit output dtype without out_scale (default: q's if 16-bit, else bfloat16).
      out: optional output tensor written in place (q's shape, the output dtype).
      return_softmax_lse: also return the natural-log LSE, float32 ``[B, H, Sq]`` (dense) or ``[H, T]``.
      kv_tile: keys per online-softmax tile, i.e. how often the running max (the reference P is
        quantized against) is updated. 0 takes the implementation's default: 128 on the Hopper wgmma
        kernels at head dims 64 / 128 (but unmasked 128), 64 elsewhere. The CPU takes any value up to 128 (the widest
        tile of any implementation); CUDA / HIP take 64, and 128 where the Hopper wgmma kernels run.

    Returns:
      ``out``, or ``(out, softmax_lse)`` when ``return_softmax_lse``.
    """
    return _forward(q, k, v, cu_seqlens_q=cu_seqlens_q, cu_seqlens_k=cu_seqlens_k, seqused_k=seqused_k,
                    max_seqlen_q=max_seqlen_q, max_seqlen_k=max_seqlen_k, block_table=block_table,
                    softmax_scale=softmax_scale, causal=causal, window_size=window_size, softcap=softcap,
                    sinks=sinks, q_descale=q_descale, k_descale=k_descale, v_descale=v_descale, p_scale=p_scale,
                    out_scale=out_scale, out_dtype=out_dtype, out=out, return_softmax_lse=return_softmax_lse,
                    kv_tile=kv_tile)


def kernel_name(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, **kwargs) -> str:
    """The kernel ``forward(q, k, v, **kwargs)`` would run, without running it: the GPU kernel
    instance (e.g. ``"fwd_sm90a_hd128_e4m3fn_band_kv128"``: family, head dim, FP8 kind, mask kind,
    KV tile when not 64) or ``"cpu"``. Raises the errors ``forward`` would raise."""
    return _forward(q, k, v, _op=torch.ops.fp8attn.forward_kernel, **kwargs)


def kernel_kv_tile(kernel: str) -> int:
    """Keys per online-softmax tile of the kernel ``kernel_name`` named: N for the instances named
    ``..._kv<N>``, 64 for every other kernel and for ``"cpu"`` (their default ``kv_tile``). The
    reference at that tile (``reference.quantized_attention(kv_tile=...)``) is the call's oracle."""
    m = re.fullmatch(r"fwd_\w+_kv(\d+)", kernel)
    return int(m.group(1)) if m else 64


def _forward(q, k, v, *, cu_seqlens_q=None, cu_seqlens_k=None, seqused_k=None, max_seqlen_q=None, max_seqlen_k=None,
             block_table=None, softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0, sinks=None,
             q_descale=None, k_descale=None, v_descale=None, p_scale=None, out_scale=None, out_dtype=None, out=None,
             return_softmax_lse=False, kv_tile: int = 0, _op=None):
    """``forward``'s body; ``_op`` replaces the op (same arguments: ``forward_kernel``)."""
    for name, x in (("q", q), ("k", k), ("v", v)):
        _check_tensor(x, name)
    for name, x in (("cu_seqlens_q", cu_seqlens_q), ("cu_seqlens_k", cu_seqlens_k), ("seqused_k", seqused_k),
                    ("block_table", block_table), ("q_descale", q_descale), ("k_descale", k_descale),
                    ("v_descale", v_descale), ("p_scale", p_scale), ("out_scale", out_scale), ("sinks", sinks),
                    ("out", out)):
        _check_tensor(x, name, optional=True)
    if out_dtype is not None and not isinstance(out_dtype, torch.dtype):
        raise TypeError(f"out_dtype must be a torch.dtype or None, got {type(out_dtype).__name__}")
    if k.dtype not in FP8_DTYPES:
        raise TypeError(f"k must be torch.float8_e4m3fn or torch.float8_e4m3fnuz, got {k.dtype}")
    if q.dim() < 1 or k.dim() < 1:
        raise ValueError(f"q and k must have a head dimension, got shapes {tuple(q.shape)}, {tuple(k.shape)}")
    dtype = resolve_out_dtype(q, k, out_scale, out_dtype)
    if out is None:
        out = torch.empty(q.shape, dtype=dtype, device=q.device)
    elif out.dtype != dtype:
        why = ("k's FP8 dtype: out_scale is given" if out_scale is not None else "out_dtype" if out_dtype is not None
               else "no out_scale: q's dtype" if q.dtype in _16BIT else "no out_scale: bfloat16 for an FP8 q")
        raise TypeError(f"out must have the output dtype {dtype} ({why}), got {out.dtype}")
    if softmax_scale is None:
        softmax_scale = 1.0 / math.sqrt(q.shape[-1]) if q.shape[-1] > 0 else 1.0
    left, right = _window(window_size)
    res = (_op or torch.ops.fp8attn.forward)(
        q=q, k=k, v=v, out=out, cu_seqlens_q=cu_seqlens_q, cu_seqlens_k=cu_seqlens_k, seqused_k=seqused_k,
        max_seqlen_q=0 if max_seqlen_q is None else _int(max_seqlen_q, "max_seqlen_q"),
        max_seqlen_k=0 if max_seqlen_k is None else _int(max_seqlen_k, "max_seqlen_k"), block_table=block_table,
        softmax_scale=_float(softmax_scale, "softmax_scale"), causal=_bool(causal, "causal"), window_left=left,
        window_right=right, softcap=_float(softcap, "softcap"), q_descale=q_descale, k_descale=k_descale,
        v_descale=v_descale, p_scale=p_scale, out_scale=out_scale,
        return_softmax_lse=_bool(return_softmax_lse, "return_softmax_lse"), kv_tile=_int(kv_tile, "kv_tile"),
        sinks=sinks)
    if _op is not None:
        return res
    return (out, res) if return_softmax_lse else out



def write_kv_cache(key: torch.Tensor, value: torch.Tensor, key_cache: torch.Tensor, value_cache: torch.Tensor,
                   slot_mapping: torch.Tensor, k_scale: torch.Tensor | None = None,
                   v_scale: torch.Tensor | None = None) -> None:
    """Write new rows ``key``/``value`` ``[T, Hkv, D]`` into paged caches ``[num_blocks, block_size, Hkv, D]``
    at ``slot_mapping`` (``block * block_size + offset``; negative slots are skipped). 16-bit rows going
    into an FP8 cache are quantized as ``sat(x / scale)``."""
    torch.ops.fp8attn.write_kv_cache(key, value, key_cache, value_cache, slot_mapping, k_scale, v_scale)
