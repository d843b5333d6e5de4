"""fp8attn: FP8 flash attention for LLM inference (FP8 Q/K/V, FP8-quantized P, FP8 output).

``fp8attn.forward`` (and ``torch.ops.fp8attn.forward``) on CPU, CUDA (Hopper) and ROCm (MI300/MI350).
"""

from . import _fake  # noqa: F401  (fake impls for torch.compile)
from .ops import forward, kernel_kv_tile, kernel_name, resolve_out_dtype, write_kv_cache
from .quant import default_p_scale, fn_scale_to_fnuz, fp8_max, quantize

__all__ = ["forward", "kernel_name", "kernel_kv_tile", "write_kv_cache", "resolve_out_dtype", "default_p_scale",
           "fn_scale_to_fnuz", "fp8_max", "quantize", "build_commit"]
__version__ = "0.1.0"


def build_commit() -> str:
    """The git commit this installation's extension was built from ("-dirty": with uncommitted changes;
    "unknown" when built outside the source tree's own git repository). ``FP8ATTN_COMMIT`` overrides it, for
    a build copied without git."""
    import os

    import torch

    return os.environ.get("FP8ATTN_COMMIT") or torch.ops.fp8attn.build_commit()
