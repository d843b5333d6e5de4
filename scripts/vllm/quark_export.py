"""Quantize a byte-level model (default: the embedded one, models/stdlib-llama; or a checkpoint of
``python -m fp8attn.families``) with AMD Quark (amd-quark 0.13) into Quark's own exports, and make each one
servable by vLLM's CPU engine:

    python scripts/vllm/quark_export.py OUT_DIR [--schemes fp8-qkv-prob,fp8-kv,attention-only,post-rope]
        [--model DIR] [--text FILE]

For each scheme, OUT_DIR/<scheme>/ is what ``export_safetensors(model, dir, custom_mode="quark")`` wrote, and
OUT_DIR/<scheme>-cpu/ the same checkpoint as vLLM 0.32/0.33's CPU engine can load it (both get the byte
tokenizer of fp8attn.families). The schemes, Quark's template for the model's type
(``LLMTemplate.get(config.model_type).get_config(...)``) with:

    fp8-qkv-prob    scheme="fp8", kv_cache_scheme="fp8", attention_scheme="fp8"      q, k, v, prob, o scales
    fp8-kv          scheme="fp8", kv_cache_scheme="fp8"                              k, v, o scales
    attention-only  fp8-qkv-prob with exclude_layers=["*"] (bf16 linear layers)       k, v, prob scales
    post-rope       attention-only with kv_cache_post_rope=True                      k, v (measured after RoPE), prob

Calibration: the model in bfloat16 with eager attention (Quark measures the probability scale by patching the
softmax of eager attention only) over --windows windows of 512 bytes of --text (default: the embedded model's
calib.txt).

What the "-cpu" copies change, and why (nothing else, and no attention scale):
- FP8 linear layers (fp8-qkv-prob, fp8-kv): vLLM's CPU build has no FP8 GEMM (its Quark W8A8 scheme calls a
  CUDA-only quant op at load). Each FP8 weight is dequantized (weight × weight_scale, into bfloat16), its
  weight_scale and input_scale are dropped, o_proj.input_scale too (an unquantized o_proj has no parameter
  for it, and vLLM refuses unknown tensors), and the layer is added to the config's ``exclude`` by its exact
  name (vLLM's Quark ``exclude`` matches exact names or ``re:`` patterns, not globs).
- The KV-cache spec (attention-only, post-rope): Quark 0.13 writes it under ``kv_cache_quant_config`` and
  leaves ``layer_quant_config`` empty when every linear layer is excluded; vLLM 0.32/0.33 look for the
  ``export.kv_cache_group`` patterns in ``layer_quant_config`` and refuse the checkpoint otherwise, so the
  entries are copied there.
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import os
import shutil
from pathlib import Path

from fp8attn.families import write_byte_tokenizer

MODEL = Path(__file__).resolve().parents[2] / "models" / "stdlib-llama"

SCHEMES = ("fp8-qkv-prob", "fp8-kv", "attention-only", "post-rope")


def quark_config(scheme: str, model_type: str = "llama"):
    """The Quark QConfig of a scheme for a model type (see the module docstring)."""
    from quark.torch import LLMTemplate

    kw = dict(scheme="fp8", kv_cache_scheme="fp8")
    if scheme != "fp8-kv":
        kw["attention_scheme"] = "fp8"
    if scheme in ("attention-only", "post-rope"):
        kw["exclude_layers"] = ["*"]
    config = LLMTemplate.get(model_type).get_config(**kw)
    if scheme == "post-rope":
        config.kv_cache_post_rope = True
    return config


def export(scheme: str, out: Path, model_dir: Path = MODEL, windows: int = 16,
           text: Path = MODEL / "calib.txt") -> Path:
    """Quantize the model in model_dir with Quark and export it (custom_mode="quark") into out."""
    import torch
    from quark.torch import ModelQuantizer, export_safetensors
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.bfloat16, attn_implementation="eager")
    model.eval()
    data = text.read_bytes()[: windows * 512]
    if len(data) < windows * 512:
        raise ValueError(f"text: {text} holds {len(data)} bytes, fewer than {windows} windows of 512")
    ids = torch.tensor(list(data), dtype=torch.long).view(-1, 512)
    loader = torch.utils.data.DataLoader(ids, batch_size=4)
    quantizer = ModelQuantizer(quark_config(scheme, model.config.model_type))
    model = quantizer.freeze(quantizer.quantize_model(model, loader))
    if out.exists():
        shutil.rmtree(out)
    export_safetensors(model, str(out), custom_mode="quark")
    write_byte_tokenizer(out)
    return out


def cpu_servable(src: Path, dst: Path) -> Path:
    """A copy of the Quark export src that vLLM's CPU engine loads (see the module docstring)."""
    import torch
    from safetensors.torch import load_file, save_file

    if dst.exists():
        shutil.rmtree(dst)
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("*.safetensors"))
    config = json.loads((src / "config.json").read_text())
    quant = config["quantization_config"]
    dequantized: set[str] = set()
    for f in sorted(src.glob("*.safetensors")):
        tensors = load_file(str(f))
        fp8 = {n.removesuffix(".weight") for n, t in tensors.items()
               if n.endswith(".weight") and t.dtype in (torch.float8_e4m3fn, torch.float8_e4m3fnuz)}
        out = {}
        for name, t in tensors.items():
            module, _, kind = name.rpartition(".")
            if module in fp8 and kind == "weight":
                out[name] = (t.float() * tensors[f"{module}.weight_scale"].float()).to(torch.bfloat16)
            elif not (module in fp8 and kind in ("weight_scale", "input_scale")):
                out[name] = t
        save_file(out, str(dst / f.name), metadata={"format": "pt"})
        dequantized |= fp8
    quant["exclude"] = sorted(set(quant.get("exclude") or []) | dequantized)
    layer_quant = quant.setdefault("layer_quant_config", {})
    for pattern in quant["export"].get("kv_cache_group") or []:
        if not any(fnmatch.fnmatchcase(key, pattern) for key in layer_quant):
            layer_quant[pattern] = quant["kv_cache_quant_config"][pattern]
    (dst / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    return dst


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out", help="the directory to write the exports into")
    ap.add_argument("--schemes", default=",".join(SCHEMES), help="comma list (default: %(default)s)")
    ap.add_argument("--model", default=str(MODEL), help="a byte-level HF model directory (default: %(default)s)")
    ap.add_argument("--text", default=str(MODEL / "calib.txt"), help="calibration text (default: %(default)s)")
    ap.add_argument("--windows", type=int, default=16, help="calibration windows of 512 bytes (default 16)")
    args = ap.parse_args(argv)
    os.environ.setdefault("QUARK_DISABLE_COMPILE", "1")  # Quark's fake-quant torch.compile fails on torch 2.13
    out = Path(args.out)
    for scheme in args.schemes.split(","):
        if scheme not in SCHEMES:
            ap.error(f"--schemes: unknown scheme {scheme!r}; expected some of {', '.join(SCHEMES)}")
        raw = export(scheme, out / scheme, Path(args.model), args.windows, Path(args.text))
        print(f"{scheme}: {raw}, {cpu_servable(raw, out / f'{scheme}-cpu')}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
