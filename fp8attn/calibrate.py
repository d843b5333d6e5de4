"""Calibrate the FP8 attention scales of a Hugging Face causal LM: ``python -m fp8attn.calibrate``.

Runs the model (fp32 by default) over a text corpus and records, per attention layer, the amax of
the query and key *after RoPE* (what the kernel quantizes; Quark measures before RoPE by default),
of the value, of the unnormalized probabilities P = exp(S - rowmax) (1.0 whenever a row has a key,
so the probability scale is 1/448 as in Quark's causal checkpoints) and of the attention output
(o_proj's input). Each scale is amax / 448 (e4m3fn convention, as Quark writes it; doubled at load
on e4m3fnuz devices), written under Quark's names into a safetensors file beside the model:

    python -m fp8attn.calibrate models/stdlib-llama                      # text: models/stdlib-llama/calib.txt
    python -m fp8attn.calibrate MODEL_DIR --text a.txt --text b.txt --seq-len 512 --max-seqs 64

A directory that already holds attention scales (a Quark export) is never written into: pass --out FILE
outside it (a second file with the same names would make the directory unreadable).
The corpus is cut into non-overlapping windows of --seq-len tokens, in order; the result depends
only on the model and the text (same numbers each run, up to fp32 summation order).
A model without a tokenizer and with a 256-entry vocabulary is read as bytes.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path

import torch

from .quark import SCALE_SUFFIXES, AttentionScales, write_attention_scales

__all__ = ["CALIB_NAME", "SCALES_FILE", "amax_to_scales", "calibrate", "load_corpus", "main"]

CALIB_NAME = "fp8attn_calibrate"
SCALES_FILE = "fp8attn_scales.safetensors"
FN_MAX = 448.0  # scales are written for e4m3fn, as Quark does


def _calibration_attention(module, query, key, value, attention_mask, dropout=0.0, scaling=None,
                           sliding_window=None, softcap=None, is_causal=None, s_aux=None, **kwargs):
    from .integrations.transformers import eager_attention, hf_window

    stats = module.__dict__.setdefault("_fp8attn_amax", {})
    sq, sk, d = query.shape[2], key.shape[2], query.shape[3]
    keep_k = keep_q = None
    if attention_mask is not None:
        keep_k = attention_mask[:, -sk:]
        keep_q = keep_k[:, -sq:]
    q, k, v = query.float(), key.float(), value.float()
    causal = bool(is_causal if is_causal is not None else getattr(module, "is_causal", True))
    o = eager_attention(q, k, v, softmax_scale=float(scaling) if scaling is not None else d ** -0.5,
                        causal=causal, window=hf_window(sliding_window, sk, causal), softcap=float(softcap or 0.0),
                        sinks=s_aux, keep_k=keep_k, stats=stats)

    def amax(x, keep):  # x [B, H, S, D], keep [B, S] or None
        if keep is not None:
            x = x * keep[:, None, :, None]
        return float(x.abs().amax().item()) if x.numel() else 0.0

    for name, x, keep in (("q", q, keep_q), ("k", k, keep_k), ("v", v, keep_k), ("o", o, keep_q)):
        stats[name] = max(stats.get(name, 0.0), amax(x, keep))
    return o.transpose(1, 2).to(query.dtype), None


def _register() -> None:
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, flash_attention_mask

    AttentionInterface.register(CALIB_NAME, _calibration_attention)
    AttentionMaskInterface.register(CALIB_NAME, flash_attention_mask)


def _attention_modules(model) -> dict[str, torch.nn.Module]:
    from .integrations.transformers import _attention_modules

    return _attention_modules(model)


def _progress(it, total: int, enabled: bool, desc: str):
    if not enabled:
        return it
    try:
        from tqdm.auto import tqdm
    except ImportError:  # pragma: no cover - tqdm comes with transformers
        return it
    return tqdm(it, total=total, desc=desc, unit="batch", file=sys.stderr)


@torch.no_grad()
def calibrate(
    model: torch.nn.Module,
    batches: Iterable[dict[str, torch.Tensor] | torch.Tensor],
    *,
    total: int | None = None,
    progress: bool = True,
) -> dict[str, dict[str, float]]:
    """Run `model` over `batches` (input_ids tensors [B, S], or dicts of model kwargs) and return
    {attention module path: {"q", "k", "v", "p", "o": amax}}. The model's attention
    implementation is switched to the recording one for the run and restored after."""
    _register()
    mods = _attention_modules(model)
    for m in mods.values():
        m.__dict__.pop("_fp8attn_amax", None)
    previous = model.config._attn_implementation
    was_training = model.training
    model.eval()
    model.set_attn_implementation(CALIB_NAME)
    try:
        batches = list(batches) if total is None else batches
        n = total if total is not None else len(batches)
        for batch in _progress(batches, n, progress, "calibrating"):
            kwargs = batch if isinstance(batch, dict) else {"input_ids": batch}
            model(**kwargs, use_cache=False)
    finally:
        model.set_attn_implementation(previous)
        model.train(was_training)
    out = {}
    for name, m in mods.items():
        stats = m.__dict__.pop("_fp8attn_amax", None)
        if stats is None:
            raise RuntimeError(f"{name}: the attention layer was never called; is the corpus empty?")
        out[name] = {w: stats[w] for w in ("q", "k", "v", "p", "o")}
    return out


def amax_to_scales(amax: dict[str, dict[str, float]], fp8_max: float = FN_MAX) -> dict[str, AttentionScales]:
    """amax per layer → dequantization scales amax / fp8_max (a zero amax gives the smallest normal scale)."""
    tiny = torch.finfo(torch.float32).tiny
    return {m: AttentionScales(**{w: torch.tensor([max(a / fp8_max, tiny)], dtype=torch.float32)
                                  for w, a in vals.items()})
            for m, vals in amax.items()}


def _encoder(model_dir: Path, vocab_size: int, force_bytes: bool):
    if not force_bytes:
        try:
            from transformers import AutoTokenizer

            tok = AutoTokenizer.from_pretrained(str(model_dir), local_files_only=True)
            return lambda text: tok(text.decode("utf-8", errors="replace"), add_special_tokens=False)["input_ids"]
        except Exception:
            if vocab_size != 256:
                raise
    if vocab_size != 256:
        raise ValueError(f"--bytes: the model's vocabulary has {vocab_size} entries, not 256")
    return lambda text: list(text)


def load_corpus(texts: Sequence[bytes], encode, seq_len: int, max_seqs: int | None) -> torch.Tensor:
    """Concatenate, encode, cut into non-overlapping windows: int64 [N, seq_len]."""
    ids = torch.tensor(encode(b"\n".join(texts)), dtype=torch.int64)
    n = ids.numel() // seq_len
    if max_seqs is not None:
        n = min(n, max_seqs)
    if n == 0:
        raise ValueError(f"--text: the corpus has {ids.numel()} tokens, fewer than one window of {seq_len}")
    return ids[: n * seq_len].view(n, seq_len)


def scales_already_in(directory: Path, out: Path) -> Path | None:
    """A *.safetensors file of ``directory`` other than ``out`` that holds attention scales under Quark's names
    (a Quark export): a second file with the same names would make the directory unreadable (and vLLM loads
    every *.safetensors of a model directory), so the calibration must go elsewhere."""
    from safetensors import safe_open

    suffixes = tuple("." + s for s in SCALE_SUFFIXES.values())
    for f in sorted(directory.glob("*.safetensors")):
        if f.resolve() == out.resolve():
            continue
        with safe_open(str(f), framework="pt") as sf:
            if any(name.endswith(suffixes) for name in sf.keys()):
                return f
    return None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m fp8attn.calibrate", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model", help="a local Hugging Face model directory")
    ap.add_argument("--text", action="append", default=None,
                    help="corpus file (repeatable); default: MODEL/calib.txt")
    ap.add_argument("--seq-len", type=int, default=512)
    ap.add_argument("--max-seqs", type=int, default=None, help="at most this many windows")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--out", default=None, help=f"output file (default MODEL/{SCALES_FILE})")
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    ap.add_argument("--scale-dtype", default="float32", choices=["float32", "bfloat16", "float16"],
                    help="dtype of the written 0-dim scales (Quark writes the model dtype)")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--bytes", action="store_true", help="read text as bytes even if a tokenizer is present")
    ap.add_argument("--no-progress", action="store_true")
    args = ap.parse_args(argv)

    if args.threads:
        torch.set_num_threads(args.threads)
    from transformers import AutoModelForCausalLM

    model_dir = Path(args.model)
    texts_paths = [Path(t) for t in (args.text or [model_dir / "calib.txt"])]
    for p in texts_paths:
        if not p.is_file():
            ap.error(f"--text: no such file: {p}")
    out = Path(args.out) if args.out else model_dir / SCALES_FILE
    if out.parent.is_dir() and (holder := scales_already_in(out.parent, out)) is not None:
        ap.error(f"--out: {holder} already holds attention scales (a Quark export?); writing {out.name} beside it "
                 f"would give {out.parent} two values for the same names. Pass --out FILE outside {out.parent}")
    dtype = getattr(torch, args.dtype)
    model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=dtype, local_files_only=True)
    model.to(args.device)
    encode = _encoder(model_dir, model.config.vocab_size, args.bytes)
    ids = load_corpus([p.read_bytes() for p in texts_paths], encode, args.seq_len, args.max_seqs)
    batches = [ids[i:i + args.batch].to(args.device) for i in range(0, ids.shape[0], args.batch)]
    amax = calibrate(model, batches, progress=not args.no_progress)
    scales = amax_to_scales(amax)
    info = {"texts": [p.name for p in texts_paths], "tokens": int(ids.numel()), "seq_len": args.seq_len,
            "dtype": args.dtype, "fp8_convention": "float8_e4m3fn", "qk": "after RoPE", "amax": amax}
    names = write_attention_scales(out, scales, dtype=getattr(torch, args.scale_dtype),
                                   metadata={"fp8attn.calibration": json.dumps(info)})
    print(f"{'layer':<28} {'q':>10} {'k':>10} {'v':>10} {'p':>10} {'o':>10}   (scale = amax / 448)")
    for m, s in scales.items():
        print(f"{m:<28} " + " ".join(f"{s_.item():10.4g}" for s_ in (s.q, s.k, s.v, s.p, s.o)))
    print(f"wrote {len(names)} scales for {len(scales)} layers ({ids.numel()} tokens) to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
