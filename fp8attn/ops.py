"""The public op: ``fp8attn.forward`` over ``torch.ops.fp8attn.forward``."""

from __future__ import annotations

import inspect
import math
import operator
from typing import Any, NamedTuple

import torch

from . import _C  # noqa: F401  (registers torch.ops.fp8attn)
from .quant import FP8_DTYPES

__all__ = ["forward", "kernel_info", "kernel_name", "KernelInfo", "op_args", "write_kv_cache", "resolve_out_dtype"]

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
    args = _op_args(locals())  # (locals(): forward's arguments by name, before anything else is bound)
    lse = torch.ops.fp8attn.forward(**args)
    return (args["out"], lse) if args["return_softmax_lse"] else args["out"]


class KernelInfo(NamedTuple):
    """The kernel a call runs, as the dispatch that chooses it reports it (``torch.ops.fp8attn.forward_kernel``)."""

    name: str  #: the instance, e.g. ``"fwd_wgmma_hd128_e4m3fn_band_kv128"``, or ``"cpu"``
    pipeline: str  #: its pipeline (the values of ``FP8ATTN_PIPELINE``), or ``"cpu"``
    kv_tile: int  #: keys per online-softmax tile: the ``kv_tile`` of the reference that is the call's oracle


def kernel_info(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, **kwargs) -> KernelInfo:
    """The kernel ``forward(q, k, v, **kwargs)`` would run, without running it: its name, pipeline and KV tile
    (on CPU tensors ``("cpu", "cpu", tile)``). Raises the errors ``forward`` would raise."""
    return KernelInfo(*torch.ops.fp8attn.forward_kernel(**op_args(q, k, v, **kwargs)))


def kernel_name(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, **kwargs) -> str:
    """``kernel_info(q, k, v, **kwargs).name``: the GPU kernel instance (pipeline, head dim, FP8 kind, mask kind,
    KV tile) or ``"cpu"``."""
    return kernel_info(q, k, v, **kwargs).name


def op_args(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, **kwargs) -> dict[str, Any]:
    """The arguments of the registered op ``torch.ops.fp8attn.forward`` for ``forward(q, k, v, **kwargs)``: every
    one of its schema's, by name and in its order (``tuple(op_args(...).values())`` are its positional arguments),
    each checked against its schema type; ``out`` allocated when not given. Raises what ``forward`` raises for
    these arguments before the op runs."""
    try:
        bound = _FORWARD.bind(q, k, v, **kwargs)
    except TypeError as e:
        raise TypeError(f"forward() {e}") from None
    bound.apply_defaults()
    return _op_args(bound.arguments)


_FORWARD = inspect.signature(forward)
# The registered op's arguments (csrc/fwd_args.h, kForwardArgs): (name, schema type) in its order.
_SCHEMA = [(a.name, str(a.type)) for a in torch.ops.fp8attn.forward.default._schema.arguments]
# forward's arguments the op takes otherwise: window_size as two ints; out_dtype only decides out's dtype.
_RENAMED = {"window_size": ("window_left", "window_right"), "out_dtype": ()}
if {m for n in _FORWARD.parameters for m in _RENAMED.get(n, (n,))} != {n for n, _ in _SCHEMA}:
    raise ImportError(f"fp8attn.forward's arguments {list(_FORWARD.parameters)} do not map onto the registered op's "
                      f"{[n for n, _ in _SCHEMA]}: the extension was not built from this package")
_TENSORS = [(n, t != "Tensor" or n == "out") for n, t in _SCHEMA if "Tensor" in t]  # (name, optional in forward)
_SCALARS = {"int": _int, "float": _float, "bool": _bool}


def _op_args(a: dict[str, Any]) -> dict[str, Any]:
    """forward's arguments (every one, by name) -> the op's, checked: the tensors first (q, k and v required, out
    allocated when None), then the scalars by their schema types."""
    for name, optional in _TENSORS:
        _check_tensor(a[name], name, optional)
    q, k, out, out_dtype, out_scale = a["q"], a["k"], a["out"], a["out_dtype"], a["out_scale"]
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
    softmax_scale = a["softmax_scale"]
    if softmax_scale is None:
        softmax_scale = 1.0 / math.sqrt(q.shape[-1]) if q.shape[-1] > 0 else 1.0
    left, right = _window(a["window_size"])
    given = {**a, "out": out, "softmax_scale": softmax_scale, "window_left": left, "window_right": right,
             **{n: 0 if a[n] is None else a[n] for n in ("max_seqlen_q", "max_seqlen_k")}}  # 0: unknown
    return {name: _SCALARS[t](given[name], name) if t in _SCALARS else given[name] for name, t in _SCHEMA}


def write_kv_cache(key: torch.Tensor, value: torch.Tensor, key_cache: torch.Tensor, value_cache: torch.Tensor,
                   slot_mapping: torch.Tensor, k_scale: torch.Tensor | None = None,
                   v_scale: torch.Tensor | None = None) -> None:
    """Write new rows ``key``/``value`` ``[T, Hkv, D]`` into paged caches ``[num_blocks, block_size, Hkv, D]``
    at ``slot_mapping`` (``block * block_size + offset``; negative slots are skipped). 16-bit rows going
    into an FP8 cache are quantized as ``sat(x / scale)``."""
    torch.ops.fp8attn.write_kv_cache(key, value, key_cache, value_cache, slot_mapping, k_scale, v_scale)
