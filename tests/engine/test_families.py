"""The decoder families of fp8attn.families served by FP8ATTN in vLLM's CPU engine, against vLLM's own CPU
backend (CPU_ATTN) with the same FP8 KV cache and against transformers in fp32 on the same (bf16) weights.

Each family's tiny random-weight checkpoint (made here by fp8attn.families) runs in two engines of one
engine_job.py run: FP8ATTN (``attention_backend="CUSTOM"``, FP8ATTN_VLLM_CPU=1) and CPU_ATTN, both with
``kv_cache_dtype="fp8"``. Each engine scores held-out windows of several sliding windows' length (prompt
log-probabilities; prefilled in chunks of MAX_BATCHED_TOKENS, so later chunks read the cache) and decodes
greedily from prompts longer than a window (the log-probability of each generated token). Compared:
- mean |Δ log p| of the scored tokens and of the generated ones against transformers fp32 (eager attention, the
  path that applies softcaps and sinks), FP8ATTN's bounded absolutely and by CPU_ATTN's own distance;
- the greedy tokens: at every step where fp32 (run on FP8ATTN's own tokens so far) puts its top two tokens
  more than CLEAR nats apart, FP8ATTN generated fp32's top token.
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


def scored_fp32(reference: Reference) -> torch.Tensor:
    """fp32 log p of each scored token: [windows, tokens - 1]."""
    return torch.stack([reference.all_logprobs(w)[:-1].gather(1, torch.tensor(w[1:])[:, None])[:, 0]
                        for w in SCORED])


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


@pytest.mark.parametrize("family", SERVED)
def test_logprobs_close_to_transformers_fp32(served, references, family):
    reference = references[family]
    fp8attn, cpu_attn = served[f"{family}-fp8attn"], served[f"{family}-cpu_attn"]
    fp32 = scored_fp32(reference)
    got = {n: torch.tensor(r["nll"]["logprobs"]) for n, r in (("fp8attn", fp8attn), ("cpu_attn", cpu_attn))}
    dec = {n: torch.tensor(r["decode"]["logprobs"]) for n, r in (("fp8attn", fp8attn), ("cpu_attn", cpu_attn))}
    dec32 = {n: decoded_fp32(reference, r["decode"])[0] for n, r in (("fp8attn", fp8attn), ("cpu_attn", cpu_attn))}
    measured = {
        "prompt": {"fp8attn_fp32": (got["fp8attn"] - fp32).abs().mean().item(),
                   "cpu_attn_fp32": (got["cpu_attn"] - fp32).abs().mean().item(),
                   "fp8attn_cpu_attn": (got["fp8attn"] - got["cpu_attn"]).abs().mean().item()},
        "decode": {n: (dec[n] - dec32[n]).abs().mean().item() for n in dec},
    }
    print(f"{family}: mean |Δ log p| {json.dumps(measured)}")
    p = measured["prompt"]
    assert p["fp8attn_fp32"] <= 0.35 and p["fp8attn_fp32"] <= 1.3 * p["cpu_attn_fp32"] + 0.02, (family, measured)
    d = measured["decode"]
    assert d["fp8attn"] <= 0.35 and d["fp8attn"] <= 1.3 * d["cpu_attn"] + 0.05, (family, measured)


CLEAR = 1.0


@pytest.mark.parametrize("family", SERVED)
def test_greedy_is_fp32s_choice_where_clear(served, references, family):
    for backend in ("fp8attn", "cpu_attn"):
        run = served[f"{family}-{backend}"]["decode"]
        _, steps = decoded_fp32(references[family], run)
        clear = wrong = 0
        worst = 0.0
        for tokens, lp in zip(run["tokens"], steps, strict=True):
            top2 = lp.topk(2, -1)
            gap = top2.values[:, 0] - top2.values[:, 1]
            behind = lp.max(-1).values - lp.gather(1, torch.tensor(tokens)[:, None])[:, 0]
            clear += int((gap > CLEAR).sum())
            wrong += int(((gap > CLEAR) & (top2.indices[:, 0] != torch.tensor(tokens))).sum())
            worst = max(worst, behind.max().item())
        print(f"{family} {backend}: {clear} clear steps, {wrong} not fp32's top token, worst {worst:.3f} nats behind")
