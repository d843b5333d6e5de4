"""Real Quark exports of the embedded model (amd-quark 0.13, scripts/vllm/quark_export.py): what they hold, read by
fp8attn.quark and by the transformers integration, and served by FP8ATTN in vLLM's CPU engine.

The exports: fp8-qkv-prob (FP8 linear layers; q, k, v, prob, o scales), fp8-kv (FP8 linear layers; k, v, o),
attention-only (bf16 linear layers; k, v, prob) and post-rope (attention-only with k and v measured after RoPE).
vLLM's CPU engine serves each as its "-cpu" copy (FP8 weights dequantized, the KV-cache spec where vLLM 0.32
looks for it; no attention scale changed): one engine per export, FP8ATTN selected.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from engines import (
    ENGINE,
    FP8ATTN,
    MODEL,
    PROMPTS,
    Reference,
    check_greedy,
    fp8attn_processes,
    heldout_windows,
    kv_cache_bytes,
    run_engines,
)

from fp8attn.quark import read_attention_scales

SCHEMES = ("fp8-qkv-prob", "fp8-kv", "attention-only", "post-rope")
# the scales each export holds, of "qkvpo"
HOLDS = {"fp8-qkv-prob": "qkvpo", "fp8-kv": "kvo", "attention-only": "kvp", "post-rope": "kvp"}
BF16_ONE_OVER_448 = torch.tensor(1 / 448, dtype=torch.bfloat16).item()  # 0.002227783203125
PROMPTS_Q = PROMPTS[:4]
WINDOWS = 2


def raw_tensors(export: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return {k: v for f in export.glob("*.safetensors") for k, v in load_file(str(f)).items()}


@pytest.mark.parametrize("scheme", SCHEMES)
def test_what_quark_writes(exports, scheme):
    export = exports / scheme
    scales = read_attention_scales(export)
    assert len(scales) == 4
    tensors = raw_tensors(export)
    for module, s in scales.layers.items():
        assert "".join(w for w in "qkvpo" if getattr(s, w) is not None) == HOLDS[scheme], (module, s.as_floats())
        for name in (n for n in tensors if n.startswith(module + ".") and n.endswith(("output_scale", "input_scale"))):
            assert tensors[name].dim() == 0 and tensors[name].dtype == torch.bfloat16, name  # the model dtype
        if s.p is not None:
            assert s.p.item() == BF16_ONE_OVER_448  # causal rows put p = 1 first: amax 1.0, in bf16
    config = json.loads((export / "config.json").read_text())["quantization_config"]
    assert config["quant_method"] == "quark"
    assert config["kv_cache_post_rope"] is (scheme == "post-rope")
    assert ("softmax_quant_spec" in config and config["softmax_quant_spec"] is not None) == ("p" in HOLDS[scheme])
    same_kv = [s.k.item() == s.v.item() for s in scales.layers.values()]
    if scheme == "post-rope":
        assert not all(same_kv)  # each its own amax, after RoPE
    else:
        assert all(same_kv)  # Quark stores max(k, v) for both


@pytest.mark.parametrize("scheme", SCHEMES)
def test_transformers_integration_takes_every_export(exports, scheme):
    """attach_scales on each export as it is; a missing q scale is 1.0 (vLLM's behaviour)."""
    from transformers import AutoModelForCausalLM

    from fp8attn.integrations import transformers as fp8hf

    fp8hf.register()
    mode = {"fp8-qkv-prob": {}, "fp8-kv": dict(use_checkpoint_p_scale=False),
            "attention-only": dict(fp8_output=False), "post-rope": dict(fp8_output=False)}[scheme]
    model = AutoModelForCausalLM.from_pretrained(str(MODEL), dtype=torch.bfloat16, attn_implementation="sdpa")
    x = torch.tensor([heldout_windows(1, 256)[0]])
    with torch.no_grad():
        ref = model(input_ids=x).logits.float()
        fp8hf.attach_scales(model, exports / scheme, **mode)
        model.set_attn_implementation("fp8attn")
        got = model(input_ids=x).logits.float()
    layer = model.model.layers[0].self_attn.fp8attn
    assert layer.scales.q.item() == (read_attention_scales(exports / scheme)[0].q.item() if "q" in HOLDS[scheme]
                                     else 1.0)
    assert ((got - ref).norm() / ref.norm()).item() < 0.05


def test_calibrate_refuses_to_make_an_export_unreadable(exports):
    export = exports / "attention-only"
    before = read_attention_scales(export)[0].as_floats()
    proc = subprocess.run([sys.executable, "-m", "fp8attn.calibrate", str(export), "--no-progress"], cwd=exports,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode != 0 and "already holds attention scales" in proc.stderr, proc.stderr[-3000:]
    assert sorted(p.name for p in export.glob("*.safetensors")) == ["model.safetensors"]
    assert read_attention_scales(export)[0].as_floats() == before


@pytest.fixture(scope="module")
def served(exports, tmp_path_factory):
    engines = []
    for scheme in SCHEMES:
        model = exports / f"{scheme}-cpu"
        engines.append({
            "name": scheme, "env": {**FP8ATTN, "VLLM_ALLOW_INSECURE_SERIALIZATION": "1"},
            "llm": dict(ENGINE, model=str(model), kv_cache_dtype="fp8", attention_backend="CUSTOM", enforce_eager=True,
                        kv_cache_memory_bytes=32 * kv_cache_bytes(model)),
            "tasks": [{"kind": "greedy", "prompts": PROMPTS_Q, "max_tokens": 48},
                      {"kind": "nll", "windows": heldout_windows(WINDOWS)}, {"kind": "scales"}]})
    return run_engines(engines, tmp_path_factory.mktemp("quark-engines"))


@pytest.mark.parametrize("scheme", SCHEMES)
def test_vllm_loads_the_scales_fp8attn_reads(exports, served, scheme):
    """The scales vLLM's own Quark loader put on each attention layer are the export's (read by fp8attn.quark):
    q and prob 1.0 where the export has none (FP8ATTN then quantizes P with its default), with no warning of
    FP8ATTN's load-time checks (tests/engine/test_checkpoint_scales.py: edited exports)."""
    log = served.engine_log(scheme)
    assert fp8attn_processes(log) == ["Worker"]
    assert "FP8ATTN: the checkpoint has no" not in log  # every layer holds the scales any layer holds
    (loaded,) = served[scheme]["scales"]  # one worker
    expected = read_attention_scales(exports / scheme)
    assert len(loaded) == len(expected) == 4
    for i, s in enumerate(expected.layers.values()):
        got = loaded[f"model.layers.{i}.self_attn.attn"]
        want = {w: (1.0 if getattr(s, a) is None else getattr(s, a).item()) for w, a in
                (("q", "q"), ("k", "k"), ("v", "v"), ("prob", "p"))}
        assert got == want, (i, got, want)


def served_weights_reference(export: Path) -> Reference:
    """transformers in fp32 with the weights vLLM serves from this export (FP8 ones dequantized)."""
    reference = Reference()
    state = {k: v for k, v in raw_tensors(export).items() if not k.endswith("_scale")}
    missing, unexpected = reference.model.load_state_dict(state, strict=False)
    assert not unexpected and set(missing) <= {"lm_head.weight"}, (missing, unexpected)
    reference.model.tie_weights()
    return reference


@pytest.mark.parametrize("scheme", SCHEMES)
def test_exports_served_greedy_and_perplexity(exports, served, scheme):
    reference = served_weights_reference(exports / f"{scheme}-cpu")
    expected = [reference.greedy(p) for p in PROMPTS_Q]
    check_greedy(reference, PROMPTS_Q, served[scheme]["greedy"], expected, f"{scheme}: FP8ATTN vs transformers")
    nll, tokens = 0.0, 0
    for window in heldout_windows(WINDOWS):
        with torch.no_grad():
            logits = reference.model(torch.tensor([window])).logits[0, :-1].float()
        nll -= torch.log_softmax(logits, -1).gather(1, torch.tensor(window[1:])[:, None]).sum().item()
        tokens += len(window) - 1
    run = served[scheme]["nll"]
    assert run["tokens"] == tokens
    fp8attn, fp32 = math.exp(run["nll"] / tokens), math.exp(nll / tokens)
    assert fp8attn <= 1.01 * fp32, (scheme, fp8attn, fp32)
    print(f"{scheme}: perplexity FP8ATTN {fp8attn:.4f}, transformers fp32 {fp32:.4f} "
          f"({100 * (fp8attn / fp32 - 1):+.3f} %)")
