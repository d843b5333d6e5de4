"""Run Hugging Face transformers models (Llama, Qwen, Mistral, Gemma, gpt-oss) through fp8attn's FP8 attention.

    from fp8attn.integrations import transformers as fp8hf
    fp8hf.register()                                     # adds "fp8attn" to AttentionInterface
    model = AutoModelForCausalLM.from_pretrained(path, attn_implementation="fp8attn", dtype=torch.bfloat16)
    fp8hf.attach_scales(model, path)                     # Quark scales from the checkpoint (or a QuarkScales)

Every attention layer then quantizes K and V to FP8 with the layer's k/v scales (what a FP8 KV
cache holds), and calls ``fp8attn.forward`` with the 16-bit query and its q scale (quantized in
the kernel), the probability scale (P quantization), and — with ``fp8_output=True`` — the
o_proj input scale, so the output comes back as FP8; it is dequantized for the 16-bit o_proj here
(a real FP8 o_proj would consume it as is).

``quantize_p=False`` runs the same FP8 Q/K/V but unquantized probabilities: that path is not a
kernel mode, it is emulated here with fp32 SDPA on the dequantized FP8 inputs, so the three
precision steps (Q/K/V, +P, +O) can be measured separately.

Masks: causal (bottom-right when q is shorter than k, i.e. decode with a KV cache), padding (the
2D mask transformers passes for a registered implementation — sequences are unpadded into
fp8attn's varlen layout), sliding window and logit softcap; attention sinks (gpt-oss's ``s_aux``).
Dropout is refused.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from pathlib import Path

import torch

from ..quark import AttentionScales, QuarkScales, read_attention_scales

__all__ = [
    "NAME",
    "Fp8AttnLayerConfig",
    "attach_scales",
    "detach_scales",
    "register",
    "fp8attn_attention_forward",
]

NAME = "fp8attn"
logger = logging.getLogger(__name__)


@dataclass
class Fp8AttnLayerConfig:
    """What one attention layer runs with. Scales are float32 [1] tensors (dequantization multipliers)."""

    scales: AttentionScales
    fp8_dtype: torch.dtype = torch.float8_e4m3fn
    quantize_p: bool = True  # False: FP8 Q/K/V with unquantized P (emulated, fp32)
    fp8_output: bool = True  # True: FP8 output with scales.o, dequantized for o_proj
    use_checkpoint_p_scale: bool = True  # False: the kernel's default p_scale

    def on(self, device: torch.device) -> AttentionScales:
        s = self.scales
        if s.q is not None and s.q.device != device:
            self.scales = s = s.to(device)
        return s


def register(name: str = NAME) -> None:
    """Register the attention function (and its mask function) with transformers under `name`."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, flash_attention_mask

    AttentionInterface.register(name, fp8attn_attention_forward)
    # None when there is no padding, else the 2D [B, S_k] bool padding mask (as for flash attention)
    AttentionMaskInterface.register(name, flash_attention_mask)


def _attention_modules(model: torch.nn.Module) -> dict[str, torch.nn.Module]:
    mods = {}
    for name, mod in model.named_modules():
        if name.endswith("self_attn") and hasattr(mod, "layer_idx"):
            mods[name] = mod
    if not mods:
        raise ValueError("model: no '*.self_attn' module with a layer_idx (not a Llama/Qwen-style model?)")
    return mods


def attach_scales(
    model: torch.nn.Module,
    scales: QuarkScales | str | Path,
    *,
    fp8_dtype: torch.dtype = torch.float8_e4m3fn,
    quantize_p: bool = True,
    fp8_output: bool = True,
    use_checkpoint_p_scale: bool = True,
) -> QuarkScales:
    """Give every attention layer of `model` its FP8 scales and mode; returns the scales read.

    scales: a QuarkScales, or a checkpoint file/directory to read them from (Quark names).
      Scales in the e4m3fn convention are doubled when fp8_dtype is e4m3fnuz.
    A layer without a q scale (Quark's FP8-KV and attention-only exports have none) quantizes q with 1.0,
    as vLLM 0.32 and 0.33 do (their kv_cache.py sets ``_q_scale`` to 1.0 when the checkpoint has none).
    Raises ValueError naming the absent scales this mode needs (k, v always; o with fp8_output; p with
    quantize_p and use_checkpoint_p_scale) and the option that does without them.
    """
    if not isinstance(scales, QuarkScales):
        scales = read_attention_scales(scales, fp8_dtype=fp8_dtype)
    elif fp8_dtype == torch.float8_e4m3fnuz:
        scales = scales.to_fnuz()
    elif scales.fp8_dtype != fp8_dtype:
        raise ValueError(f"scales: they are for {scales.fp8_dtype}, the model runs {fp8_dtype}")
    need = ["k", "v"] + (["o"] if fp8_output else []) + (
        ["p"] if quantize_p and use_checkpoint_p_scale else [])
    mods = _attention_modules(model)
    absent, no_q = [], []
    for name, mod in mods.items():
        try:
            s = scales[name] if name in scales.layers else scales[mod.layer_idx]
        except KeyError:
            absent.append(f"{name}: no scales")
            continue
        absent += [f"{name}.{w}" for w in need if getattr(s, w) is None]
        if s.q is None:
            no_q.append(name)
            s = replace(s, q=torch.ones(1))
        mod.fp8attn = Fp8AttnLayerConfig(scales=s, fp8_dtype=fp8_dtype, quantize_p=quantize_p,
                                         fp8_output=fp8_output, use_checkpoint_p_scale=use_checkpoint_p_scale)
    if absent:
        detach_scales(model)
        options = {"o": "fp8_output=False", "p": "use_checkpoint_p_scale=False"}
        hint = sorted({options[a[-1]] for a in absent if a[-2:] in (".o", ".p")})
        raise ValueError(f"scales: absent for this mode: {', '.join(absent[:8])}"
                         + (f" (+{len(absent) - 8} more)" if len(absent) > 8 else "")
                         + (f"; without them, pass {' and '.join(hint)}" if hint else ""))
    if no_q:
        logger.warning("%d attention layers have no q scale (e.g. %s): q is quantized with 1.0, as vLLM does",
                       len(no_q), no_q[0])
    return scales


def detach_scales(model: torch.nn.Module) -> None:
    for mod in model.modules():
        if hasattr(mod, "fp8attn") and isinstance(mod.fp8attn, Fp8AttnLayerConfig):
            del mod.fp8attn


# ----------------------------------------------------------------------------------------------
# helpers shared with fp8attn.calibrate


def hf_window(sliding_window: int | None, k_len: int, causal: bool = True) -> tuple[int, int]:
    """transformers' sliding_window as fp8attn's (left, right) window, as its flash-attention path
    does: (w - 1, w - 1), i.e. at most w tokens back (itself included) under a causal mask."""
    if sliding_window is None or sliding_window <= 0 or k_len <= sliding_window:
        return (-1, -1)
    return (sliding_window - 1, 0 if causal else sliding_window - 1)


def dense_mask(q_len: int, k_len: int, causal: bool, window: tuple[int, int], device) -> torch.Tensor | None:
    """bool [q_len, k_len], True = visible; causal bottom-right aligned; None if all visible."""
    if not causal and window == (-1, -1):
        return None
    i = torch.arange(q_len, device=device)[:, None] + (k_len - q_len)
    j = torch.arange(k_len, device=device)[None, :]
    keep = torch.ones(q_len, k_len, dtype=torch.bool, device=device)
    if causal:
        keep &= j <= i
    if window[0] >= 0:
        keep &= j >= i - window[0]
    if window[1] >= 0:
        keep &= j <= i + window[1]
    return keep


def unpad(x: torch.Tensor, keep: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, int]:
    """[B, S, H, D] and a bool [B, S] → packed [T, H, D], cu_seqlens int32 [B+1], max length.

    The kept tokens of each row must be contiguous (left or right padding)."""
    lens = keep.sum(1, dtype=torch.int32)
    cu = torch.zeros(keep.shape[0] + 1, dtype=torch.int32, device=x.device)
    cu[1:] = torch.cumsum(lens, 0)
    return x[keep], cu, int(lens.max().item()) if lens.numel() else 0


def _run_kernel(cfg: Fp8AttnLayerConfig, s: AttentionScales, q, k8, v8, *, softmax_scale, causal, window,
                softcap, sinks, out_dtype, **varlen):
    import fp8attn

    from ..quant import quantize

    if q.dtype in (torch.float16, torch.bfloat16):
        q_in = q  # quantized in the kernel with q_descale
    else:
        q_in = quantize(q, s.q, cfg.fp8_dtype)
    kw = dict(softmax_scale=softmax_scale, causal=causal, window_size=window, softcap=softcap, sinks=sinks,
              q_descale=s.q, k_descale=s.k, v_descale=s.v,
              p_scale=s.p if cfg.use_checkpoint_p_scale else None, **varlen)
    if cfg.fp8_output:
        o8 = fp8attn.forward(q_in, k8, v8, out_scale=s.o, **kw)
        return o8.to(torch.float32) * s.o
    kernel_out = out_dtype if out_dtype in (torch.float16, torch.bfloat16) else torch.bfloat16
    return fp8attn.forward(q_in, k8, v8, out_dtype=kernel_out, **kw)


def _emulate(cfg: Fp8AttnLayerConfig, s: AttentionScales, q, k8, v8, *, softmax_scale, causal, window,
             softcap, sinks, keep_q=None, keep_k=None):
    """FP8 Q/K/V, unquantized P, in fp32 (dense [B, S, H, D]); O optionally FP8-rounded."""
    from ..quant import quantize

    q8 = quantize(q, s.q, cfg.fp8_dtype)
    qf = (q8.float() * s.q).transpose(1, 2)
    kf = (k8.float() * s.k).transpose(1, 2)
    vf = (v8.float() * s.v).transpose(1, 2)
    o = eager_attention(qf, kf, vf, softmax_scale=softmax_scale, causal=causal, window=window, softcap=softcap,
                        sinks=sinks, keep_k=keep_k).transpose(1, 2)
    if cfg.fp8_output:
        o = quantize(o, s.o, cfg.fp8_dtype).float() * s.o
    if keep_q is not None:
        o = o * keep_q[:, :, None, None]
    return o


def eager_attention(q, k, v, *, softmax_scale, causal, window=(-1, -1), softcap=0.0, sinks=None, keep_k=None,
                    stats: dict | None = None):
    """fp32 attention on [B, H, S, D] tensors (GQA by head groups); rows with no visible key give 0.
    sinks ([H], final-logit units, not capped): each row's softmax gains exp(sink - m) in its denominator.

    With `stats`, also records the max of the unnormalized probabilities exp(S - rowmax) in stats["p"]."""
    h, hkv = q.shape[1], k.shape[1]
    if h != hkv:
        k = k.repeat_interleave(h // hkv, dim=1)
        v = v.repeat_interleave(h // hkv, dim=1)
    scores = torch.matmul(q, k.transpose(-1, -2)) * softmax_scale
    if softcap:
        scores = softcap * torch.tanh(scores / softcap)
    keep = dense_mask(q.shape[2], k.shape[2], causal, window, q.device)
    if keep is not None:
        keep = keep[None, None]
    if keep_k is not None:
        kk = keep_k[:, None, None, :]
        keep = kk if keep is None else keep & kk
    if keep is not None:
        scores = scores.masked_fill(~keep, float("-inf"))
    m = scores.amax(-1, keepdim=True)
    m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
    p = torch.exp(scores - m)
    if stats is not None:
        stats["p"] = max(stats.get("p", 0.0), float(p.amax().item()) if p.numel() else 0.0)
    l = p.sum(-1, keepdim=True)
    if sinks is not None:
        sink = sinks.float().view(1, -1, 1, 1)
        m_all = torch.maximum(m, sink)
        scale = torch.exp(m - m_all)
        p, l = p * scale, l * scale + torch.exp(sink - m_all)
    return torch.matmul(p / torch.where(l > 0, l, torch.ones_like(l)), v)


def fp8attn_attention_forward(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    sliding_window: int | None = None,
    softcap: float | None = None,
    is_causal: bool | None = None,
    s_aux: torch.Tensor | None = None,
    **kwargs,
) -> tuple[torch.Tensor, None]:
    """transformers attention function: query [B, H, Sq, D], key/value [B, Hkv, Sk, D] → [B, Sq, H, D].
    s_aux: gpt-oss's attention sinks, one logit per query head."""
    from ..quant import quantize

    cfg = getattr(module, "fp8attn", None)
    if not isinstance(cfg, Fp8AttnLayerConfig):
        raise RuntimeError("fp8attn: this attention layer has no FP8 scales; call "
                           "fp8attn.integrations.transformers.attach_scales(model, scales) first")
    if dropout:
        raise ValueError("fp8attn: dropout is not supported (inference only); call model.eval()")
    if kwargs.get("output_attentions"):
        raise ValueError("fp8attn: output_attentions is not supported")
    b, _, sq, d = query.shape
    sk = key.shape[2]
    causal = bool(is_causal if is_causal is not None else getattr(module, "is_causal", True))
    window = hf_window(sliding_window, sk, causal)
    softcap = float(softcap or 0.0)
    softmax_scale = float(scaling) if scaling is not None else d ** -0.5
    s = cfg.on(query.device)

    q = query.transpose(1, 2)  # [B, Sq, H, D]
    k8 = quantize(key.transpose(1, 2), s.k, cfg.fp8_dtype)  # what an FP8 KV cache holds
    v8 = quantize(value.transpose(1, 2), s.v, cfg.fp8_dtype)

    keep_k = keep_q = None
    if attention_mask is not None:
        if attention_mask.dim() != 2 or attention_mask.dtype != torch.bool:
            raise ValueError("attention_mask: fp8attn takes the 2D bool padding mask of its registered mask "
                             f"function, got {attention_mask.dtype} of shape {tuple(attention_mask.shape)}")
        keep_k = attention_mask[:, -sk:]
        keep_q = keep_k[:, -sq:]
    sinks = None if s_aux is None else s_aux.detach().float().contiguous()
    common = dict(softmax_scale=softmax_scale, causal=causal, window=window, softcap=softcap, sinks=sinks)

    if not cfg.quantize_p:
        o = _emulate(cfg, s, q, k8, v8, keep_q=keep_q, keep_k=keep_k, **common)
        return o.to(query.dtype), None
    if keep_k is None:
        o = _run_kernel(cfg, s, q.contiguous(), k8.contiguous(), v8.contiguous(), out_dtype=query.dtype, **common)
        return o.to(query.dtype), None
    # padding: unpad into the varlen layout, run, scatter back (padded query rows give 0)
    qp, cu_q, max_q = unpad(q, keep_q)
    kp, cu_k, max_k = unpad(k8, keep_k)
    vp, _, _ = unpad(v8, keep_k)
    op = _run_kernel(cfg, s, qp.contiguous(), kp.contiguous(), vp.contiguous(), out_dtype=query.dtype,
                     cu_seqlens_q=cu_q, cu_seqlens_k=cu_k, max_seqlen_q=max_q, max_seqlen_k=max_k, **common)
    o = torch.zeros(b, sq, *op.shape[1:], dtype=query.dtype, device=query.device)
    o[keep_q] = op.to(query.dtype)
    return o, None
