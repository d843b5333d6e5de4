"""torch.profiler on the worker process of one vLLM CPU engine during decode steps (lab check).

    VLLM_CPU_KVCACHE_SPACE=2 python lab/cpu/engine_profile.py fp8attn|cpu_attn|cpu_attn_bf16 SERVING_DIR OUT_DIR \
        [--eager] [--requests 16 --prompt 32 --new 64 --max-model-len 512]

vLLM's own profiler (profiler_config torch) runs in the worker: after a warm-up (which also puts the prompts in
the prefix cache), one generate of REQUESTS requests of PROMPT random tokens x NEW new tokens is recorded; vLLM
writes the worker's trace and its self-CPU-time table to OUT_DIR. This script then sums the trace: self time per
op name over the profiled steps.
"""
import argparse
import collections
import glob
import gzip
import json
import os
import statistics
import time


def summarize(out_dir: str) -> dict:
    """Per op name in the worker's trace: calls, median inclusive and median self time (us) per call."""
    files = sorted(glob.glob(os.path.join(out_dir, "**", "*.pt.trace.json*"), recursive=True), key=os.path.getmtime)
    path = files[-1]
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        trace = json.load(f)
    by_tid = collections.defaultdict(list)
    for e in trace["traceEvents"]:
        if e.get("ph") == "X":
            by_tid[(e["pid"], e["tid"])].append(e)
    incl, self_ = collections.defaultdict(list), collections.defaultdict(list)
    for evs in by_tid.values():
        evs.sort(key=lambda e: (e["ts"], -e["dur"]))
        stack = []
        for e in evs:
            while stack and stack[-1]["ts"] + stack[-1]["dur"] <= e["ts"]:
                stack.pop()
            if stack:  # a direct child: its time is not its parent's own
                stack[-1]["_child"] = stack[-1].get("_child", 0.0) + e["dur"]
            stack.append(e)
        for e in evs:
            incl[e["name"]].append(e["dur"])
            self_[e["name"]].append(e["dur"] - e.get("_child", 0.0))
    ops = {n: {"calls": len(v), "median_us": statistics.median(v), "median_self_us": statistics.median(self_[n]),
               "total_self_us": sum(self_[n])} for n, v in incl.items()}
    return {"trace": path, "ops": ops}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("backend", choices=["fp8attn", "cpu_attn", "cpu_attn_bf16"])
    ap.add_argument("model")
    ap.add_argument("out_dir")
    ap.add_argument("--eager", action="store_true", help="vLLM's compilation off (enforce_eager)")
    ap.add_argument("--max-model-len", type=int, default=512)
    ap.add_argument("--requests", type=int, default=16)
    ap.add_argument("--prompt", type=int, default=32)
    ap.add_argument("--new", type=int, default=64)
    args = ap.parse_args()
    if args.backend == "fp8attn":
        os.environ["FP8ATTN_VLLM_CPU"] = "1"
    import torch
    from vllm import LLM, SamplingParams

    kw = {"attention_backend": "CUSTOM"} if args.backend == "fp8attn" else {}
    out_dir = os.path.abspath(args.out_dir)
    os.makedirs(out_dir, exist_ok=True)
    llm = LLM(args.model, dtype="bfloat16", max_model_len=args.max_model_len,
              kv_cache_dtype="auto" if args.backend == "cpu_attn_bf16" else "fp8", seed=0, enforce_eager=args.eager,
              profiler_config={"profiler": "torch", "torch_profiler_dir": out_dir, "torch_profiler_with_stack": False,
                               "torch_profiler_use_gzip": False}, **kw)
    g = torch.Generator().manual_seed(0)
    decode = [{"prompt_token_ids": torch.randint(0, 256, (args.prompt,), generator=g).tolist()}
              for _ in range(args.requests)]
    gen = SamplingParams(temperature=0.0, max_tokens=args.new, ignore_eos=True)
    llm.generate(decode, gen, use_tqdm=False)
    t0 = time.perf_counter()
    llm.generate(decode, gen, use_tqdm=False)
    plain = time.perf_counter() - t0
    llm.start_profile()
    t0 = time.perf_counter()
    llm.generate(decode, gen, use_tqdm=False)
    profiled = time.perf_counter() - t0
    llm.stop_profile()
    llm.llm_engine.engine_core.shutdown()
    time.sleep(2)
    s = summarize(out_dir)
    s.update(backend=args.backend, eager=args.eager, steps=args.new, requests=args.requests, prompt=args.prompt,
             plain_s=plain, profiled_s=profiled, load_average=list(os.getloadavg()))
    with open(os.path.join(out_dir, "summary.json"), "w") as f:
        json.dump(s, f, indent=1)
    print(args.backend, "eager" if args.eager else "compiled", f"plain {plain:.3f} s, profiled {profiled:.3f} s")
    steps = max(1, args.new)
    for name, o in sorted(s["ops"].items(), key=lambda x: -x[1]["total_self_us"])[:30]:
        print(f"{o['calls'] / steps:6.1f}/step  median {o['median_us']:9.1f} us  "
              f"self {o['median_self_us']:9.1f} us  {name}")


if __name__ == "__main__":
    main()
