"""Run vLLM engines one after the other in this interpreter and write what they produced:

    python tests/engine/engine_job.py JOB.json RESULT.json

JOB.json: {"engines": [{"name", "env": {VAR: value}, "llm": {LLM kwargs}, "tasks": [{"kind", ...}],
"may_fail": bool}]}. Each engine is an ``LLM(...)``, so vLLM spawns its engine core and workers as for any
user; ``env`` is set while it is built (the spawned processes inherit it). An engine with ``may_fail`` that
fails to start gives ``{"error": "Type: message"}`` instead of task results (the root cause is in the
log). Around each engine this prints ``=== engine NAME start`` / ``end`` on stderr, so a test can tell
which lines of the engines' logs belong to which engine.
Tasks (results keyed by kind):

- ``greedy`` {"prompts": [str], "max_tokens"}: the generated token ids of each prompt, temperature 0.
- ``decode`` {"prompts": [str], "max_tokens"}: as greedy, with vLLM's log-probability of each generated token:
  {"tokens": [[ids]], "logprobs": [[float]]}.
- ``nll`` {"windows": [[token ids]]}: the sum of -log p(token | prefix) over every token after the first of
  each window (vLLM's prompt logprobs), the number of tokens summed, and each window's log p(token | prefix)
  in order (``logprobs``).
- ``load`` {"requests": [{"prompt_token_ids", "max_tokens"}]}: the requests submitted together, then each
  alone, temperature 0: the token ids both ways, and the growth of vLLM's preemption and prefix-cache
  counters over the concurrent run.
- ``scales`` {}: per worker, the q/k/v/prob scales each attention layer holds as vLLM loaded them
  (``collective_rpc``; the engine needs VLLM_ALLOW_INSECURE_SERIALIZATION=1 to send the function).
"""

from __future__ import annotations

import gc
import json
import os
import sys
import time
from contextlib import contextmanager


@contextmanager
def environment(env: dict[str, str]):
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _greedy(llm, task: dict, logprobs: int | None) -> list:
    from vllm import SamplingParams

    params = SamplingParams(temperature=0.0, max_tokens=task["max_tokens"], ignore_eos=True, logprobs=logprobs)
    return [o.outputs[0] for o in llm.generate(task["prompts"], params, use_tqdm=False)]


def greedy(llm, task: dict) -> list[list[int]]:
    return [list(o.token_ids) for o in _greedy(llm, task, None)]


def decode(llm, task: dict) -> dict[str, list]:
    outs = _greedy(llm, task, 0)
    return {"tokens": [list(o.token_ids) for o in outs],
            "logprobs": [[step[t].logprob for t, step in zip(o.token_ids, o.logprobs, strict=True)] for o in outs]}


def nll(llm, task: dict) -> dict:
    from vllm import SamplingParams

    params = SamplingParams(temperature=0.0, max_tokens=1, prompt_logprobs=0)
    prompts = [{"prompt_token_ids": ids} for ids in task["windows"]]
    outs = llm.generate(prompts, params, use_tqdm=False)
    per_window = [[step[token].logprob for token, step in zip(window[1:], out.prompt_logprobs[1:], strict=True)]
                  for window, out in zip(task["windows"], outs, strict=True)]
    return {"nll": -sum(map(sum, per_window)), "tokens": sum(map(len, per_window)), "logprobs": per_window}


def _counters(llm) -> dict[str, float]:
    wanted = ("vllm:num_preemptions", "vllm:prefix_cache_hits", "vllm:prefix_cache_queries")
    return {m.name: float(m.value) for m in llm.get_metrics() if m.name in wanted and hasattr(m, "value")}


def load(llm, task: dict) -> dict:
    from vllm import SamplingParams

    prompts = [{"prompt_token_ids": r["prompt_token_ids"]} for r in task["requests"]]
    params = [SamplingParams(temperature=0.0, max_tokens=r["max_tokens"], ignore_eos=True) for r in task["requests"]]
    before = _counters(llm)
    together = [list(o.outputs[0].token_ids) for o in llm.generate(prompts, params, use_tqdm=False)]
    after = _counters(llm)
    alone = [list(llm.generate([p], [s], use_tqdm=False)[0].outputs[0].token_ids) for p, s in zip(prompts, params,
                                                                                                    strict=True)]
    return {"together": together, "alone": alone, "counters": {k: after[k] - before.get(k, 0.0) for k in after}}


def _layer_scales(worker) -> dict[str, dict[str, float]]:
    """Runs in each worker: the attention layers' scale buffers (their names as in the model)."""
    return {name: {w: float(getattr(m, f"_{w}_scale").item()) for w in ("q", "k", "v", "prob")}
            for name, m in worker.model_runner.model.named_modules() if hasattr(m, "_prob_scale")}


def scales(llm, task: dict) -> list[dict[str, dict[str, float]]]:
    return llm.collective_rpc(_layer_scales)


TASKS = {"greedy": greedy, "decode": decode, "nll": nll, "load": load, "scales": scales}


def run_engine(spec: dict) -> dict:
    from vllm import LLM

    start = time.monotonic()
    with environment(spec.get("env", {})):
        try:
            llm = LLM(**spec["llm"])
        except Exception as e:
            if not spec.get("may_fail"):
                raise
            return {"error": f"{type(e).__name__}: {e}", "seconds": {"start": time.monotonic() - start}}
        ready = time.monotonic()
        out = {task["kind"]: TASKS[task["kind"]](llm, task) for task in spec["tasks"]}
        llm.llm_engine.engine_core.shutdown()
        del llm
        gc.collect()
    out["seconds"] = {"start": ready - start, "tasks": time.monotonic() - ready}
    return out


def main(job_path: str, result_path: str) -> int:
    job = json.loads(open(job_path).read())
    results = {}
    for spec in job["engines"]:
        name = spec["name"]
        print(f"=== engine {name} start", file=sys.stderr, flush=True)
        results[name] = run_engine(spec)
        print(f"=== engine {name} end", file=sys.stderr, flush=True)
        with open(result_path, "w") as f:  # after each engine, so a later failure keeps the earlier results
            json.dump(results, f)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(*sys.argv[1:]))
