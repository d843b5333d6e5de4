"""Where a decode call's time goes: kernel durations and the gaps between them, inside CUDA-graph
replays of back-to-back calls (as fp8attn.bench times decode), from torch.profiler's CUPTI records.

    python3 lab/scripts/decode_timeline.py [--shapes B,ctx,Hq,Hkv,D,qlen ...] [--calls 20] [--out FILE]

Per shape: the per-call time (graph replay / calls), then each kernel of a call (by name) with its
mean duration, and the mean gap from the previous kernel's end to its start (negative: they overlap,
as a programmatic dependent launch allows).
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import tempfile

import torch

import fp8attn

FN = torch.float8_e4m3fn
DEFAULT = ["1,32768,32,8,128,1", "8,8192,32,8,128,1", "1,1024,32,8,128,1", "8,8192,32,8,128,4"]


def make_call(B: int, ctx: int, H: int, Hkv: int, D: int, qlen: int, page: int = 16):
    gen = torch.Generator(device="cuda").manual_seed(2)
    nb = B * ctx // page
    kc = torch.randn(nb, page, Hkv, D, device="cuda", generator=gen).to(FN)
    vc = torch.randn(nb, page, Hkv, D, device="cuda", generator=gen).to(FN)
    bt = torch.randperm(nb, device="cuda", generator=gen).to(torch.int32).view(B, ctx // page)
    seqused = torch.full((B,), ctx, dtype=torch.int32, device="cuda")
    q8 = torch.randn(B * qlen, H, D, device="cuda", generator=gen).to(FN)
    cu_q = torch.arange(0, B * qlen + 1, qlen, dtype=torch.int32, device="cuda")
    ps, osc = torch.tensor([1.0 / 448], device="cuda"), torch.tensor([0.05], device="cuda")
    out = torch.empty(B * qlen, H, D, device="cuda", dtype=FN)
    return lambda: fp8attn.forward(q8, kc, vc, cu_seqlens_q=cu_q, max_seqlen_q=qlen, max_seqlen_k=ctx,
                                   seqused_k=seqused, block_table=bt, causal=True, p_scale=ps, out_scale=osc, out=out)


def timeline(fn, calls: int, replays: int) -> dict:
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(calls):
            fn()
    for _ in range(50):
        graph.replay()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(200):
        graph.replay()
    end.record()
    torch.cuda.synchronize()
    per_call_us = start.elapsed_time(end) * 1e3 / (200 * calls)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(replays):
            graph.replay()
        torch.cuda.synchronize()
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "trace.json")
        prof.export_chrome_trace(path)
        with open(path) as f:
            events = json.load(f)["traceEvents"]
    kernels = sorted((e for e in events if e.get("cat") == "kernel"), key=lambda e: e["ts"])
    dur, gap = collections.defaultdict(list), collections.defaultdict(list)
    for prev, cur in zip(kernels, kernels[1:], strict=False):
        gap[cur["name"]].append(cur["ts"] - (prev["ts"] + prev["dur"]))
    for e in kernels:
        dur[e["name"]].append(e["dur"])
    mean = lambda xs: sum(xs) / len(xs) if xs else float("nan")  # noqa: E731
    return dict(per_call_us=per_call_us, kernels_per_call=len(kernels) / (replays * calls),
                kernels={n[:90]: dict(n=len(v), dur_us=mean(v), gap_us=mean(gap[n])) for n, v in dur.items()})


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shapes", nargs="*", default=DEFAULT)
    ap.add_argument("--calls", type=int, default=20)
    ap.add_argument("--replays", type=int, default=5)
    ap.add_argument("--out")
    args = ap.parse_args()
    res = {}
    for spec in args.shapes:
        B, ctx, H, Hkv, D, qlen = (int(x) for x in spec.split(","))
        r = timeline(make_call(B, ctx, H, Hkv, D, qlen), args.calls, args.replays)
        kv_mb = 2 * B * ctx * Hkv * D / 1e6
        print(f"{spec}: {r['per_call_us']:.1f} us/call ({kv_mb / r['per_call_us']:.0f} GB/s), "
              f"{r['kernels_per_call']:.2f} kernels/call")
        for name, k in r["kernels"].items():
            print(f"    {k['dur_us']:7.2f} us  gap {k['gap_us']:6.2f} us  x{k['n']:<5d} {name}")
        res[spec] = r
    if args.out:
        with open(args.out, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
