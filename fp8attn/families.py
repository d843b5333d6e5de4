"""Tiny random-weight checkpoints of the decoder families fp8attn serves, made locally (no hub download):

    python -m fp8attn.families OUT_DIR [--family qwen3,mistral,...] [--seed 0]

Each OUT_DIR/<family>/ is a transformers ``save_pretrained`` directory (bfloat16 weights, so vLLM and a
transformers fp32 reference run the same numbers) with a byte-level tokenizer (token id = byte value), which
vLLM and transformers both load. The models share one shape, as small as still exercises each family's
attention: hidden 256, 4 layers, 4 query / 2 KV heads of head dim 64, byte vocabulary. Their weights are
random with the init scale raised to 0.1 (gpt-oss: 0.07; models train at 0.02): attention logits then spread
over several units, so a sliding window, a logit softcap or a sink changes the output measurably
(tests/test_families.py checks that each feature does).

``make_checkpoint(family, out)`` writes one; ``FAMILIES`` says what each exercises.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["FAMILIES", "Family", "SHAPE", "WINDOW", "make_checkpoint", "write_byte_tokenizer"]

WINDOW = 32  # sliding window of the windowed families: the tests' prompts are several windows long
SHAPE = dict(vocab_size=256, hidden_size=256, intermediate_size=512, num_hidden_layers=4, num_attention_heads=4,
             num_key_value_heads=2, head_dim=64, max_position_embeddings=512, initializer_range=0.1,
             tie_word_embeddings=True, bos_token_id=None, eos_token_id=None, pad_token_id=None)
ALTERNATING = ["sliding_attention", "full_attention"] * (SHAPE["num_hidden_layers"] // 2)
CHAT_TEMPLATE = "{% for m in messages %}{{ m['content'] }}\n{% endfor %}"


GEMMA_EMBEDDING_SCALE = 0.25
SINK_MEAN = 3.0


def _quiet_gemma_copy_path(model) -> None:
    """Gemma multiplies its (tied) embeddings by sqrt(hidden) = 16: at init scale 0.1 the input token's own
    embedding then dominates the residual stream and the tied logits, and the model predicts its input token
    whatever attention does. The embeddings are scaled by GEMMA_EMBEDDING_SCALE and the final norm's gain (Gemma's
    norms multiply by 1 + weight) by its inverse, so the logits keep their spread and attention decides them."""
    import torch

    with torch.no_grad():
        model.model.embed_tokens.weight.mul_(GEMMA_EMBEDDING_SCALE)
        norm = model.model.norm.weight
        norm.copy_((1 + norm) / GEMMA_EMBEDDING_SCALE - 1)


def _raise_sinks(model) -> None:
    """gpt-oss initializes its sinks like its weights, near 0, below most rows' largest attention logits: the
    sinks are drawn from N(SINK_MEAN, 1) instead, among those logits, so that each takes a share of the softmax."""
    import torch

    with torch.no_grad():
        for layer in model.model.layers:
            layer.self_attn.sinks.normal_(SINK_MEAN, 1.0)


@dataclass(frozen=True)
class Family:
    """A transformers config class, what its checkpoint sets beyond SHAPE, and what is done to its random weights."""

    config: str  # the transformers config class
    exercises: str  # the attention features the family brings
    overrides: dict = field(default_factory=dict)
    adjust: Callable[[object], None] | None = None  # applied to the initialized model (float32)


GEMMA = dict(query_pre_attn_scalar=64, hidden_activation="gelu_pytorch_tanh")  # softmax scale 1/sqrt(head dim)
FAMILIES: dict[str, Family] = {
    "qwen2": Family("Qwen2Config", "q/k/v projection bias"),
    "qwen3": Family("Qwen3Config", "q/k RMSNorm"),
    "mistral": Family("MistralConfig", f"sliding window {WINDOW} on every layer", dict(sliding_window=WINDOW)),
    # vLLM's Gemma-2 loads tied embeddings only (SHAPE ties them); softcap 10 (Gemma-2's is 50) so that it bends
    # these models' attention logits
    "gemma2": Family("Gemma2Config", f"attention logit softcap, sliding window {WINDOW} on alternating layers",
                     dict(GEMMA, sliding_window=WINDOW, layer_types=ALTERNATING, attn_logit_softcapping=10.0,
                          final_logit_softcapping=30.0), _quiet_gemma_copy_path),
    "gemma3": Family("Gemma3TextConfig", f"q/k RMSNorm, local (window {WINDOW}) and global layers, each with its RoPE",
                     dict(GEMMA, sliding_window=WINDOW, layer_types=["sliding_attention"] * 3 + ["full_attention"]),
                     _quiet_gemma_copy_path),
    # every expert routed (top-4 of 4): top-2 routing of random weights picks other experts in bf16 than in fp32.
    # Init scale 0.07: YaRN's attention factor (1.35 on q and on k) sharpens its attention, and at 0.1 the model
    # is three times as sensitive to FP8 K/V rounding as the others; max_position_embeddings = YaRN's original
    # 4096 x factor 32, as gpt-oss's own config has it
    "gpt_oss": Family("GptOssConfig", f"attention sinks, sliding window {WINDOW} on alternating layers, bf16 MoE",
                      dict(sliding_window=WINDOW, num_local_experts=4, num_experts_per_tok=4, initializer_range=0.07,
                           tie_word_embeddings=False, max_position_embeddings=131072), _raise_sinks),
}


def write_byte_tokenizer(out: str | Path) -> None:
    """tokenizer.json / tokenizer_config.json / chat template into out: token id = byte value, both ways (a
    byte-level BPE without merges), and a chat template that joins the messages' contents with newlines."""
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


def make_checkpoint(family: str, out: str | Path, seed: int = 0) -> Path:
    """Write the tiny random-weight checkpoint of ``family`` (a key of FAMILIES) into ``out``; returns out.

    The same seed gives the same weights under the same torch and transformers."""
    import torch
    import transformers

    if family not in FAMILIES:
        raise ValueError(f"family: {family!r} is not one of {', '.join(FAMILIES)}")
    spec = FAMILIES[family]
    config = getattr(transformers, spec.config)(**{**SHAPE, **spec.overrides})
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.float32)
        if spec.adjust is not None:
            spec.adjust(model)
    model.to(torch.bfloat16).save_pretrained(str(out))
    write_byte_tokenizer(out)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m fp8attn.families", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out", help="the directory to write OUT/<family>/ into")
    ap.add_argument("--family", default=",".join(FAMILIES), help="comma list (default: %(default)s)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    names = args.family.split(",")
    for name in names:
        if name not in FAMILIES:
            ap.error(f"--family: unknown family {name!r}; expected some of {', '.join(FAMILIES)}")
    for name in names:
        print(f"{name}: {make_checkpoint(name, Path(args.out) / name, args.seed)} ({FAMILIES[name].exercises})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
