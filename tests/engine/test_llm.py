"""LLM(...) engines on the embedded model: FP8ATTN against vLLM's own CPU backend (CPU_ATTN) with the same FP8
KV cache, against transformers in fp32 and against a bf16 KV cache; a mixed load; tensor parallelism 2.

One engine_job.py run serves every test of this module (four engines, one after the other):
- fp8attn: ``attention_backend="CUSTOM"`` with FP8ATTN_VLLM_CPU=1, FP8 KV cache; greedy prompts, held-out
  log-likelihood, and the mixed load: 10 requests of 20-440 tokens (five share a 160-token prefix; prefix
  caching on), one longer than max_num_batched_tokens (chunked prefill), in a KV cache of 768 tokens (so
  requests are preempted), submitted together and then one at a time;
- cpu_attn: vLLM's CPU_ATTN, FP8 KV cache; greedy prompts and held-out log-likelihood;
- bf16: vLLM's CPU_ATTN, bf16 KV cache (the unquantized run); held-out log-likelihood;
- fp8attn_tp2: FP8ATTN, tensor_parallel_size=2 (one worker per core: VLLM_CPU_OMP_THREADS_BIND="0|1").
"""

from __future__ import annotations

import math

import pytest
import torch
from engines import (
    ENGINE,
    FP8ATTN,
    MAX_BATCHED_TOKENS,
    MODEL,
    PROMPTS,
    check_greedy,
    fp8attn_processes,
    heldout_windows,
    kv_cache_bytes,
    run_engines,
)

WINDOWS = 4


def mixed_load() -> list[dict]:
    """10 requests of different lengths; the even ones share a 160-token prefix; the last is 440 tokens."""
    held = (MODEL / "heldout.txt").read_bytes()
    prefix = list((MODEL / "calib.txt").read_bytes()[:160])
    requests = []
    for i, n in enumerate([20, 60, 110, 150, 200, 250, 300, 40, 90, 440]):
        body = list(held[5000 + 700 * i: 5000 + 700 * i + n])
        ids = (prefix + body) if i % 2 == 0 else body
        requests.append({"prompt_token_ids": ids[:440], "max_tokens": 24 + 4 * i})
    return requests


@pytest.fixture(scope="module")
def engines(serving_dir, tmp_path_factory):
    greedy = {"kind": "greedy", "prompts": PROMPTS, "max_tokens": 48}
    nll = {"kind": "nll", "windows": heldout_windows(WINDOWS)}
    model = dict(ENGINE, model=str(serving_dir), enforce_eager=True)
    small_kv = kv_cache_bytes(serving_dir)
    big_kv = 32 * small_kv
    fp8attn = dict(model, kv_cache_dtype="fp8", attention_backend="CUSTOM")
    return run_engines([
        {"name": "fp8attn", "env": FP8ATTN, "llm": dict(fp8attn, kv_cache_memory_bytes=small_kv),
         "tasks": [greedy, nll, {"kind": "load", "requests": mixed_load()}]},
        {"name": "cpu_attn", "llm": dict(model, kv_cache_dtype="fp8", kv_cache_memory_bytes=big_kv),
         "tasks": [greedy, nll]},
        {"name": "bf16", "llm": dict(model, kv_cache_dtype="auto", kv_cache_memory_bytes=2 * big_kv), "tasks": [nll]},
        {"name": "fp8attn_tp2", "env": {**FP8ATTN, "VLLM_CPU_OMP_THREADS_BIND": "0|1"},
         "llm": dict(fp8attn, tensor_parallel_size=2, kv_cache_memory_bytes=big_kv), "tasks": [greedy]},
    ], tmp_path_factory.mktemp("llm"))


def test_fp8attn_runs_in_every_worker_and_only_when_selected(engines):
    assert "Using FP8ATTN on vLLM's CPU platform (FP8ATTN_VLLM_CPU=1)" in engines.engine_log("fp8attn")
    assert fp8attn_processes(engines.engine_log("fp8attn")) == ["Worker"]
    assert fp8attn_processes(engines.engine_log("fp8attn_tp2")) == ["Worker_TP0", "Worker_TP1"]
    for name in ("cpu_attn", "bf16"):
        assert fp8attn_processes(engines.engine_log(name)) == [], name
    assert "terminate called" not in engines.log


def test_greedy_matches_transformers_fp32(engines, reference):
    expected = [reference.greedy(p) for p in PROMPTS]
    equal = check_greedy(reference, PROMPTS, engines["fp8attn"]["greedy"], expected, "FP8ATTN vs transformers")
    assert equal >= len(PROMPTS) // 4, f"only {equal} of {len(PROMPTS)} greedy sequences equal throughout"


def test_greedy_matches_vllm_cpu_backend_same_fp8_kv(engines, reference):
    equal = check_greedy(reference, PROMPTS, engines["fp8attn"]["greedy"], engines["cpu_attn"]["greedy"],
                         "FP8ATTN vs CPU_ATTN")
    assert equal >= len(PROMPTS) // 4, f"only {equal} of {len(PROMPTS)} greedy sequences equal throughout"


def test_prompt_logprobs_close_to_transformers_fp32(engines, reference):
    """Mean |Δ log p| of the held-out tokens against fp32: FP8ATTN's within 1.3x CPU_ATTN's with the same FP8 KV
    cache (+0.01) and below 0.1 nats (the trained model is far less sensitive than the random ones of
    tests/engine/test_served_families.py)."""
    fp32 = torch.stack([reference.token_logprobs(w) for w in heldout_windows(WINDOWS)])
    d = {n: (torch.tensor(engines[n]["nll"]["logprobs"]) - fp32).abs().mean().item()
         for n in ("fp8attn", "cpu_attn", "bf16")}
    print(f"llama (embedded): mean |Δ log p| against fp32 {d}")
    assert d["fp8attn"] <= min(0.1, 1.3 * d["cpu_attn"] + 0.01), d


def perplexity(run: dict) -> float:
    return math.exp(run["nll"]["nll"] / run["nll"]["tokens"])


def test_perplexity_within_one_percent_of_bf16(engines):
    bf16, fp8attn, cpu_attn = (perplexity(engines[n]) for n in ("bf16", "fp8attn", "cpu_attn"))
    assert engines["fp8attn"]["nll"]["tokens"] == WINDOWS * (len(heldout_windows(1)[0]) - 1)
    assert fp8attn <= 1.01 * bf16, (fp8attn, bf16)
    assert 3.0 < bf16 < 8.0, bf16  # the embedded model on its held-out text (4.24 over all of it)
    print(f"perplexity: bf16 KV {bf16:.4f}, CPU_ATTN FP8 KV {cpu_attn:.4f}, FP8ATTN {fp8attn:.4f} "
          f"({100 * (fp8attn / bf16 - 1):+.3f} %)")


def test_mixed_load_equals_one_at_a_time(engines):
    load = engines["fp8attn"]["load"]
    requests = mixed_load()
    assert max(len(r["prompt_token_ids"]) for r in requests) > MAX_BATCHED_TOKENS  # chunked prefill ran
    assert load["counters"]["vllm:num_preemptions"] > 0, load["counters"]
    assert load["counters"]["vllm:prefix_cache_hits"] > 0, load["counters"]
    for i, (together, alone) in enumerate(zip(load["together"], load["alone"], strict=True)):
        assert len(together) == requests[i]["max_tokens"]
        assert together == alone, f"request {i}: concurrent and alone differ"


def test_tensor_parallel_2_matches_tp_1(engines, reference):
    equal = check_greedy(reference, PROMPTS, engines["fp8attn_tp2"]["greedy"], engines["fp8attn"]["greedy"],
                         "FP8ATTN TP 2 vs TP 1")
    assert equal >= len(PROMPTS) // 2, f"only {equal} of {len(PROMPTS)} greedy sequences equal throughout"
