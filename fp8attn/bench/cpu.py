"""The CPU benchmark, run as ``python -m fp8attn.bench --device cpu [--out-dir DIR] [--quick] [--reps N]``.

fp8attn's CPU kernels (the instruction set ``FP8ATTN_CPU_ISA`` names, else the best this CPU runs) beside
torch SDPA in fp32 and bf16 on dense prefill shapes, a varlen batch and paged decode, and beside vLLM's
``CPU_ATTN`` (vLLM's CPU build, where it imports) on the serving workload (:mod:`fp8attn.workload`: a
mixed prefill + decode batch on a paged FP8 KV cache, block size 128 as vLLM's CPU engine uses) and on
decode. Every peer runs in the same process on the same values: FP8 Q/K/V for fp8attn (P quantized, FP8
output unless noted), their dequantized values in fp32 / bf16 for SDPA, vLLM's own FP8 cache (written by
its cache op) and bf16 q for ``CPU_ATTN``.

Timing: wall clock, median of --reps calls after warm-up. Prefill: GFLOP/s = 4·B·H·Sq·Sk·D / t (causal
counts the visible pairs). Decode: GB/s of K+V read (FP8 for fp8attn and CPU_ATTN, the dense 16/32-bit
K/V for SDPA), against the machine's read bandwidth measured in the same run (a sum over a 1 GiB fp32
buffer on every thread). Accuracy: relative L2 error against fp64 attention on the same real inputs.
Writes bench-cpu.json and bench-cpu.md to --out-dir.
"""
from __future__ import annotations

import datetime
import json
import math
import os
import platform
import statistics
import time

import torch

import fp8attn

from ..testing import sequence_rows
from ..workload import Workload, llama_batch
from .common import FN, OUT_SCALE, P_SCALE, fmt, ideal, progress, rel_err

DENSE = [  # B, Hq, Hkv, S, D, causal: the shapes the CPU targets are judged on
    (1, 32, 8, 2048, 128, True), (1, 32, 32, 1024, 128, False), (4, 32, 8, 512, 64, True),
]
VARLEN = [(32, 8, 128, [512, 1024, 300, 777, 1500])]  # Hq, Hkv, D, lengths (causal)
DECODE = [(1, 32768), (8, 8192), (32, 2048)]  # B, context (q_len 1, 32 q / 8 kv heads, D 128, page 128)
DECODE_QUICK = [(8, 2048)]
PAGE = 128


def time_s(fn, reps: int, min_warm_s: float = 0.2) -> float:
    """Median wall time of `reps` calls after at least two calls and `min_warm_s` of warm-up."""
    t0, n = time.perf_counter(), 0
    while n < 2 or time.perf_counter() - t0 < min_warm_s:
        fn()
        n += 1
    ts = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t)
    return statistics.median(ts)


def read_bandwidth(reps: int) -> float:
    """GB/s of a sum over a 1 GiB fp32 buffer (torch's threads, vectorized): the machine's read bandwidth."""
    x = torch.ones(1 << 28, dtype=torch.float32)
    t = time_s(lambda: x.sum(), max(reps, 5))
    return x.numel() * 4 / t / 1e9


def sdpa(qf, kf, vf, causal):
    """torch SDPA on [B, H, S, D] tensors (GQA by enable_gqa)."""
    gqa = qf.shape[1] != kf.shape[1]
    return lambda: torch.nn.functional.scaled_dot_product_attention(qf, kf, vf, is_causal=causal, enable_gqa=gqa)


def bench_dense(shape, args) -> dict:
    B, H, Hkv, S, D, causal = shape
    g = torch.Generator().manual_seed(0)
    q8, k8, v8 = (torch.randn(B, S, h, D, generator=g).to(FN) for h in (H, Hkv, Hkv))
    flops = 4 * B * H * D * (S * (S + 1) / 2 if causal else S * S)
    ref = ideal(q8.float(), k8.float(), v8.float(), causal, 1 / math.sqrt(D))
    out = torch.empty(B, S, H, D, dtype=FN)
    call = dict(causal=causal, p_scale=torch.tensor([P_SCALE]), out_scale=torch.tensor([OUT_SCALE]), out=out)
    row = dict(kind="prefill", B=B, H=H, Hkv=Hkv, Sq=S, Sk=S, D=D, causal=causal)
    t = time_s(lambda: fp8attn.forward(q8, k8, v8, **call), args.reps)
    row.update(fp8attn_ms=t * 1e3, fp8attn=flops / t / 1e9, fp8attn_err=rel_err(out[0, :, :2].float() * OUT_SCALE, ref))
    for name, dt in (("sdpa_fp32", torch.float32), ("sdpa_bf16", torch.bfloat16)):
        qf, kf, vf = (x.to(dt).transpose(1, 2).contiguous() for x in (q8, k8, v8))
        f = sdpa(qf, kf, vf, causal)
        t = time_s(f, args.reps)
        row.update({f"{name}_ms": t * 1e3, name: flops / t / 1e9,
                    f"{name}_err": rel_err(f()[0, :2].transpose(0, 1).float(), ref)})
    row["target"] = "fp8attn_ms <= sdpa_fp32_ms"
    row["met"] = row["fp8attn_ms"] <= row["sdpa_fp32_ms"]
    return row


def bench_varlen(cfg, args) -> dict:
    H, Hkv, D, lens = cfg
    g = torch.Generator().manual_seed(1)
    T = sum(lens)
    q8, k8, v8 = (torch.randn(T, h, D, generator=g).to(FN) for h in (H, Hkv, Hkv))
    cu = torch.tensor([0, *torch.tensor(lens).cumsum(0).tolist()], dtype=torch.int32)
    out = torch.empty(T, H, D, dtype=FN)
    call = dict(cu_seqlens_q=cu, cu_seqlens_k=cu, max_seqlen_q=max(lens), max_seqlen_k=max(lens), causal=True,
                p_scale=torch.tensor([P_SCALE]), out_scale=torch.tensor([OUT_SCALE]), out=out)
    flops = sum(4 * H * D * n * (n + 1) / 2 for n in lens)
    t = time_s(lambda: fp8attn.forward(q8, k8, v8, **call), args.reps)
    n0 = lens[0]
    ref = ideal(q8[:n0].float()[None], k8[:n0].float()[None], v8[:n0].float()[None], True, 1 / math.sqrt(D))
    row = dict(kind="varlen", B=len(lens), H=H, Hkv=Hkv, Sq=max(lens), Sk=max(lens), D=D, causal=True,
               lens=lens, fp8attn_ms=t * 1e3, fp8attn=flops / t / 1e9,
               fp8attn_err=rel_err(out[:n0, :2].float() * OUT_SCALE, ref))
    # SDPA has no varlen form: one call per sequence, as a caller without fp8attn would do.
    seqs = [(x.float().transpose(0, 1)[None].contiguous() for x in (q8[a:b], k8[a:b], v8[a:b]))
            for a, b in zip(cu[:-1].tolist(), cu[1:].tolist(), strict=True)]
    calls = [sdpa(*s, True) for s in seqs]
    t = time_s(lambda: [c() for c in calls], args.reps)
    row.update(sdpa_fp32_ms=t * 1e3, sdpa_fp32=flops / t / 1e9)
    return row


def vllm_cpu_attn(w: Workload):
    """vLLM's CPU_ATTN on workload `w`: its own cache ([blocks, Hkv, 2·block, D], written by its cache op
    from the bf16 values of w's FP8 codes, so both caches hold the same codes), its scheduler metadata
    built once (as vLLM's metadata builder does per batch), bf16 q and output. Returns (call, out)."""
    import vllm._custom_ops as ops
    from vllm import envs
    from vllm.v1.attention.backends.cpu_attn import _get_attn_isa

    kw = w.kwargs
    nb, bs, Hkv, D = w.key_cache.shape
    T, H, _ = w.q.shape
    isa = _get_attn_isa(torch.bfloat16, bs, D, "fp8")
    cache = torch.zeros(nb, Hkv, 2 * bs, D, dtype=torch.uint8)
    kc, vc = cache.chunk(2, dim=2)
    slots, keys, values = [], [], []
    for b, (_, n) in enumerate(w.seqs):
        i = torch.arange(n)
        slots.append(kw["block_table"][b, i // bs].long() * bs + i % bs)
        keys.append(sequence_rows(w.key_cache, kw["block_table"][b], n).float() * kw["k_descale"])
        values.append(sequence_rows(w.value_cache, kw["block_table"][b], n).float() * kw["v_descale"])
    ks, vs = float(kw["k_descale"]), float(kw["v_descale"])
    ops.cpu_attn_reshape_and_cache(torch.cat(keys).to(torch.bfloat16), torch.cat(values).to(torch.bfloat16), kc, vc,
                                   torch.cat(slots), isa, k_scale=ks, v_scale=vs, kv_cache_dtype="fp8")
    meta = ops.cpu_attn_get_scheduler_metadata(len(w.seqs), H, Hkv, D, kw["seqused_k"], torch.bfloat16,
                                               kw["cu_seqlens_q"], True, -1, isa, envs.VLLM_CPU_ATTN_SPLIT_KV,
                                               kv_cache_dtype="fp8")
    out = torch.zeros(T, H, D, dtype=torch.bfloat16)

    def call():
        ops.cpu_attention_with_kv_cache(w.q, kc, vc, out, kw["cu_seqlens_q"], kw["seqused_k"], 1 / math.sqrt(D),
                                        True, None, -1, kw["block_table"], 0.0, meta, None, k_scale=ks, v_scale=vs,
                                        kv_cache_dtype="fp8")
    return call, out


def workload_ref(w: Workload) -> tuple[torch.Tensor, slice]:
    """fp64 attention of the workload's first sequence on its real inputs (bf16 q, dequantized K/V): its
    first two q heads, and that sequence's rows of the output."""
    kw = w.kwargs
    n_q, n_k = w.seqs[0]
    k = sequence_rows(w.key_cache, kw["block_table"][0], n_k).float() * kw["k_descale"]
    v = sequence_rows(w.value_cache, kw["block_table"][0], n_k).float() * kw["v_descale"]
    return ideal(w.q[:n_q].float()[None], k[None], v[None], True, 1 / math.sqrt(w.q.shape[-1])), slice(0, n_q)


def bench_workload(w: Workload, kind: str, args, peers: list[str]) -> dict:
    """fp8attn (bf16 output, like CPU_ATTN; and FP8 output) and CPU_ATTN on one paged workload."""
    T, H, D = w.q.shape
    ref, rows = workload_ref(w)
    out = torch.empty(T, H, D, dtype=torch.bfloat16)
    t = time_s(lambda: fp8attn.forward(w.q, w.key_cache, w.value_cache, out=out, **w.kwargs), args.reps)
    osc = (out.float().abs().amax() / 448.0).reshape(1)  # the output scale a calibration pass would give
    out8 = torch.empty(T, H, D, dtype=FN)
    t8 = time_s(lambda: fp8attn.forward(w.q, w.key_cache, w.value_cache, out=out8, out_scale=osc, **w.kwargs),
                args.reps)
    Hkv = w.key_cache.shape[2]
    row = dict(kind=kind, B=len(w.seqs), H=H, Hkv=Hkv, D=D, page=w.key_cache.shape[1], seqs=w.seqs,
               flops=w.flops, kv_bytes=w.kv_bytes, fp8attn_ms=t * 1e3, fp8attn_err=rel_err(out[rows, :2].float(), ref),
               fp8attn_fp8out_ms=t8 * 1e3, fp8attn_fp8out_err=rel_err(out8[rows, :2].float() * osc, ref))
    if "cpu_attn" in peers:
        call, vout = vllm_cpu_attn(w)
        tv = time_s(call, args.reps)
        row.update(cpu_attn_ms=tv * 1e3, cpu_attn_err=rel_err(vout[rows, :2].float(), ref))
        row["target"] = "fp8attn_ms <= cpu_attn_ms"
        row["met"] = row["fp8attn_ms"] <= row["cpu_attn_ms"]
    for name in ("fp8attn", "fp8attn_fp8out", "cpu_attn"):
        if f"{name}_ms" in row:
            row[f"{name}_gbs"] = w.kv_bytes / (row[f"{name}_ms"] / 1e3) / 1e9
    return row


def bench_decode(cfg, args, peers, bandwidth) -> dict:
    B, ctx = cfg
    w = llama_batch([(1, ctx)] * B, block_size=PAGE, seed=2)
    row = bench_workload(w, "decode", args, peers)
    row.update(Sq=1, Sk=ctx, bandwidth_fraction=row["fp8attn_gbs"] / bandwidth)
    H, Hkv, D = row["H"], row["Hkv"], row["D"]
    g = torch.Generator().manual_seed(3)
    q = torch.randn(B, H, 1, D, generator=g)
    for name, dt in (("sdpa_fp32", torch.float32), ("sdpa_bf16", torch.bfloat16)):
        k, v = (torch.randn(B, Hkv, ctx, D, generator=g).to(dt) for _ in range(2))
        t = time_s(sdpa(q.to(dt), k, v, False), args.reps)
        row.update({f"{name}_ms": t * 1e3, f"{name}_gbs": 2 * k.numel() * k.element_size() / t / 1e9})
        del k, v
    return row


def peers_available() -> list[str]:
    peers = ["sdpa_fp32", "sdpa_bf16"]
    try:
        import vllm._custom_ops  # noqa: F401
        from vllm.v1.attention.backends.cpu_attn import _get_attn_isa  # noqa: F401
        # CPU_ATTN runs AMX tiles where the CPU has them: the process asks the OS for their state first, as
        # vLLM's CPU worker (through oneDNN) does; without it the first tile instruction kills the process.
        torch.cpu._init_amx()
        peers.append("cpu_attn")
    except Exception:  # noqa: BLE001
        pass
    return peers


def environment(peers: list[str], bandwidth: float) -> dict:
    """CPU, instruction set, threads, software and commit (fp8attn.build_commit) of a run."""
    info = {}
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, val = line.partition(":")
                info.setdefault(key.strip(), val.strip())
    except OSError:
        pass
    flags = set(info.get("flags", "").split())
    commit = fp8attn.build_commit()
    env = dict(date=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
               cpu=info.get("model name", platform.processor()), cpu_family=info.get("cpu family"),
               cpu_model=info.get("model"), cores=os.cpu_count(), threads=torch.get_num_threads(),
               flags=sorted(f for f in flags if f.startswith(("avx", "amx", "fma", "f16c"))),
               fp8attn_isa=torch.ops.fp8attn.cpu_isa(), fp8attn_isas=list(torch.ops.fp8attn.cpu_isas()),
               fp8attn=fp8attn.__version__, fp8attn_path=os.path.dirname(os.path.abspath(fp8attn.__file__)),
               commit=commit, torch=torch.__version__, python=platform.python_version(),
               read_bandwidth_gbs=bandwidth, peers=peers)
    if "cpu_attn" in peers:
        import vllm
        env["vllm"] = vllm.__version__
    return env


def md_table(columns: list[tuple[str, object]], rows: list[dict]) -> list[str]:
    """A markdown table: each column a header and a function of the row giving its cell."""
    lines = ["| " + " | ".join(h for h, _ in columns) + " |", "|---" * len(columns) + "|"]
    return lines + ["| " + " | ".join(str(cell(r)) for _, cell in columns) + " |" for r in rows]


def verdict(ok: bool | None) -> str:
    return "-" if ok is None else ("yes" if ok else "**no**")


def col(key: str, nd: int = 1):
    return lambda r: fmt(r.get(key), nd)


def table(rows: list[dict], env: dict) -> str:
    lines = []
    pre = [r for r in rows if r["kind"] in ("prefill", "varlen")]
    if pre:
        lines += md_table([
            ("kind", lambda r: r["kind"]), ("B", lambda r: r["B"]), ("H/Hkv", lambda r: f"{r['H']}/{r['Hkv']}"),
            ("S", lambda r: r["Sq"]), ("D", lambda r: r["D"]), ("causal", lambda r: r["causal"]),
            ("fp8attn ms", col("fp8attn_ms")), ("SDPA fp32 ms", col("sdpa_fp32_ms")),
            ("SDPA bf16 ms", col("sdpa_bf16_ms")), ("fp8attn GFLOP/s", col("fp8attn", 0)),
            ("SDPA fp32 GFLOP/s", col("sdpa_fp32", 0)), ("fp8attn err", col("fp8attn_err", 4)),
            ("SDPA fp32 err", col("sdpa_fp32_err", 4)), ("fp8attn <= SDPA fp32", lambda r: verdict(r.get("met")))], pre)
        lines += ["", "fp8attn: FP8 Q/K/V, P quantized, FP8 output; SDPA on the dequantized values, [B, H, S, D]. "
                  "GFLOP/s = 4·B·H·D·(visible pairs) / t; err: relative L2 error vs fp64 attention.", ""]
    srv = [r for r in rows if r["kind"] == "serving"]
    if srv:
        lines += md_table([
            ("serving workload (q, k per sequence)", lambda r: f"{r['B']} seqs {r['seqs']}"),
            ("fp8attn ms (bf16 out)", col("fp8attn_ms", 2)), ("fp8attn ms (FP8 out)", col("fp8attn_fp8out_ms", 2)),
            ("vLLM CPU_ATTN ms", col("cpu_attn_ms", 2)), ("fp8attn err", col("fp8attn_err", 4)),
            ("CPU_ATTN err", col("cpu_attn_err", 4)),
            ("fp8attn <= CPU_ATTN", lambda r: verdict(r.get("met")))], srv)
        lines += ["", f"Per attention call (one layer): paged FP8 KV cache of block {PAGE}, bf16 q, 32 q / 8 kv "
                  "heads, D 128; CPU_ATTN's scheduler metadata is built once per batch, outside the timing.", ""]
    dec = [r for r in rows if r["kind"] == "decode"]
    if dec:
        lines += md_table([
            ("decode B", lambda r: r["B"]), ("context", lambda r: r["Sk"]), ("fp8attn ms", col("fp8attn_ms", 2)),
            ("fp8attn GB/s", col("fp8attn_gbs")), ("of read bandwidth", lambda r: f"{r['bandwidth_fraction']:.0%}"),
            ("CPU_ATTN ms", col("cpu_attn_ms", 2)), ("CPU_ATTN GB/s", col("cpu_attn_gbs")),
            ("SDPA bf16 ms", col("sdpa_bf16_ms", 2)), ("SDPA fp32 ms", col("sdpa_fp32_ms", 2)),
            ("fp8attn err", col("fp8attn_err", 4))], dec)
        lines += ["", f"q_len 1, 32 q / 8 kv heads, D 128, paged FP8 KV (block {PAGE}); GB/s of K+V read. The "
                  f"machine's read bandwidth in this run: {env['read_bandwidth_gbs']:.1f} GB/s (a sum over 1 GiB on "
                  f"{env['threads']} threads). SDPA reads dense bf16 / fp32 K/V.", ""]
    return "\n".join(lines)


def run(args) -> int:
    """Run the CPU benchmark with the parsed command line (:func:`fp8attn.bench.main`)."""
    if not hasattr(torch.ops.fp8attn, "cpu_isa"):
        print(f"fp8attn at {fp8attn.__file__} has no CPU dispatch (an older build): run from the checkout")
        return 1
    peers = peers_available()
    work = [("bandwidth", None)]
    work += [("prefill", s) for s in DENSE] + [("varlen", c) for c in ([] if args.quick else VARLEN)]
    work += [("serving", None)] + [("decode", c) for c in (DECODE_QUICK if args.quick else DECODE)]
    rows, bandwidth = [], 0.0
    for i, (kind, cfg) in enumerate(work):
        progress(i, len(work), f"{kind} {cfg or ''}")
        try:
            if kind == "bandwidth":
                bandwidth = read_bandwidth(args.reps)
            elif kind == "prefill":
                rows.append(bench_dense(cfg, args))
            elif kind == "varlen":
                rows.append(bench_varlen(cfg, args))
            elif kind == "serving":
                rows.append(bench_workload(llama_batch(block_size=PAGE), "serving", args, peers))
            else:
                rows.append(bench_decode(cfg, args, peers, bandwidth))
        except Exception as e:  # noqa: BLE001
            rows.append(dict(kind=kind, cfg=str(cfg), error=repr(e)[:300]))
    env = environment(peers, bandwidth)
    ok = [r for r in rows if "error" not in r]
    md = f"# fp8attn CPU benchmark\n\n{json.dumps(env)}\n\n" + table(ok, env)
    errs = [r for r in rows if "error" in r]
    if errs:
        md += "\n\nErrors:\n" + "\n".join(f"- {r}" for r in errs)
    print(md)
    os.makedirs(args.out_dir, exist_ok=True)
    with open(os.path.join(args.out_dir, "bench-cpu.json"), "w") as f:
        json.dump(dict(env=env, rows=rows), f, indent=1)
    with open(os.path.join(args.out_dir, "bench-cpu.md"), "w") as f:
        f.write(md + "\n")
    return 0
