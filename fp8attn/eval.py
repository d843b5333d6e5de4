"""End-to-end accuracy of FP8 attention: ``python -m fp8attn.eval``.

Held-out perplexity of a causal LM with its attention run five ways, on the same text:

    sdpa-fp32     torch SDPA, model in float32                      (the ideal)
    sdpa-bf16     torch SDPA, model in bfloat16                     (the baseline FP8 is judged against)
    fp8-qkv       FP8 Q/K/V (calibrated scales), P and O unquantized (emulated in fp32)
    fp8-qkvp      fp8attn.forward: FP8 Q/K/V + FP8 P (checkpoint prob scale), bf16 output
    fp8-qkvpo     fp8attn.forward: FP8 Q/K/V/P + FP8 output (o_proj input scale), i.e. full FP8 attention

The FP8 rows run the rest of the model in bfloat16. By default the model is the one made in this
repository (models/stdlib-llama: a byte-level Llama trained on the Python standard library, with
its held-out text and calibrated scales), so nothing is downloaded.

    python -m fp8attn.eval                                  # table on the CPU
    python -m fp8attn.eval --device cuda --json docs/eval-h200.json --md docs/eval-h200.md
    python -m fp8attn.eval --max-seqs 16 --check 1.0        # exit 1 if fp8-qkvpo is > +1% vs sdpa-bf16
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import torch

__all__ = ["CONFIGS", "EvalConfig", "compare", "default_model_dir", "evaluate", "format_table", "perplexity", "main"]


@dataclass(frozen=True)
class EvalConfig:
    name: str
    description: str
    dtype: torch.dtype
    attn: str  # "sdpa" or "fp8attn"
    quantize_p: bool = True
    fp8_output: bool = True
    use_checkpoint_p_scale: bool = True


CONFIGS: dict[str, EvalConfig] = {c.name: c for c in (
    EvalConfig("sdpa-fp32", "SDPA, fp32 model", torch.float32, "sdpa"),
    EvalConfig("sdpa-bf16", "SDPA, bf16 model (baseline)", torch.bfloat16, "sdpa"),
    EvalConfig("fp8-qkv", "FP8 Q/K/V, P and O unquantized (emulated)", torch.bfloat16, "fp8attn",
               quantize_p=False, fp8_output=False),
    EvalConfig("fp8-qkvp", "fp8attn: FP8 Q/K/V + P, bf16 O", torch.bfloat16, "fp8attn",
               quantize_p=True, fp8_output=False),
    EvalConfig("fp8-qkvpo", "fp8attn: FP8 Q/K/V + P + FP8 O (full)", torch.bfloat16, "fp8attn",
               quantize_p=True, fp8_output=True),
)}
EXTRA_CONFIGS: dict[str, EvalConfig] = {c.name: c for c in (
    EvalConfig("fp8-qkvpo-pdefault", "as fp8-qkvpo, kernel default p_scale (2^-8 fn, 2^-7 fnuz)",
               torch.bfloat16, "fp8attn", quantize_p=True, fp8_output=True, use_checkpoint_p_scale=False),
)}
BASELINE = "sdpa-bf16"
FULL_FP8 = "fp8-qkvpo"


def default_model_dir() -> Path:
    """$FP8ATTN_MODEL, else the repository's models/stdlib-llama."""
    env = os.environ.get("FP8ATTN_MODEL")
    if env:
        return Path(env)
    return Path(__file__).resolve().parent.parent / "models" / "stdlib-llama"


def heldout_ids(model_dir: Path, seq_len: int, max_seqs: int | None, text: Path | None = None) -> torch.Tensor:
    """Non-overlapping windows of seq_len + 1 bytes of the held-out text: int64 [N, seq_len + 1]."""
    data = (text or model_dir / "heldout.txt").read_bytes()
    ids = torch.frombuffer(bytearray(data), dtype=torch.uint8).long()
    n = (ids.numel() - 1) // seq_len
    if max_seqs is not None:
        n = min(n, max_seqs)
    if n <= 0:
        raise ValueError(f"held-out text: {ids.numel()} bytes, fewer than one window of {seq_len + 1}")
    return torch.stack([ids[i * seq_len:(i + 1) * seq_len + 1] for i in range(n)])


@torch.no_grad()
def perplexity(model, ids: torch.Tensor, batch: int = 8) -> tuple[float, int]:
    """(mean next-token negative log-likelihood in nats, token count) over ids [N, S+1]."""
    total, count = 0.0, 0
    device = next(model.parameters()).device
    for i in range(0, ids.shape[0], batch):
        x = ids[i:i + batch].to(device)
        logits = model(input_ids=x[:, :-1], use_cache=False).logits.float()
        nll = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), x[:, 1:].reshape(-1),
                                                reduction="sum")
        total += float(nll.item())
        count += x[:, 1:].numel()
    return total / count, count


def _load(model_dir: Path, cfg: EvalConfig, device: str, scales_path: Path, fp8_dtype: torch.dtype):
    from transformers import AutoModelForCausalLM

    from .integrations import transformers as fp8hf

    if cfg.attn == "fp8attn":
        fp8hf.register()
    model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=cfg.dtype, attn_implementation=cfg.attn,
                                                 local_files_only=True)
    model.to(device).eval()
    if cfg.attn == "fp8attn":
        fp8hf.attach_scales(model, scales_path, quantize_p=cfg.quantize_p, fp8_output=cfg.fp8_output,
                            use_checkpoint_p_scale=cfg.use_checkpoint_p_scale,
                            fp8_dtype=fp8_dtype)
    return model


def _device_fp8_dtype(device: str) -> torch.dtype:
    """e4m3fnuz on MI300 (gfx942), e4m3fn everywhere else."""
    if str(device).startswith("cuda") and torch.cuda.is_available() and torch.version.hip:
        arch = torch.cuda.get_device_properties(torch.device(device)).gcnArchName
        if arch.startswith("gfx94"):
            return torch.float8_e4m3fnuz
    return torch.float8_e4m3fn


def _device_name(device: str) -> str:
    if str(device).startswith("cuda") and torch.cuda.is_available():
        return torch.cuda.get_device_name(torch.device(device))
    return f"CPU ({platform.processor() or platform.machine()}, {torch.get_num_threads()} threads)"


def evaluate(
    model_dir: str | Path | None = None,
    *,
    configs: list[str] | None = None,
    device: str = "cpu",
    seq_len: int = 512,
    max_seqs: int | None = None,
    batch: int = 8,
    scales: str | Path | None = None,
    text: str | Path | None = None,
    fp8_dtype: torch.dtype | None = None,
    progress: bool = True,
) -> dict:
    """Perplexity of each config on the held-out text; returns a JSON-able dict (see format_table).

    fp8_dtype: default e4m3fnuz on MI300, else e4m3fn; e4m3fnuz doubles the (e4m3fn) scales."""
    if fp8_dtype is None:
        fp8_dtype = _device_fp8_dtype(device)
    model_dir = Path(model_dir) if model_dir else default_model_dir()
    if not (model_dir / "config.json").is_file():
        raise FileNotFoundError(f"model: no config.json in {model_dir} (the embedded model lives in the source tree's "
                                "models/stdlib-llama; pass --model / model_dir or set FP8ATTN_MODEL)")
    scales_path = Path(scales) if scales else model_dir / "fp8attn_scales.safetensors"
    names = configs or list(CONFIGS)
    all_cfgs = {**CONFIGS, **EXTRA_CONFIGS}
    for n in names:
        if n not in all_cfgs:
            raise ValueError(f"configs: unknown {n!r}; choose from {list(all_cfgs)}")
    ids = heldout_ids(model_dir, seq_len, max_seqs, Path(text) if text else None)
    rows = []
    for n in names:
        cfg = all_cfgs[n]
        t0 = time.perf_counter()
        model = _load(model_dir, cfg, device, scales_path, fp8_dtype)
        nll, count = perplexity(model, ids, batch)
        dt = time.perf_counter() - t0
        rows.append({"config": n, "description": cfg.description, "nll": nll, "ppl": math.exp(nll),
                     "bits_per_token": nll / math.log(2), "seconds": dt})
        if progress:
            print(f"  {n:<16} ppl {math.exp(nll):.4f}  ({dt:.1f} s)", file=sys.stderr, flush=True)
        del model
    by = {r["config"]: r for r in rows}
    if BASELINE in by:
        for r in rows:
            r["rel_vs_bf16_pct"] = 100.0 * (r["ppl"] / by[BASELINE]["ppl"] - 1.0)
    import transformers

    return {
        "model": model_dir.name,
        "device": _device_name(device),
        "fp8_dtype": str(fp8_dtype).removeprefix("torch."),
        "tokens": count if rows else 0,
        "sequences": int(ids.shape[0]),
        "seq_len": seq_len,
        "uniform_ppl": float(_vocab_size(model_dir)),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "rows": rows,
    }


def _vocab_size(model_dir: Path) -> int:
    return json.loads((model_dir / "config.json").read_text())["vocab_size"]


def format_table(result: dict) -> str:
    """A markdown table of an evaluate() result."""
    lines = [f"Held-out perplexity of `{result['model']}` on {result['device']} ({result['fp8_dtype']}), "
             f"{result['sequences']} × {result['seq_len']} tokens = {result['tokens']} tokens "
             f"(uniform: {result['uniform_ppl']:.0f}); torch {result['torch']}, transformers {result['transformers']}.",
             "",
             "| config | attention | perplexity | bits/token | vs sdpa-bf16 |",
             "|---|---|---:|---:|---:|"]
    for r in result["rows"]:
        rel = r.get("rel_vs_bf16_pct")
        lines.append(f"| {r['config']} | {r['description']} | {r['ppl']:.4f} | {r['bits_per_token']:.4f} | "
                     + (f"{rel:+.3f}%" if rel is not None else "") + " |")
    return "\n".join(lines)


def compare(model_dir: str | Path | None = None, *, device: str | None = None, max_seqs: int | None = 8,
            file=None) -> dict:
    """Print a short comparison table (sdpa bf16 vs fp8attn with and without P / O quantization)
    on the embedded model; for ``python -m fp8attn``. Returns the evaluate() result."""
    file = file or sys.stdout
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    res = evaluate(model_dir, device=device, max_seqs=max_seqs, progress=False,
                   configs=["sdpa-bf16", "fp8-qkv", "fp8-qkvp", "fp8-qkvpo"])
    print(format_table(res), file=file)
    return res


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m fp8attn.eval", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=None, help="model directory (default: models/stdlib-llama)")
    ap.add_argument("--scales", default=None, help="Quark-named scales (default: MODEL/fp8attn_scales.safetensors)")
    ap.add_argument("--text", default=None, help="held-out text (default: MODEL/heldout.txt)")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--fp8-dtype", default=None, choices=["e4m3fn", "e4m3fnuz"],
                    help="FP8 type (default: e4m3fnuz on MI300, else e4m3fn); e4m3fnuz doubles the scales")
    ap.add_argument("--configs", default=",".join(CONFIGS),
                    help=f"comma-separated, from {list(CONFIGS) + list(EXTRA_CONFIGS)}")
    ap.add_argument("--seq-len", type=int, default=512)
    ap.add_argument("--max-seqs", type=int, default=None)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--json", default=None, help="write the result as JSON here")
    ap.add_argument("--md", default=None, help="write the markdown table here")
    ap.add_argument("--check", type=float, default=None, metavar="PCT",
                    help=f"exit 1 unless {FULL_FP8} is within +PCT%% perplexity of {BASELINE}")
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    configs = [c for c in args.configs.split(",") if c]
    if args.check is not None:
        for need in (BASELINE, FULL_FP8):
            if need not in configs:
                configs.append(need)
    res = evaluate(args.model, configs=configs, device=args.device, seq_len=args.seq_len,
                   max_seqs=args.max_seqs, batch=args.batch, scales=args.scales, text=args.text,
                   fp8_dtype=getattr(torch, f"float8_{args.fp8_dtype}") if args.fp8_dtype else None)
    table = format_table(res)
    print(table)
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=1) + "\n")
    if args.md:
        Path(args.md).write_text(table + "\n")
    if args.check is not None:
        rel = next(r for r in res["rows"] if r["config"] == FULL_FP8)["rel_vs_bf16_pct"]
        ok = rel <= args.check
        print(f"{FULL_FP8} vs {BASELINE}: {rel:+.3f}% (limit +{args.check}%): {'OK' if ok else 'FAIL'}")
        return 0 if ok else 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
