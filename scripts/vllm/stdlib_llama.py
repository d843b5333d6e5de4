"""Make the embedded model (models/stdlib-llama) a directory vLLM serves: its config and weights plus a tokenizer.

The model reads bytes (vocabulary 256, no tokenizer file); vLLM needs a tokenizer, so this writes one with the
`tokenizers` library that maps each byte to its own id (a byte-level BPE without merges) and back, and a chat
template that joins the messages' contents with newlines. The weights are linked, not copied; only
model.safetensors is taken (vLLM loads every *.safetensors in a directory: fp8attn's calibration file beside it
holds attention scales under Quark's names, which a model without a quantization config has no parameters for).

    python scripts/vllm/stdlib_llama.py OUT_DIR [--model models/stdlib-llama]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MODEL = ROOT / "models" / "stdlib-llama"
CHAT_TEMPLATE = "{% for m in messages %}{{ m['content'] }}\n{% endfor %}"


def write_byte_tokenizer(out: Path) -> None:
    """tokenizer.json / tokenizer_config.json / chat template: token id = byte value, both ways."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    byte_char = bytes_to_unicode()  # the byte-level alphabet: one printable character per byte
    tok = Tokenizer(models.BPE(vocab={byte_char[b]: b for b in range(256)}, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok)
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(str(out))
    sample = "déf f(x):\n\treturn x  # ok".encode()
    if fast(sample.decode())["input_ids"] != list(sample) or fast.decode(list(sample)).encode() != sample:
        raise RuntimeError("the byte tokenizer does not map bytes to their own ids")


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
