"""Decode tokens/s of one vLLM CPU engine on the embedded model, for SECS seconds (lab check).

    VLLM_CPU_KVCACHE_SPACE=1 python lab/cpu/engine_decode.py fp8attn|cpu_attn SERVING_DIR
(SERVING_DIR from scripts/vllm/stdlib_llama.py); run the two backends alternately.
"""
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def main() -> None:
    backend, model = sys.argv[1], sys.argv[2]
    if backend == "fp8attn":
        os.environ["FP8ATTN_VLLM_CPU"] = "1"
    from vllm import LLM, SamplingParams

    kw = {"attention_backend": "CUSTOM"} if backend == "fp8attn" else {}
    llm = LLM(model, dtype="bfloat16", max_model_len=512, kv_cache_dtype="fp8", seed=0, **kw)
    data = (ROOT / "models" / "stdlib-llama" / "heldout.txt").read_bytes()
    decode = [{"prompt_token_ids": list(data[i * 32:(i + 1) * 32])} for i in range(16)]
    gen = SamplingParams(temperature=0.0, max_tokens=128, ignore_eos=True)
    llm.generate(decode, gen, use_tqdm=False)
    t0, n = time.perf_counter(), 0
    while time.perf_counter() - t0 < float(os.environ.get("SECS", "20")):
        llm.generate(decode, gen, use_tqdm=False)
        n += 1
    print(backend, "tok/s", n * 16 * 128 / (time.perf_counter() - t0), flush=True)
    llm.llm_engine.engine_core.shutdown()


if __name__ == "__main__":
    main()
