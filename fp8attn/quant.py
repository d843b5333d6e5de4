"""FP8 quantization helpers: the scale conventions of fp8attn and of Quark checkpoints.

All scales are *dequantization* scales, as in the checkpoints: ``real ≈ fp8 × scale``.
"""

from __future__ import annotations

import torch

from .shapes import DEFAULT_P_SCALE

FP8_DTYPES = (torch.float8_e4m3fn, torch.float8_e4m3fnuz)


def check_fp8_dtype(dtype: torch.dtype, arg: str = "dtype") -> None:
    """Raise TypeError unless ``dtype`` is float8_e4m3fn or float8_e4m3fnuz."""
    if dtype not in FP8_DTYPES:
        raise TypeError(f"{arg} must be torch.float8_e4m3fn or torch.float8_e4m3fnuz, got {dtype}")


def fp8_max(dtype: torch.dtype) -> float:
    """Largest finite value of the FP8 type (448 for e4m3fn, 240 for e4m3fnuz)."""
    check_fp8_dtype(dtype)
    return torch.finfo(dtype).max


def default_p_scale(dtype: torch.dtype) -> float:
    """The P scale used when none is given: 2^-8 for e4m3fn, 2^-7 for e4m3fnuz (``fp8attn.shapes``, generated
    with the kernels' constants)."""
    check_fp8_dtype(dtype)
    return DEFAULT_P_SCALE[str(dtype).removeprefix("torch.float8_")]


def p_scale_value(p_scale: torch.Tensor | None, dtype: torch.dtype) -> float:
    """A call's P scale: ``p_scale``'s one value, or the default of the FP8 type ``dtype`` when None."""
    return default_p_scale(dtype) if p_scale is None else float(p_scale.reshape(-1)[0])


def reciprocal(scale: torch.Tensor | float, device: torch.device | str | None = None) -> torch.Tensor:
    """``1 / scale`` rounded to float32 once: what every implementation multiplies by to divide by a scale
    (kernels/scales.h)."""
    return 1.0 / torch.as_tensor(scale, dtype=torch.float32, device=device)


def quantize(x: torch.Tensor, scale: torch.Tensor | float, dtype: torch.dtype) -> torch.Tensor:
    """sat(x / scale) in ``dtype``: clamp to ±max, round to nearest even (NaN stays NaN).

    Computed as ``x · reciprocal(scale)``, exactly as the kernels do, so the result is bit-identical to
    in-kernel quantization."""
    m = fp8_max(dtype)
    return (x.float() * reciprocal(scale, x.device)).clamp(-m, m).to(dtype)


def dequantize(x8: torch.Tensor, scale: torch.Tensor | float = 1.0) -> torch.Tensor:
    """fp8 × scale in float32."""
    return x8.float() * scale


def amax_scale(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Per-tensor dequantization scale amax(|x|) / max_F as a 1-element float32 tensor."""
    amax = x.detach().abs().amax().float().clamp_min(1e-12)
    return (amax / fp8_max(dtype)).reshape(1)


def fn_scale_to_fnuz(scale: torch.Tensor | float) -> torch.Tensor | float:
    """Convert a scale calibrated for e4m3fn to e4m3fnuz (×2, as vLLM does on MI300).

    The same bit pattern is worth half as much in fnuz (exponent bias 8, not 7), so the scale that
    maps those bits back to the same real value is twice as large.
    """
    return scale * 2
