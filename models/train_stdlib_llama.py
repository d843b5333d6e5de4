"""Train the small byte-level Llama that fp8attn's end-to-end accuracy checks run on.

The model is a plain transformers ``LlamaForCausalLM`` (GQA 8 q / 2 kv heads, head dim 64, RoPE,
4 layers, hidden 256) over bytes (vocab 256, no tokenizer), trained on the Python standard
library's own ``.py`` sources, which every machine with Python has. Files are split into train and
held-out sets by a hash of their path relative to the stdlib directory, so the two are disjoint
files. Everything is seeded and runs on one CPU thread, so a re-run on the same Python and torch
gives the same weights.

    python models/train_stdlib_llama.py --out models/stdlib-llama          # ~25 min, one core

writes ``config.json``, ``model.safetensors`` (bf16), ``heldout.txt`` (the evaluation text),
``calib.txt`` (a slice of *training* text for calibration) and ``train_log.json``.
See models/README.md for the recipe and the numbers.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import sys
import sysconfig
import time
from pathlib import Path

import torch

SKIP_DIRS = {"site-packages", "__pycache__", "test", "tests", "idle_test"}
HELDOUT_BYTE_THRESHOLD = 13  # sha256(relpath)[0] < 13  ->  ~5% of files held out


def stdlib_files(stdlib: str | None = None) -> list[tuple[str, Path]]:
    """(relative path, path) of every .py file of the stdlib, sorted, test suites excluded."""
    root = Path(stdlib or sysconfig.get_paths()["stdlib"])
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS)
        for name in sorted(filenames):
            if name.endswith(".py"):
                p = Path(dirpath) / name
                out.append((p.relative_to(root).as_posix(), p))
    out.sort()
    return out


def is_heldout(relpath: str) -> bool:
    return hashlib.sha256(relpath.encode()).digest()[0] < HELDOUT_BYTE_THRESHOLD


def load_split(stdlib: str | None = None) -> tuple[bytes, bytes, list[str], list[str]]:
    train, held, train_names, held_names = [], [], [], []
    for rel, p in stdlib_files(stdlib):
        data = p.read_bytes()
        if is_heldout(rel):
            held.append(data)
            held_names.append(rel)
        else:
            train.append(data)
            train_names.append(rel)
    return b"\n".join(train), b"\n".join(held), train_names, held_names


def make_config(seq_len: int):
    from transformers import LlamaConfig

    return LlamaConfig(
        vocab_size=256,
        hidden_size=256,
        intermediate_size=640,
        num_hidden_layers=4,
        num_attention_heads=8,
        num_key_value_heads=2,
        head_dim=64,
        max_position_embeddings=seq_len,
        rms_norm_eps=1e-5,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        tie_word_embeddings=True,
        bos_token_id=None,
        eos_token_id=None,
        pad_token_id=None,
        attention_bias=False,
        mlp_bias=False,
    )


def lr_at(step: int, steps: int, peak: float, warmup: int) -> float:
    if step < warmup:
        return peak * (step + 1) / warmup
    t = (step - warmup) / max(1, steps - warmup)
    return peak * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * t)))


def next_byte_loss(model, x: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy of predicting x[:, 1:] from x[:, :-1] (x: [B, S+1] int64)."""
    logits = model(input_ids=x[:, :-1]).logits
    return torch.nn.functional.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), x[:, 1:].reshape(-1))


@torch.no_grad()
def evaluate(model, data: torch.Tensor, seq_len: int, n_seq: int) -> float:
    """Mean cross-entropy (nats/byte) over n_seq fixed, non-overlapping windows of data."""
    model.eval()
    total, count = 0.0, 0
    for i in range(n_seq):
        x = data[i * seq_len:(i + 1) * seq_len + 1].long()[None]
        total += next_byte_loss(model, x).item() * seq_len
        count += seq_len
    model.train()
    return total / count


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="models/stdlib-llama")
    ap.add_argument("--steps", type=int, default=550)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq-len", type=int, default=512)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--warmup", type=int, default=100)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--eval-every", type=int, default=250)
    ap.add_argument("--heldout-bytes", type=int, default=64 * 1024)
    ap.add_argument("--calib-bytes", type=int, default=32 * 1024)
    ap.add_argument("--max-minutes", type=float, default=0.0,
                    help="stop early after this many minutes (0 = run all steps); breaks determinism")
    args = ap.parse_args(argv)

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    from transformers import LlamaForCausalLM

    train_bytes, held_bytes, train_names, held_names = load_split()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    train = torch.frombuffer(bytearray(train_bytes), dtype=torch.uint8)
    held = torch.frombuffer(bytearray(held_bytes), dtype=torch.uint8)
    print(f"train {len(train_bytes)/1e6:.2f} MB in {len(train_names)} files, "
          f"held-out {len(held_bytes)/1e6:.2f} MB in {len(held_names)} files", flush=True)

    config = make_config(args.seq_len)
    model = LlamaForCausalLM(config)  # initialised from torch.manual_seed above
    model.config._attn_implementation = "sdpa"
    n_params = sum(p.numel() for p in model.parameters())
    print(f"{n_params/1e6:.2f} M parameters", flush=True)

    decay = [p for n, p in model.named_parameters() if p.ndim >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.ndim < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.95), eps=1e-8)
    gen = torch.Generator().manual_seed(args.seed + 1)
    log = []
    t0 = time.time()
    n_eval = 16
    for step in range(args.steps):
        for g in opt.param_groups:
            g["lr"] = lr_at(step, args.steps, args.lr, args.warmup)
        starts = torch.randint(0, len(train) - args.seq_len - 1, (args.batch,), generator=gen)
        x = torch.stack([train[s:s + args.seq_len + 1] for s in starts.tolist()]).long()
        loss = next_byte_loss(model, x)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        last = step == args.steps - 1
        minutes = (time.time() - t0) / 60
        stop = args.max_minutes > 0 and minutes > args.max_minutes
        if step % 25 == 0 or last or stop:
            print(f"step {step} loss {loss.item():.4f} lr {opt.param_groups[0]['lr']:.2e} "
                  f"{minutes:.1f} min", flush=True)
        if (step + 1) % args.eval_every == 0 or last or stop:
            ce = evaluate(model, held, args.seq_len, n_eval)
            rec = {"step": step + 1, "train_loss": loss.item(), "heldout_nats_per_byte": ce,
                   "heldout_ppl": math.exp(ce), "minutes": minutes}
            log.append(rec)
            print(json.dumps(rec), flush=True)
        if stop:
            break

    from safetensors.torch import save_file

    model = model.to(torch.bfloat16)
    state = {k: v.contiguous() for k, v in model.state_dict().items() if k != "lm_head.weight"}
    save_file(state, str(out / "model.safetensors"), metadata={"format": "pt"})
    config.dtype = "bfloat16"
    config.save_pretrained(str(out))
    (out / "heldout.txt").write_bytes(held_bytes[:args.heldout_bytes])
    (out / "calib.txt").write_bytes(train_bytes[:args.calib_bytes])
    info = {
        "args": vars(args),
        "python": sys.version,
        "torch": torch.__version__,
        "stdlib_train_files": len(train_names),
        "stdlib_heldout_files": len(held_names),
        "train_sha256": hashlib.sha256(train_bytes).hexdigest(),
        "heldout_sha256": hashlib.sha256(held_bytes).hexdigest(),
        "heldout_files_first": held_names[:20],
        "parameters": n_params,
        "log": log,
    }
    (out / "train_log.json").write_text(json.dumps(info, indent=1) + "\n")
    print(f"wrote {out}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
