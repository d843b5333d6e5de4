"""Make the embedded model (models/stdlib-llama) a directory vLLM serves: its config and weights plus a tokenizer.

The model reads bytes (vocabulary 256, no tokenizer file); vLLM needs a tokenizer, so this writes fp8attn.families'
byte tokenizer (each byte its own id, both ways; a chat template that joins the messages' contents with newlines).
The weights are linked, not copied; only model.safetensors is taken (vLLM loads every *.safetensors in a directory:
fp8attn's calibration file beside it holds attention scales under Quark's names, which a model without a
quantization config has no parameters for).

    python scripts/vllm/stdlib_llama.py OUT_DIR [--model models/stdlib-llama]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
from pathlib import Path

from fp8attn.families import write_byte_tokenizer

ROOT = Path(__file__).resolve().parents[2]
MODEL = ROOT / "models" / "stdlib-llama"


def make_serving_dir(out: str | Path, model: str | Path = MODEL) -> Path:
    """OUT_DIR with model's config.json, a link to its model.safetensors, and the byte tokenizer."""
    out, model = Path(out), Path(model)
    out.mkdir(parents=True, exist_ok=True)
    config = json.loads((model / "config.json").read_text())
    if config.get("vocab_size") != 256:
        raise ValueError(f"model: {model} is not a byte-level model (vocab_size {config.get('vocab_size')})")
    shutil.copy(model / "config.json", out / "config.json")
    weights = out / "model.safetensors"
    if weights.is_symlink() or weights.exists():
        weights.unlink()
    os.symlink((model / "model.safetensors").resolve(), weights)
    write_byte_tokenizer(out)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out", help="the directory to write")
    ap.add_argument("--model", default=str(MODEL), help="a byte-level HF Llama directory (default: %(default)s)")
    args = ap.parse_args(argv)
    print(make_serving_dir(args.out, args.model))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
