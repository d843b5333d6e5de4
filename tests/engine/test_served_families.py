"""The decoder families of fp8attn.families served by FP8ATTN in vLLM's CPU engine, against vLLM's own CPU
backend (CPU_ATTN) with the same FP8 KV cache and against transformers in fp32 on the same (bf16) weights.

Each family's tiny random-weight checkpoint (made here by fp8attn.families) runs in two engines of one
engine_job.py run: FP8ATTN (``attention_backend="CUSTOM"``, FP8ATTN_VLLM_CPU=1) and CPU_ATTN, both with
``kv_cache_dtype="fp8"``. Each engine scores held-out windows of several sliding windows' length (prompt
log-probabilities; prefilled in chunks of MAX_BATCHED_TOKENS, so later chunks read the cache) and decodes
greedily from prompts longer than a window (the log-probability of each generated token). Compared:
- mean |Δ log p| of the scored tokens and of the generated ones against transformers fp32 (eager attention, the
  path that applies softcaps and sinks), FP8ATTN's bounded absolutely and by CPU_ATTN's own distance;
- the greedy tokens: at every step FP8ATTN's token is within CLEAR nats of fp32's top one (fp32 run on FP8ATTN's
  own tokens so far), so where fp32's top two tokens are more than CLEAR apart it is fp32's top one.
"""

from __future__ import annotations

import json

import pytest
import torch
from engines import (
    ENGINE,
    FP8ATTN,
    Reference,
    fp8attn_processes,
    heldout_windows,
    kv_cache_bytes,
    run_engines,
)

from fp8attn.families import FAMILIES, WINDOW, make_checkpoint

SERVED = list(FAMILIES)
SCORED = heldout_windows(3, 5 * WINDOW)  # 3 windows of 160 tokens
PROMPTS = [bytes(w[:48]).decode("utf-8", "replace") for w in heldout_windows(8, 400)[4:]]  # 1.5 windows each
DECODE_TOKENS = 32


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("families")
    return {f: make_checkpoint(f, out / f) for f in SERVED}


@pytest.fixture(scope="module")
def served(checkpoints, tmp_path_factory):
    engines = []
    tasks = [{"kind": "nll", "windows": SCORED}, {"kind": "decode", "prompts": PROMPTS, "max_tokens": DECODE_TOKENS}]
    for family, path in checkpoints.items():
        llm = dict(ENGINE, model=str(path), kv_cache_dtype="fp8", enforce_eager=True,
                   kv_cache_memory_bytes=32 * kv_cache_bytes(path))
        engines += [{"name": f"{family}-fp8attn", "env": FP8ATTN, "llm": dict(llm, attention_backend="CUSTOM"),
                     "tasks": tasks},
                    {"name": f"{family}-cpu_attn", "llm": llm, "tasks": tasks}]
    return run_engines(engines, tmp_path_factory.mktemp("families-engines"))


@pytest.fixture(scope="module")
def references(checkpoints):
    return {f: Reference(p) for f, p in checkpoints.items()}


def decoded_fp32(reference: Reference, run: dict) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """fp32 log p of each generated token, and fp32's log-probabilities at each step, on the engine's tokens."""
    chosen, steps = [], []
    for prompt, tokens in zip(PROMPTS, run["tokens"], strict=True):
        ids = list(prompt.encode())
        lp = reference.all_logprobs(ids + tokens)[len(ids) - 1:-1]
        chosen.append(lp.gather(1, torch.tensor(tokens)[:, None])[:, 0])
        steps.append(lp)
    return torch.stack(chosen), steps


def test_fp8attn_ran_only_where_selected(served):
    for family in SERVED:
        assert fp8attn_processes(served.engine_log(f"{family}-fp8attn")) == ["Worker"], family
        assert fp8attn_processes(served.engine_log(f"{family}-cpu_attn")) == [], family
    assert "terminate called" not in served.log


# mean |Δ log p| against fp32 (nats): FP8ATTN's at most BOUND, and at most RELATIVE x CPU_ATTN's (+ a little for
# the 128 decoded tokens' sampling noise); measured 0.07-0.20 for both backends (docs/vllm.md)
BOUND = 0.35
RELATIVE = 1.3


@pytest.mark.parametrize("family", SERVED)
def test_logprobs_close_to_transformers_fp32(served, references, family):
    reference = references[family]
    runs = {b: served[f"{family}-{b}"] for b in ("fp8attn", "cpu_attn")}
    fp32 = torch.stack([reference.token_logprobs(w) for w in SCORED])
    prompt = {b: torch.tensor(r["nll"]["logprobs"]) for b, r in runs.items()}
    decode = {b: torch.tensor(r["decode"]["logprobs"]) - decoded_fp32(reference, r["decode"])[0]
              for b, r in runs.items()}
    d = {"prompt": {b: (lp - fp32).abs().mean().item() for b, lp in prompt.items()},
         "decode": {b: x.abs().mean().item() for b, x in decode.items()}}
    d["prompt"]["fp8attn_vs_cpu_attn"] = (prompt["fp8attn"] - prompt["cpu_attn"]).abs().mean().item()
    print(f"{family}: mean |Δ log p| against fp32 {json.dumps(d)}")
    for what, slack in (("prompt", 0.02), ("decode", 0.05)):
        assert d[what]["fp8attn"] <= min(BOUND, RELATIVE * d[what]["cpu_attn"] + slack), (family, what, d)


# nats: vLLM's own CPU_ATTN with the same FP8 KV cache picks tokens up to 1.02 nats behind fp32's top one on these
# random models (FP8 K/V rounding moves their logits that far; FP8ATTN: 1.17): two tokens closer than this are a tie
CLEAR = 1.5


@pytest.mark.parametrize("family", SERVED)
def test_greedy_is_fp32s_choice_unless_a_tie(served, references, family):
    """At every greedy step, FP8ATTN's token is within CLEAR of fp32's top token (fp32 run on FP8ATTN's tokens so
    far): where fp32's top two are more than CLEAR apart, FP8ATTN generated fp32's top token."""
    run = served[f"{family}-fp8attn"]["decode"]
    _, steps = decoded_fp32(references[family], run)
    for prompt, tokens, lp in zip(PROMPTS, run["tokens"], steps, strict=True):
        behind = lp.max(-1).values - lp.gather(1, torch.tensor(tokens)[:, None])[:, 0]
        i = int(behind.argmax())
        assert behind[i] <= CLEAR, (f"{family}: {prompt!r}, step {i}: FP8ATTN took {tokens[i]}, {behind[i]:.3f} nats "
                                    f"below fp32's top token {int(lp[i].argmax())}")
