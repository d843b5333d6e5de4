"""The checkpoint's attention scales, checked while vLLM loads the model: a scale the op would refuse stops
the engine at start with an error naming the layer and the checkpoint tensor, instead of failing the first
request (inf, too large) or being served silently (vLLM turns a zero, negative or NaN scale into 1.0, which
FP8ATTN reads as "no prob scale").

vLLM 0.32/0.33 load an attention layer's q/k/v/prob scales into ``KVCacheScaleParameter`` s through their
``weight_loader``; the layer's KV-cache quant method then replaces the values it cannot use (and asserts on
some), converts the rest to the ``_q_scale`` ... ``_prob_scale`` buffers and deletes the parameters; the
backend's ``process_weights_after_loading`` comes last. So each raw value is checked as it is loaded: a
parameter-registration hook wraps the ``weight_loader`` of the scale parameters of FP8ATTN's layers (their
impl exists before them). The values ``forward`` will pass are checked again after vLLM's processing (which
doubles them on e4m3fnuz platforms and duplicates a lone k or v scale). Every check is the op's own
(docs/numerics.md, "Scale bounds"), run on a one-token CPU call.
"""

from __future__ import annotations

import logging
import weakref
from typing import Protocol

import torch
from torch.nn.modules.module import register_module_parameter_registration_hook
from vllm.model_executor.layers.quantization.kv_cache import KVCacheScaleParameter

import fp8attn
from fp8attn.quant import default_p_scale

logger = logging.getLogger("vllm.fp8attn")

#: the layer's scale parameters and the op argument each one feeds
SCALES: dict[str, str] = {"q_scale": "q_descale", "k_scale": "k_descale", "v_scale": "v_descale",
                          "prob_scale": "p_scale"}
FIX = ("Fix the checkpoint: re-export it with calibrated scales (a scale is amax / 448 of the tensor it "
       "quantizes), or remove the tensor to serve without it (vLLM then uses its default for a q, k or v "
       "scale, FP8ATTN its default P scale).")


class CheckedImpl(Protocol):
    """What these checks read of an attention layer's impl (the backend's FP8AttnImpl, which calls them)."""

    num_heads: int
    num_kv_heads: int
    head_size: int
    scale: float
    logits_soft_cap: float
    fp8_dtype: torch.dtype
    loaded_scales: dict[str, torch.Tensor]  # the raw values vLLM loaded, by scale parameter
    layer_ref: weakref.ref | None  # the layer, once its scale parameters are registered

    def _q_scale(self, layer: torch.nn.Module) -> torch.Tensor: ...  # the scales forward passes to the op
    def _prob_scale(self, layer: torch.nn.Module) -> torch.Tensor | None: ...


_watched: weakref.WeakSet = weakref.WeakSet()  # FP8ATTN impls whose layers' scales are recorded
_hook = None
_warned: set[str] = set()


def watch(impl: CheckedImpl) -> None:
    """Record and check the checkpoint scales of ``impl``'s layer as vLLM loads them."""
    global _hook
    _watched.add(impl)
    if _hook is None:
        _hook = register_module_parameter_registration_hook(_on_register)


def _on_register(module: torch.nn.Module, name: str, param: torch.nn.Parameter) -> None:
    if name not in SCALES or not isinstance(param, KVCacheScaleParameter):
        return
    impl = getattr(module, "impl", None)
    if impl not in _watched:
        return
    impl.layer_ref = weakref.ref(module)
    load = param.weight_loader

    def load_and_check(p: torch.nn.Parameter, loaded_weight: torch.Tensor) -> None:
        load(p, loaded_weight)
        value = loaded_weight.detach().float().cpu().reshape(-1)
        impl.loaded_scales[name] = value
        if (problem := refusal(impl, **{SCALES[name]: value})) is not None:
            raise ValueError(_message(module, name, value, problem))

    param.weight_loader = load_and_check  # an instance attribute shadows the class's loader


def refusal(impl: CheckedImpl, **scales: torch.Tensor | None) -> str | None:
    """Why the op refuses these scales (``q_descale`` ... ``out_scale``) for ``impl``'s layer, or None.

    A one-token CPU call of the op with the layer's shape, softmax scale and softcap, and a 16-bit q (so that
    q_descale's reciprocal is checked too: vLLM quantizes q by it); per-tensor k and v scales also go through
    the cache write, which divides by them."""
    scales = {k: None if v is None else v.detach().float().cpu().reshape(-1) for k, v in scales.items()}
    h, hkv, d = impl.num_heads, impl.num_kv_heads, impl.head_size
    q, k, v = (torch.zeros(1, 1, n, d, device="cpu").to(t) for n, t in
               ((h, torch.bfloat16), (hkv, impl.fp8_dtype), (hkv, impl.fp8_dtype)))
    cache_scales = [s if s is not None and s.numel() == 1 else None
                    for s in (scales.get("k_descale"), scales.get("v_descale"))]
    try:
        fp8attn.forward(q, k, v, softmax_scale=impl.scale, softcap=impl.logits_soft_cap, **scales)
        if any(s is not None for s in cache_scales):
            rows = torch.zeros(1, hkv, d, dtype=torch.bfloat16, device="cpu")
            fp8attn.write_kv_cache(rows, rows.clone(), k.clone(), v.clone(), torch.zeros(1, dtype=torch.long,
                                   device="cpu"), *cache_scales)
    except ValueError as e:
        return str(e)
    return None


def checkpoint_name(layer: torch.nn.Module, param: str) -> str | None:
    """The checkpoint tensor vLLM loads into ``layer``'s scale parameter ``param``, by inverting the suffix
    renames of the quant config's cache-scale mapper (Quark's ``.self_attn.prob_output_scale`` ->
    ``.self_attn.attn.prob_scale``); None where the mapper does not say."""
    target = f"{layer.layer_name}.{param}"
    mapper = layer.quant_config.get_cache_scale_mapper()
    for old, new in mapper.orig_to_new_suffix.items():
        if new and target.endswith(new):
            name = target[: -len(new)] + old
            if mapper.map_name(name) == target:
                return name
    return None


def _tensor(layer: torch.nn.Module, param: str) -> str:
    name = checkpoint_name(layer, param)
    return f"{layer.layer_name}.{param}" if name is None else f"{name} (vLLM's {layer.layer_name}.{param})"


def _value(t: torch.Tensor) -> str:
    return str(t.item()) if t.numel() == 1 else str(t.tolist())


def _message(layer: torch.nn.Module, param: str, value: torch.Tensor, problem: str) -> str:
    return (f"FP8ATTN cannot serve attention layer {layer.layer_name}: the checkpoint tensor "
            f"{_tensor(layer, param)} = {_value(value)} is refused: {problem}. {FIX}")


def _passed(impl: CheckedImpl, layer: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The scales forward passes to the op, by scale parameter (a prob scale left to the op: its default)."""
    prob = impl._prob_scale(layer)
    if prob is None:
        prob = torch.tensor([default_p_scale(impl.fp8_dtype)])
    return {"q_scale": impl._q_scale(layer), "k_scale": layer._k_scale, "v_scale": layer._v_scale,
            "prob_scale": prob}


def check_processed(impl: CheckedImpl) -> None:
    """After vLLM's processing, before serving: the scales forward passes, each alone and all together; and a
    warning naming the layers without a scale that other layers of the checkpoint have."""
    layer = impl.layer_ref() if impl.layer_ref is not None else None
    if layer is None:  # no scale parameters: the layer runs with vLLM's defaults
        return
    passed = _passed(impl, layer)
    for param, value in passed.items():
        if (problem := refusal(impl, **{SCALES[param]: value})) is not None:
            raise ValueError(_message(layer, param, value, problem))
    if (problem := refusal(impl, **{SCALES[p]: v for p, v in passed.items()})) is not None:
        scales = ", ".join(f"{_tensor(layer, p)} = {_value(v)}" for p, v in passed.items())
        raise ValueError(f"FP8ATTN cannot serve attention layer {layer.layer_name}: its scales together ({scales}) "
                         f"are refused: {problem}. {FIX}")
    _warn_missing(layer)


def _warn_missing(layer: torch.nn.Module) -> None:
    """One warning per scale that some layers of this model lack and others have."""
    peers = sorted(((i, lr) for i in _watched if i.layer_ref is not None and (lr := i.layer_ref()) is not None
                    and lr.quant_config is layer.quant_config), key=lambda p: p[1].layer_name)
    for param, arg in SCALES.items():
        lacking = [(i, lr) for i, lr in peers if param not in i.loaded_scales]
        have = len(peers) - len(lacking)
        if not have or not lacking:
            continue
        used = ", ".join(f"{lr.layer_name} {arg} = {_value(_passed(i, lr)[param])}" for i, lr in lacking)
        default = " (FP8ATTN's default P scale)" if param == "prob_scale" else " (vLLM's default)"
        message = (f"FP8ATTN: the checkpoint has no {param} for {len(lacking)} attention layer(s), which its other "
                   f"{have} layer(s) have: {', '.join(_tensor(lr, param) for _, lr in lacking)} absent; "
                   f"used instead: {used}{default}")
        if message not in _warned:
            _warned.add(message)
            logger.warning("%s", message)


def check_output_scale(impl: CheckedImpl, layer: torch.nn.Module, output_scale: torch.Tensor) -> None:
    """The output scale vLLM's attn+quant fusion passes (the next linear layer's input scale), seen by the
    profiling run before serving."""
    if (problem := refusal(impl, out_scale=output_scale)) is not None:
        o_proj = layer.layer_name.rpartition(".")[0] + ".o_proj.input_scale"
        raise ValueError(f"FP8ATTN cannot serve attention layer {layer.layer_name}: the output scale the attn+quant "
                         f"fusion passes (o_proj's input scale, {o_proj} in a Llama-style checkpoint) = "
                         f"{_value(output_scale.float().cpu())} is refused: {problem}. {FIX}")
