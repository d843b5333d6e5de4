"""Real Quark exports (amd-quark 0.13, scripts/vllm/quark_export.py) of the embedded model and of a non-Llama family
(fp8attn.families' Qwen3: q/k norms): what they hold, read by fp8attn.quark and by the transformers integration,
and served by FP8ATTN in vLLM's CPU engine.

The embedded model's exports: fp8-qkv-prob (FP8 linear layers; q, k, v, prob, o scales), fp8-kv (FP8 linear layers;
k, v, o), attention-only (bf16 linear layers; k, v, prob) and post-rope (attention-only with k and v measured
after RoPE); Qwen3's: fp8-qkv-prob. vLLM's CPU engine serves each as its "-cpu" copy (FP8 weights dequantized,
the KV-cache spec where vLLM 0.32 looks for it; no attention scale changed): one engine per export, FP8ATTN
selected. The probability scale is shown to be applied on Qwen3's: a copy with every prob_output_scale at 2^-13
(p / scale saturates FP8 from p = 0.055 up) moves FP8ATTN's perplexity and not CPU_ATTN's, which ignores it.
"""

from __future__ import annotations

import json
import math
import shutil
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
    quark_export,
    run_engines,
)

from fp8attn.families import make_checkpoint
from fp8attn.quark import read_attention_scales

SCHEMES = ("fp8-qkv-prob", "fp8-kv", "attention-only", "post-rope")
# the scales each export holds, of "qkvpo"
HOLDS = {"fp8-qkv-prob": "qkvpo", "fp8-kv": "kvo", "attention-only": "kvp", "post-rope": "kvp"}
BF16_ONE_OVER_448 = torch.tensor(1 / 448, dtype=torch.bfloat16).item()  # 0.002227783203125
PROMPTS_Q = PROMPTS[:4]
WINDOWS = 2


FAMILY = "qwen3"
FAMILY_SCHEME = "fp8-qkv-prob"
PROB_SCALE_ORACLE = 2.0 ** -13


@pytest.fixture(scope="module")
def family_model(tmp_path_factory) -> Path:
    return make_checkpoint(FAMILY, tmp_path_factory.mktemp("quark-family") / FAMILY)


@pytest.fixture(scope="module")
def family_export(family_model) -> Path:
    """OUT/fp8-qkv-prob(-cpu) of the Qwen3 checkpoint, and OUT/prob-oracle-cpu: the -cpu copy with every
    prob_output_scale at PROB_SCALE_ORACLE."""
    out = quark_export(family_model.parent, "--model", str(family_model), "--schemes", FAMILY_SCHEME)
    with_prob_scale(out / f"{FAMILY_SCHEME}-cpu", out / "prob-oracle-cpu", PROB_SCALE_ORACLE)
    return out


# gpt-oss's export is made, read, and run through the transformers integration, not served: vLLM 0.32's Quark
# loader for gpt-oss (gpt_oss.py, _load_weights_quark) takes MoE experts only in Quark's quantized layouts and
# stops on this export's bf16 experts ("RuntimeError: The size of tensor a (512) must match the size of tensor b
# (256) at non-singleton dimension 2"; the attention-only export too).
UNSERVED_FAMILY = "gpt_oss"


@pytest.fixture(scope="module")
def unserved_export(tmp_path_factory) -> Path:
    """OUT/gpt_oss (the checkpoint) and OUT/fp8-qkv-prob (its export)."""
    model = make_checkpoint(UNSERVED_FAMILY, tmp_path_factory.mktemp("quark-unserved") / UNSERVED_FAMILY)
    return quark_export(model.parent, "--model", str(model), "--schemes", FAMILY_SCHEME)


def test_unserved_family_export_through_transformers(unserved_export):
    """gpt-oss's FP8-QKV-Prob export (q, k, v, prob, o scales on every layer) attached to its checkpoint in bf16,
    attn_implementation="fp8attn" (sinks, alternating windows): held-out log-probabilities within the families'
    bound of fp32 (tests/test_families.py)."""
    from transformers import AutoModelForCausalLM

    from fp8attn.integrations import transformers as fp8hf

    export, model_dir = unserved_export / FAMILY_SCHEME, unserved_export / UNSERVED_FAMILY
    scales = read_attention_scales(export)
    assert len(scales) == 4 and not scales.missing, scales.summary()
    x = torch.tensor(heldout_windows(2, 160))

    def logprobs(model) -> torch.Tensor:
        with torch.no_grad():
            lp = torch.log_softmax(model(input_ids=x, use_cache=False).logits[:, :-1].float(), -1)
        return lp.gather(2, x[:, 1:, None])[..., 0]

    fp32 = logprobs(AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32,
                                                         attn_implementation="eager").eval())
    fp8hf.register()
    model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.bfloat16, attn_implementation="fp8attn")
    fp8hf.attach_scales(model.eval(), export)
    assert model.model.layers[0].self_attn.fp8attn.scales.q.item() == scales[0].q.item()
    distance = (logprobs(model) - fp32).abs().mean().item()
    print(f"{UNSERVED_FAMILY} {FAMILY_SCHEME} (transformers): mean |Δ log p| against fp32 {distance:.4f}")
    assert distance < 0.3, distance


def with_prob_scale(src: Path, dst: Path, value: float) -> Path:
    """A copy of the export src with every prob_output_scale set to value (in its dtype)."""
    from safetensors.torch import load_file, save_file

    shutil.copytree(src, dst)
    changed = 0
    for f in dst.glob("*.safetensors"):
        tensors = load_file(str(f))
        for name in [n for n in tensors if n.endswith(".prob_output_scale")]:
            tensors[name] = torch.full_like(tensors[name], value)
            changed += 1
        save_file(tensors, str(f), metadata={"format": "pt"})
    assert changed == len(read_attention_scales(src)), changed
    return dst


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
def served(exports, family_export, tmp_path_factory):
    """One engine per export of the embedded model, FP8ATTN (greedy, held-out log-likelihood, the loaded scales);
    FP8ATTN and CPU_ATTN each on Qwen3's export and on its prob-scale oracle copy (held-out log-likelihood)."""
    def engine(name: str, model: Path, tasks: list[dict], fp8attn: bool = True) -> dict:
        llm = dict(ENGINE, model=str(model), kv_cache_dtype="fp8", enforce_eager=True,
                   kv_cache_memory_bytes=32 * kv_cache_bytes(model))
        if fp8attn:
            llm["attention_backend"] = "CUSTOM"
        env = {**FP8ATTN, "VLLM_ALLOW_INSECURE_SERIALIZATION": "1"} if fp8attn else {}
        return {"name": name, "env": env, "llm": llm, "tasks": tasks}

    nll, scales = {"kind": "nll", "windows": heldout_windows(WINDOWS)}, {"kind": "scales"}
    engines = [engine(scheme, exports / f"{scheme}-cpu",
                      [{"kind": "greedy", "prompts": PROMPTS_Q, "max_tokens": 48}, nll, scales]) for scheme in SCHEMES]
    for name, tasks in ((f"{FAMILY_SCHEME}-cpu", [nll, scales]), ("prob-oracle-cpu", [nll])):
        engines += [engine(f"{FAMILY}/{name}", family_export / name, tasks),
                    engine(f"{FAMILY}/{name}/cpu_attn", family_export / name, [nll], fp8attn=False)]
    return run_engines(engines, tmp_path_factory.mktemp("quark-engines"))


@pytest.mark.parametrize("scheme", SCHEMES + (FAMILY,))
def test_vllm_loads_the_scales_fp8attn_reads(exports, family_export, served, scheme):
    """The scales vLLM's own Quark loader put on each attention layer are the export's (read by fp8attn.quark):
    q and prob 1.0 where the export has none (FP8ATTN then quantizes P with its default), with no warning of
    FP8ATTN's load-time checks (tests/engine/test_checkpoint_scales.py: edited exports)."""
    export, name = ((family_export / FAMILY_SCHEME, f"{FAMILY}/{FAMILY_SCHEME}-cpu") if scheme == FAMILY
                    else (exports / scheme, scheme))
    log = served.engine_log(name)
    assert fp8attn_processes(log) == ["Worker"]
    assert "FP8ATTN: the checkpoint has no" not in log  # every layer holds the scales any layer holds
    (loaded,) = served[name]["scales"]  # one worker
    expected = read_attention_scales(export)
    assert len(loaded) == len(expected) == 4
    for i, s in enumerate(expected.layers.values()):
        got = loaded[f"model.layers.{i}.self_attn.attn"]
        want = {w: (1.0 if getattr(s, a) is None else getattr(s, a).item()) for w, a in
                (("q", "q"), ("k", "k"), ("v", "v"), ("prob", "p"))}
        assert got == want, (i, got, want)


def served_weights_reference(export: Path, model: Path = MODEL) -> Reference:
    """transformers in fp32 with the weights vLLM serves from this export of model (FP8 ones dequantized)."""
    reference = Reference(model)
    state = {k: v for k, v in raw_tensors(export).items() if not k.endswith("_scale")}
    missing, unexpected = reference.model.load_state_dict(state, strict=False)
    assert not unexpected and set(missing) <= {"lm_head.weight"}, (missing, unexpected)
    reference.model.tie_weights()
    return reference


def perplexity(run: dict) -> float:
    return math.exp(run["nll"]["nll"] / run["nll"]["tokens"])


@pytest.mark.parametrize("scheme", SCHEMES)
def test_exports_served_greedy_and_perplexity(exports, served, scheme):
    reference = served_weights_reference(exports / f"{scheme}-cpu")
    expected = [reference.greedy(p) for p in PROMPTS_Q]
    check_greedy(reference, PROMPTS_Q, served[scheme]["greedy"], expected, f"{scheme}: FP8ATTN vs transformers")
    fp32_logprobs = torch.cat([reference.token_logprobs(w) for w in heldout_windows(WINDOWS)])
    assert served[scheme]["nll"]["tokens"] == fp32_logprobs.numel()
    fp8attn, fp32 = perplexity(served[scheme]), math.exp(-fp32_logprobs.mean().item())
    assert fp8attn <= 1.01 * fp32, (scheme, fp8attn, fp32)
    print(f"{scheme}: perplexity FP8ATTN {fp8attn:.4f}, transformers fp32 {fp32:.4f} "
          f"({100 * (fp8attn / fp32 - 1):+.3f} %)")


def test_family_export_served_close_to_fp32(family_model, family_export, served):
    """Qwen3's FP8-QKV-Prob export under FP8ATTN: held-out log-probabilities within the families' bound of fp32
    on the served weights (tests/engine/test_served_families.py), perplexity within 2 %."""
    reference = served_weights_reference(family_export / f"{FAMILY_SCHEME}-cpu", family_model)
    fp32 = torch.stack([reference.token_logprobs(w) for w in heldout_windows(WINDOWS)])
    run = served[f"{FAMILY}/{FAMILY_SCHEME}-cpu"]
    got = torch.tensor(run["nll"]["logprobs"])
    distance = (got - fp32).abs().mean().item()
    ratio = perplexity(run) / math.exp(-fp32.mean().item())
    print(f"{FAMILY} {FAMILY_SCHEME}: mean |Δ log p| against fp32 {distance:.4f}, "
          f"perplexity {100 * (ratio - 1):+.3f} %")
    assert distance <= 0.35 and abs(ratio - 1) < 0.02, (distance, ratio)


def test_prob_scale_is_applied_by_fp8attn_only(served):
    """prob_output_scale at 2^-13 on every layer: FP8ATTN's perplexity moves by more than 2 %; CPU_ATTN, which
    ignores the scale, gives the same perplexity."""
    base, oracle = f"{FAMILY}/{FAMILY_SCHEME}-cpu", f"{FAMILY}/prob-oracle-cpu"
    moved = {b: perplexity(served[oracle + b]) / perplexity(served[base + b]) for b in ("", "/cpu_attn")}
    print(f"{FAMILY}: perplexity with prob_output_scale 2^-13 / with Quark's: FP8ATTN {moved['']:.4f}, "
          f"CPU_ATTN {moved['/cpu_attn']:.4f}")
    assert abs(moved[""] - 1) > 0.02, moved
    assert abs(moved["/cpu_attn"] - 1) < 1e-3, moved
