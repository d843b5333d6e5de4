"""A decode step's breakdown from engine_profile.py runs (lab tool): docs/vllm-cpu-profile.md / .json.

    python lab/cpu/profile_table.py OUT_PREFIX LABEL=OUT_DIR [LABEL=OUT_DIR ...]

Per run (engine_profile.py's summary.json in OUT_DIR): the median decode step (the worker's execute_context
annotation), and per step (median per call x calls per step) the attention op, the cache-write op, and the Python
of vLLM's two per-layer custom ops (unified_attention_with_output, unified_kv_cache_update; their own time,
the ops they call excluded); the rest of the step is the model's other work (GEMMs, norms, RoPE, sampling, and
vLLM's q quantization before FP8ATTN's op).
"""
import json
import sys

ATTENTION = ("fp8attn::forward", "_C::cpu_attention_with_kv_cache")
WRITE = ("fp8attn::write_kv_cache", "_C::cpu_attn_reshape_and_cache")
WRAPPERS = ("vllm::unified_attention_with_output", "vllm::unified_kv_cache_update")


def breakdown(summary: dict) -> dict:
    ops, steps = summary["ops"], summary["steps"]
    decode = [o for n, o in ops.items() if n.startswith("execute_context_0(0)_generation_")]
    step = max(decode, key=lambda o: o["calls"])["median_us"]

    def per_step(names, key="median_us"):
        return sum(ops[n][key] * ops[n]["calls"] / steps for n in names if n in ops)

    row = {"step_us": step, "attention_op_us": per_step(ATTENTION), "cache_write_op_us": per_step(WRITE),
           "vllm_op_wrappers_us": per_step(WRAPPERS, "median_self_us"),
           "layers_calls_per_step": sum(ops[n]["calls"] for n in ATTENTION if n in ops) / steps}
    row["rest_us"] = step - row["attention_op_us"] - row["cache_write_op_us"] - row["vllm_op_wrappers_us"]
    return row


def main() -> None:
    prefix, runs = sys.argv[1], [a.split("=", 1) for a in sys.argv[2:]]
    rows = {}
    for label, d in runs:
        with open(f"{d}/summary.json") as f:
            s = json.load(f)
        rows[label] = {**breakdown(s), "backend": s["backend"], "eager": s["eager"], "requests": s["requests"],
                       "prompt": s["prompt"], "steps": s["steps"], "load_average": s["load_average"]}
    lines = ["| run | decode step | attention op | cache-write op | vLLM op wrappers (Python) | rest of the step |",
             "|---|---:|---:|---:|---:|---:|"]
    for label, r in rows.items():
        lines.append(f"| {label} | {r['step_us']:.0f} | {r['attention_op_us']:.0f} | {r['cache_write_op_us']:.0f} | "
                     f"{r['vllm_op_wrappers_us']:.0f} | {r['rest_us']:.0f} |")
    with open(prefix + ".json", "w") as f:
        json.dump(rows, f, indent=1)
    print("\n".join(lines))


if __name__ == "__main__":
    main()
