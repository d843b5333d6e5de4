"""The GPU benchmark: ``python -m fp8attn.bench [--out-dir DIR] [--quick] [--only KIND] [--peers LIST]
[--fa3-peer PATH]``.

Prefill shapes of docs/design.md §5, GQA variants (32 q / 8 kv heads), varlen batches, and decode
(batch 1-64, context 1k-32k, paged FP8 KV), with the peers that import on this machine side by
side in the same run: torch SDPA bf16 (flash and cuDNN backends), cuDNN's FP8 SDPA through
``nvidia-cudnn-frontend`` (descale q/k/v, scale_s = 1/p_scale, scale_o = 1/out_scale), FlashAttention-3
FP8 from a ``fa3_peer`` binary when --fa3-peer names one (:mod:`fp8attn.bench.fa3`: its prefill rows and
its paged FP8-KV decode, bf16 output, P without a scale; timed by the binary as this module times), and
fp8attn (FP8 Q/K/V, P quantized with p_scale, FP8 output with out_scale).

Timing: CUDA events around each call, median of --reps timed calls after --warmup calls. Decode
calls last microseconds, less than the host's launch overhead, so decode is timed (every peer
alike) as CUDA-graph replays of 20 back-to-back calls, as servers run decode; fp8attn's eager
figure is kept in the JSON (fp8attn_eager).
Prefill: TFLOP/s = 4·B·H·Sq·Sk·D / t (halved for causal). Decode: GB/s of K+V read.
Accuracy: relative L2 error of the dequantized output against fp64 attention on the same
(dequantized) inputs, on the first heads of the first batch. Writes bench.json, bench.md and
bench.png to --out-dir.
"""
from __future__ import annotations

import datetime
import json
import math
import os
import platform
import warnings

import torch

import fp8attn

from . import fa3
from .common import FN, OUT_SCALE, P_SCALE, fmt, ideal, progress, rel_err

PREFILL = [  # B, Hq, Hkv, S, D, causal
    (1, 32, 32, 8192, 128, False), (1, 32, 32, 8192, 128, True), (4, 32, 32, 2048, 128, True),
    (1, 32, 32, 8192, 64, False), (1, 32, 32, 8192, 256, False), (16, 32, 32, 512, 128, True),
    (1, 32, 8, 8192, 128, True), (4, 32, 8, 2048, 128, True),
]
# Hq, Hkv, D, lengths, page (0: K/V packed like q; > 0: a paged cache of that block size, as vLLM prefills)
VARLEN = [
    (32, 8, 128, [512, 1024, 2048, 3000, 777, 4096, 128, 1500], 0),
    (32, 8, 128, [512, 1024, 2048, 3000, 777, 4096, 128, 1500], 16),
]
PREFILL_KINDS = ("prefill", "varlen", "varlen paged")  # rows reported in TFLOP/s
DECODE = [  # B, ctx, Hq, Hkv, D, q_len
    (1, 32768, 32, 8, 128, 1), (8, 8192, 32, 8, 128, 1), (32, 8192, 32, 8, 128, 1), (64, 4096, 32, 8, 128, 1),
    (128, 2048, 32, 8, 128, 1), (1, 1024, 32, 8, 128, 1), (16, 16384, 32, 8, 128, 1), (8, 8192, 32, 8, 128, 4),
]




def time_ms(fn, warmup, reps, min_warm_ms=200.0):
    """Median of `reps` event-timed calls after at least `warmup` calls and `min_warm_ms` of warm-up
    (an idle GPU starts at a low clock)."""
    w0, w1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    w0.record()
    n = 0
    while True:
        fn()
        n += 1
        if n >= warmup and n % 8 == 0:
            w1.record()
            torch.cuda.synchronize()
            if w0.elapsed_time(w1) >= min_warm_ms:
                break
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    for s, e in zip(starts, ends, strict=True):
        s.record()
        fn()
        e.record()
    torch.cuda.synchronize()
    t = sorted(s.elapsed_time(e) for s, e in zip(starts, ends, strict=True))
    return t[len(t) // 2]


def graph_time_ms(fn, warmup, reps, calls=20):
    """Per-call time of CUDA-graph replays of `calls` back-to-back calls (no host launch overhead)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(max(warmup, 3)):  # lazy initialization outside the capture
            fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(calls):
            fn()
    return time_ms(graph.replay, warmup, reps) / calls






def cudnn_fp8_runner(q8, k8, v8, causal, scale):
    """cuDNN FP8 SDPA on [B, H, S, D] FP8 tensors (descales for q, k, v; scale_s = 1/p_scale; scale_o = 1/out_scale).

    Returns (fn, out, scale_o)."""
    import cudnn
    B, H, S, D = q8.shape
    o8 = torch.empty_like(q8)
    sc = {nm: torch.ones(1, 1, 1, 1, device="cuda", dtype=torch.float32) for nm in ["dq", "dk", "dv", "ds", "ss", "so"]}
    sc["ss"].fill_(1 / P_SCALE)
    sc["ds"].fill_(P_SCALE)
    sc["so"].fill_(1 / OUT_SCALE)
    amax_s = torch.empty(1, 1, 1, 1, device="cuda")
    amax_o = torch.empty(1, 1, 1, 1, device="cuda")
    g = cudnn.pygraph(io_data_type=cudnn.data_type.FP8_E4M3, intermediate_data_type=cudnn.data_type.FLOAT,
                      compute_data_type=cudnn.data_type.FLOAT)
    tq, tk, tv = (g.tensor_like(x) for x in (q8, k8, v8))
    for x in (tq, tk, tv):
        x.set_data_type(cudnn.data_type.FP8_E4M3)
    ts = {nm: g.tensor_like(t_) for nm, t_ in sc.items()}
    o, _, a_s, a_o = g.sdpa_fp8(tq, tk, tv, ts["dq"], ts["dk"], ts["dv"], ts["ds"], ts["ss"], ts["so"],
                                is_inference=True, attn_scale=scale, use_causal_mask=causal)
    o.set_output(True).set_dim(list(o8.shape)).set_stride(list(o8.stride())).set_data_type(cudnn.data_type.FP8_E4M3)
    for a in (a_s, a_o):
        a.set_output(True).set_dim([1, 1, 1, 1]).set_stride([1, 1, 1, 1]).set_data_type(cudnn.data_type.FLOAT)
    g.validate()
    g.build_operation_graph()
    g.create_execution_plans([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
    g.check_support()
    g.build_plans()
    ws = torch.empty(g.get_workspace_size(), device="cuda", dtype=torch.uint8)
    pack = {tq: q8, tk: k8, tv: v8, o: o8, a_s: amax_s, a_o: amax_o}
    for nm in sc:
        pack[ts[nm]] = sc[nm]
    return (lambda: g.execute(pack, ws)), o8


def sdpa_runner(qb, kb, vb, causal, backend):
    from torch.nn.attention import SDPBackend, sdpa_kernel
    be = {"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION}[backend]
    gqa = qb.shape[1] != kb.shape[1]

    def fn():
        with sdpa_kernel(be):
            return torch.nn.functional.scaled_dot_product_attention(qb, kb, vb, is_causal=causal, enable_gqa=gqa)
    return fn


def bench_prefill(shape, args, peers):
    B, H, Hkv, S, D, causal = shape
    gen = torch.Generator(device="cuda").manual_seed(0)
    q = torch.randn(B, S, H, D, device="cuda", generator=gen)
    k = torch.randn(B, S, Hkv, D, device="cuda", generator=gen)
    v = torch.randn(B, S, Hkv, D, device="cuda", generator=gen)
    q8, k8, v8 = q.to(FN), k.to(FN), v.to(FN)
    scale = 1.0 / math.sqrt(D)
    flops = 4 * B * H * S * S * D * (0.5 if causal else 1.0)
    ref = ideal(q8.float(), k8.float(), v8.float(), causal, scale)
    row = dict(kind="prefill", B=B, H=H, Hkv=Hkv, Sq=S, Sk=S, D=D, causal=causal)
    ps, osc = torch.tensor([P_SCALE], device="cuda"), torch.tensor([OUT_SCALE], device="cuda")
    out = torch.empty(B, S, H, D, device="cuda", dtype=FN)
    call = dict(causal=causal, p_scale=ps, out_scale=osc, out=out, kv_tile=args.kv_tile)
    fn = lambda: fp8attn.forward(q8, k8, v8, **call)  # noqa: E731
    t = time_ms(fn, args.warmup, args.reps)
    row["kernel"] = fp8attn.kernel_name(q8, k8, v8, **call)
    row["fp8attn"] = flops / t / 1e9
    row["fp8attn_ms"] = t
    row["fp8attn_err"] = rel_err(out[0, :, :2].float() * OUT_SCALE, ref)
    qb, kb, vb = (x.float().to(torch.bfloat16).transpose(1, 2) for x in (q8, k8, v8))
    for name in ("flash", "cudnn"):
        if name not in peers:
            continue
        try:
            f = sdpa_runner(qb, kb, vb, causal, name)
            t = time_ms(f, args.warmup, args.reps)
            row[f"sdpa_{name}"] = flops / t / 1e9
            row[f"sdpa_{name}_err"] = rel_err(f()[0, :2].transpose(0, 1).float(), ref)
        except Exception as e:  # noqa: BLE001
            row[f"sdpa_{name}"] = None
            row[f"sdpa_{name}_note"] = repr(e)[:120]
    if "cudnn_fp8" in peers and H == Hkv:
        try:
            f, o8 = cudnn_fp8_runner(*(x.transpose(1, 2).contiguous() for x in (q8, k8, v8)), causal, scale)
            t = time_ms(f, args.warmup, args.reps)
            row["cudnn_fp8"] = flops / t / 1e9
            row["cudnn_fp8_err"] = rel_err(o8[0, :2].transpose(0, 1).float() * OUT_SCALE, ref)
        except Exception as e:  # noqa: BLE001
            row["cudnn_fp8"] = None
            row["cudnn_fp8_note"] = repr(e)[:160]
    return row


def paged_cache(xs: list[torch.Tensor], lens: list[int], page: int, gen: torch.Generator):
    """Tensors [T, Hkv, D] packed by sequence -> their paged caches [blocks, page, Hkv, D] (blocks in
    shuffled order, one block table for all of them) and that table [B, max blocks]."""
    per = [(n + page - 1) // page for n in lens]
    order = torch.randperm(sum(per), device=xs[0].device, generator=gen)
    table = torch.zeros(len(lens), max(per), dtype=torch.int32, device=xs[0].device)
    caches = [torch.zeros(sum(per), page, *x.shape[1:], device=x.device, dtype=x.dtype) for x in xs]
    start = blk = 0
    for b, (n, nb) in enumerate(zip(lens, per, strict=True)):
        ids = order[blk: blk + nb]
        table[b, :nb] = ids.to(torch.int32)
        for x, cache in zip(xs, caches, strict=True):
            padded = torch.zeros(nb * page, *x.shape[1:], device=x.device, dtype=x.dtype)
            padded[:n] = x[start: start + n]
            cache[ids] = padded.view(nb, page, *x.shape[1:])
        start, blk = start + n, blk + nb
    return caches, table


def bench_varlen(cfg, args, peers):
    H, Hkv, D, lens, page = cfg
    gen = torch.Generator(device="cuda").manual_seed(1)
    T = sum(lens)
    q8 = torch.randn(T, H, D, device="cuda", generator=gen).to(FN)
    k8 = torch.randn(T, Hkv, D, device="cuda", generator=gen).to(FN)
    v8 = torch.randn(T, Hkv, D, device="cuda", generator=gen).to(FN)
    cu = torch.tensor([0] + list(torch.tensor(lens).cumsum(0)), dtype=torch.int32, device="cuda")
    flops = sum(4 * H * n * n * D * 0.5 for n in lens)
    ps, osc = torch.tensor([P_SCALE], device="cuda"), torch.tensor([OUT_SCALE], device="cuda")
    out = torch.empty(T, H, D, device="cuda", dtype=FN)
    kv = dict(k=k8, v=v8, cu_seqlens_k=cu)
    if page:
        (kc, vc), bt = paged_cache([k8, v8], lens, page, gen)
        kv = dict(k=kc, v=vc, seqused_k=torch.tensor(lens, dtype=torch.int32, device="cuda"), block_table=bt)
    call = dict(cu_seqlens_q=cu, max_seqlen_q=max(lens), max_seqlen_k=max(lens), causal=True, p_scale=ps,
                out_scale=osc, out=out, kv_tile=args.kv_tile, **{n: t for n, t in kv.items() if n not in ("k", "v")})
    fn = lambda: fp8attn.forward(q8, kv["k"], kv["v"], **call)  # noqa: E731
    t = time_ms(fn, args.warmup, args.reps)
    n0 = lens[0]
    ref = ideal(q8[:n0].float()[None], k8[:n0].float()[None], v8[:n0].float()[None], True, 1 / math.sqrt(D))
    row = dict(kind="varlen paged" if page else "varlen", B=len(lens), H=H, Hkv=Hkv, Sq=max(lens), Sk=max(lens),
               D=D, causal=True, fp8attn=flops / t / 1e9, fp8attn_ms=t,
               fp8attn_err=rel_err(out[:n0, :2].float() * OUT_SCALE, ref),
               kernel=fp8attn.kernel_name(q8, kv["k"], kv["v"], **call))
    return row


def paged_decode_case(B, ctx, H, Hkv, D, qlen, page=16):
    """One decode call as the benchmark times it: q [B*qlen, H, D] and a paged FP8 K/V cache of `page`-token
    blocks (shuffled block table, every sequence ctx keys), as (q, k cache, v cache, forward's keywords)."""
    gen = torch.Generator(device="cuda").manual_seed(2)
    nb = B * ctx // page
    kc = torch.randn(nb, page, Hkv, D, device="cuda", generator=gen).to(FN)
    vc = torch.randn(nb, page, Hkv, D, device="cuda", generator=gen).to(FN)
    bt = torch.randperm(nb, device="cuda", generator=gen).to(torch.int32).view(B, ctx // page)
    seqused = torch.full((B,), ctx, dtype=torch.int32, device="cuda")
    q8 = torch.randn(B * qlen, H, D, device="cuda", generator=gen).to(FN)
    cu_q = torch.arange(0, B * qlen + 1, qlen, dtype=torch.int32, device="cuda")
    ps, osc = torch.tensor([P_SCALE], device="cuda"), torch.tensor([OUT_SCALE], device="cuda")
    out = torch.empty(B * qlen, H, D, device="cuda", dtype=FN)
    return q8, kc, vc, dict(cu_seqlens_q=cu_q, max_seqlen_q=qlen, max_seqlen_k=ctx, seqused_k=seqused,
                            block_table=bt, causal=True, p_scale=ps, out_scale=osc, out=out)


def bench_decode(cfg, args, peers):
    B, ctx, H, Hkv, D, qlen = cfg
    q8, kc, vc, call = paged_decode_case(B, ctx, H, Hkv, D, qlen)
    bt, out = call["block_table"], call["out"]
    fn = lambda: fp8attn.forward(q8, kc, vc, **call)  # noqa: E731
    t_eager = time_ms(fn, args.warmup, args.reps)
    t = graph_time_ms(fn, args.warmup, args.reps)
    kv_bytes = 2 * B * ctx * Hkv * D
    row = dict(kind="decode", B=B, H=H, Hkv=Hkv, Sq=qlen, Sk=ctx, D=D, causal=True, fp8attn=kv_bytes / t / 1e6,
               fp8attn_ms=t, fp8attn_eager=kv_bytes / t_eager / 1e6, timing="cuda-graph",
               kernel=fp8attn.kernel_name(q8, kc, vc, **call))
    k0 = kc[bt[0].long()].reshape(1, ctx, Hkv, D).float()
    v0 = vc[bt[0].long()].reshape(1, ctx, Hkv, D).float()
    ref = ideal(q8[:qlen].float()[None], k0, v0, True, 1 / math.sqrt(D))
    row["fp8attn_err"] = rel_err(out[:qlen, :2].float() * OUT_SCALE, ref)
    # peers: SDPA bf16 on dense [B, H, S, D] K/V (2 bytes per element)
    qb = q8.float().to(torch.bfloat16).view(B, qlen, H, D).transpose(1, 2)
    kb = torch.randn(B, Hkv, ctx, D, device="cuda", dtype=torch.bfloat16)
    vb = torch.randn(B, Hkv, ctx, D, device="cuda", dtype=torch.bfloat16)
    for name in ("flash", "cudnn"):
        if name not in peers:
            continue
        try:
            f = sdpa_runner(qb, kb, vb, qlen > 1, name)
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                t = graph_time_ms(f, args.warmup, args.reps)
            # torch disables cuDNN attention for some calls under graph capture and says so only in a warning;
            # the graph then times something else (at q_len 4: "beyond HBM bandwidth"), so no figure is kept.
            disabled = [str(w.message) for w in caught if "disabled" in str(w.message)]
            if disabled:
                raise RuntimeError(disabled[0])
            row[f"sdpa_{name}"] = 2 * kv_bytes / t / 1e6
        except Exception as e:  # noqa: BLE001
            row[f"sdpa_{name}"] = None
            row[f"sdpa_{name}_note"] = repr(e)[:120]
    del kb, vb
    return row


def copy_bandwidth(args) -> float:
    """The card's device-to-device copy bandwidth in GB/s (bytes read + written: docs/design.md §5's yardstick for
    decode), a 1 GiB copy timed like the decode rows (graph replay)."""
    src = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    t = graph_time_ms(lambda: dst.copy_(src), args.warmup, args.reps, calls=4)
    return 2 * src.numel() / t / 1e6


def peers_available(fa3_peer: str | None) -> list[str]:
    """The peers this machine can run: SDPA's flash and cuDNN backends, cuDNN FP8 where its frontend imports,
    FA3 FP8 where a fa3_peer binary is named."""
    peers = ["flash", "cudnn"]
    try:
        import cudnn  # noqa: F401
        peers.append("cudnn_fp8")
    except Exception:  # noqa: BLE001
        pass
    if fa3_peer:
        peers.append("fa3_fp8")
    return peers


def environment():
    """Card, software and commit (fp8attn.build_commit) of a run."""
    commit = fp8attn.build_commit()
    env = dict(date=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
               device=torch.cuda.get_device_name(), torch=torch.__version__, cuda=torch.version.cuda,
               cudnn=torch.backends.cudnn.version(), python=platform.python_version(), commit=commit,
               fp8attn=fp8attn.__version__, sms=torch.cuda.get_device_properties(0).multi_processor_count)
    try:
        import cudnn
        env["cudnn_frontend"] = cudnn.__version__
    except Exception:  # noqa: BLE001
        pass
    return env




def table(rows):
    lines = []
    pre = [r for r in rows if r["kind"] in PREFILL_KINDS]
    if pre:
        lines += ["| kind | B | H/Hkv | S | D | causal | SDPA bf16 flash | SDPA bf16 cuDNN | cuDNN FP8 | FA3 FP8 "
                  "| fp8attn | fp8attn err | cuDNN FP8 err | fp8attn kernel |", "|---" * 14 + "|"]
        for r in pre:
            lines.append(f"| {r['kind']} | {r['B']} | {r['H']}/{r['Hkv']} | {r['Sq']} | {r['D']} | {r['causal']} "
                         f"| {fmt(r.get('sdpa_flash'))} | {fmt(r.get('sdpa_cudnn'))} | {fmt(r.get('cudnn_fp8'))} | "
                         f"{fmt(r.get('fa3_fp8'))} | {fmt(r.get('fp8attn'))} | {fmt(r.get('fp8attn_err'), 4)} "
                         f"| {fmt(r.get('cudnn_fp8_err'), 4)} | {r.get('kernel', '-')} |")
        lines.append("")
        lines.append("TFLOP/s (4·B·H·Sq·Sk·D / t, halved for causal); err = relative L2 error vs fp64. FA3 FP8: "
                     "FlashAttention-3's FP8 forward (fa3_peer; bf16 output; its check: max |err| vs a CPU reference, "
                     "in the JSON).")
        lines.append("")
    dec = [r for r in rows if r["kind"] == "decode"]
    if dec:
        lines += ["| decode B | context | q_len | H/Hkv | D | SDPA bf16 flash | SDPA bf16 cuDNN | FA3 FP8 (paged) "
                  "| fp8attn (paged FP8) | % of copy | FA3 ms | fp8attn ms | err | fp8attn kernel |", "|---" * 14 + "|"]
        for r in dec:
            lines.append(f"| {r['B']} | {r['Sk']} | {r['Sq']} | {r['H']}/{r['Hkv']} | {r['D']} "
                         f"| {fmt(r.get('sdpa_flash'))} | {fmt(r.get('sdpa_cudnn'))} | {fmt(r.get('fa3_fp8'))} "
                         f"| {fmt(r.get('fp8attn'))} | {fmt(r.get('fp8attn_copy_pct'))} "
                         f"| {fmt(r.get('fa3_fp8_ms'), 4)} | {fmt(r.get('fp8attn_ms'), 4)} "
                         f"| {fmt(r.get('fp8attn_err'), 4)} | {r.get('kernel', '-')} |")
        lines.append("")
        lines.append("GB/s of K+V read (bf16 dense for SDPA, FP8 paged for FA3 and fp8attn); CUDA-graph replay of "
                     "20 calls; FA3 FP8 (paged): FlashAttention-3's paged FP8-KV decode as vLLM's FLASH_ATTN backend "
                     "calls it (fa3_peer; scheduler metadata computed once beforehand, as vLLM per step); % of copy: "
                     "fp8attn's GB/s over the card's device-to-device copy bandwidth (the run's copy_gbps).")
    return "\n".join(lines)


def plot(rows, path):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except Exception:  # noqa: BLE001
        return False
    fig, axes = plt.subplots(1, 2, figsize=(15, 5))
    for ax, kinds, unit in ((axes[0], PREFILL_KINDS, "TFLOP/s"), (axes[1], ("decode",), "GB/s")):
        rs = [r for r in rows if r["kind"] in kinds]
        names = [n for n in ("sdpa_flash", "sdpa_cudnn", "cudnn_fp8", "fa3_fp8", "fp8attn")
                 if any(r.get(n) for r in rs)]
        w = 0.8 / max(1, len(names))
        for i, n in enumerate(names):
            ax.bar([x + i * w for x in range(len(rs))], [r.get(n) or 0 for r in rs], w, label=n)
        ax.set_xticks([x + 0.4 - w / 2 for x in range(len(rs))])
        labels = [f"{r['B']}x{r['H']}/{r['Hkv']}\n{r['Sq']}x{r['Sk']} d{r['D']}{' c' if r['causal'] else ''}"
                  for r in rs]
        ax.set_xticklabels(labels, fontsize=6)
        ax.set_ylabel(unit)
        ax.legend(fontsize=7)
    fig.suptitle(f"fp8attn on {torch.cuda.get_device_name()}")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return True


def run(args) -> int:
    """Run the GPU benchmark with the parsed command line (:func:`fp8attn.bench.main`)."""
    if not torch.cuda.is_available():
        print("fp8attn.bench needs a GPU (--device cpu runs the CPU benchmark)")
        return 1
    peers = peers_available(args.fa3_peer)
    if args.peers != "all":
        peers = [p for p in peers if p in args.peers.split(",")]
    work = []
    if args.only in ("prefill", "all"):
        work += [("prefill", s) for s in (PREFILL[:2] if args.quick else PREFILL)]
        work += [("varlen", c) for c in VARLEN]
    if args.only in ("decode", "all"):
        work += [("decode", c) for c in (DECODE[:2] if args.quick else DECODE)]
    fns = dict(prefill=bench_prefill, varlen=bench_varlen, decode=bench_decode)
    rows = []
    for i, (kind, cfg) in enumerate(work):
        progress(i, len(work), f"{kind} {cfg}")
        try:
            rows.append(fns[kind](cfg, args, peers))
        except Exception as e:  # noqa: BLE001
            rows.append(dict(kind=kind, cfg=str(cfg), error=repr(e)[:300]))
        torch.cuda.empty_cache()
    fa3_log = None
    if "fa3_fp8" in peers:  # one run of the binary for all rows, after the others (this process idle meanwhile)
        fa3_rows, fa3_log = fa3.run(args.fa3_peer, args.only)
        fa3.merge(rows, fa3_rows)
    env = environment()
    ok = [r for r in rows if "error" not in r]
    if any(r["kind"] == "decode" for r in ok):
        env["copy_gbps"] = round(copy_bandwidth(args))
        for r in ok:
            if r["kind"] == "decode":
                r["fp8attn_copy_pct"] = 100 * r["fp8attn"] / env["copy_gbps"]
    md = f"# fp8attn benchmark\n\n{json.dumps(env)}\n\n" + table(ok)
    errs = [r for r in rows if "error" in r]
    if fa3_log and fa3_log["rc"] != 0:
        errs.append(dict(fa3_peer=fa3_log["command"], rc=fa3_log["rc"], stderr=fa3_log["stderr"][-3:]))
    errs += [dict(fa3_peer=r["fa3_fp8_note"]) for r in ok if "fa3_fp8_note" in r]
    if errs:
        md += "\n\nErrors:\n" + "\n".join(f"- {r}" for r in errs)
    print(md)
    os.makedirs(args.out_dir, exist_ok=True)
    result = dict(env=env, peers=peers, rows=rows)
    if fa3_log:
        result["fa3_peer"] = fa3_log  # the binary's command, exit code and output
    with open(os.path.join(args.out_dir, "bench.json"), "w") as f:
        json.dump(result, f, indent=1)
    with open(os.path.join(args.out_dir, "bench.md"), "w") as f:
        f.write(md + "\n")
    plot(ok, os.path.join(args.out_dir, "bench.png"))
    return 0

