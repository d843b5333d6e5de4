"""Fake (meta) implementations so torch.compile(fullgraph=True) traces through the ops.

The dispatcher also sends a call here when any argument is a ``meta`` tensor, real tensors among
them: such a call is refused by name (under torch.compile every argument is a FakeTensor of one
device, which passes).
"""

from __future__ import annotations

import torch

from . import _C  # noqa: F401  (defines the ops)


def _bind(names: list[str], args: tuple, kwargs: dict) -> dict:
    """The call's arguments by name, every tensor on the first one's device."""
    a = {**dict(zip(names[: len(args)], args, strict=True)), **kwargs}
    ref_name = names[0]
    ref = a[ref_name]
    for name in names:
        x = a.get(name)
        if isinstance(x, torch.Tensor) and x.device != ref.device:
            raise ValueError(f"{name} must be on {ref_name}'s device ({ref.device}), got {x.device}")
    return a


def _arg_names(op: torch._ops.OpOverload) -> list[str]:
    return [a.name for a in op._schema.arguments]


_FORWARD_NAMES = _arg_names(torch.ops.fp8attn.forward.default)
_WRITE_KV_NAMES = _arg_names(torch.ops.fp8attn.write_kv_cache.default)


@torch.library.register_fake("fp8attn::forward")
def _forward_fake(*args, **kwargs):
    a = _bind(_FORWARD_NAMES, args, kwargs)
    q = a["q"]
    if not a["return_softmax_lse"]:
        return q.new_empty((0,), dtype=torch.float32)
    if q.dim() == 3:
        return q.new_empty((q.shape[1], q.shape[0]), dtype=torch.float32)
    return q.new_empty((q.shape[0], q.shape[2], q.shape[1]), dtype=torch.float32)


@torch.library.register_fake("fp8attn::forward_kernel")
def _forward_kernel_fake(*args, **kwargs):
    q = _bind(_FORWARD_NAMES, args, kwargs)["q"]
    raise ValueError(f"q is on {q.device}: no kernel runs there (forward_kernel names the kernel of a real call)")


@torch.library.register_fake("fp8attn::write_kv_cache")
def _write_kv_cache_fake(*args, **kwargs):
    _bind(_WRITE_KV_NAMES, args, kwargs)
    return None
