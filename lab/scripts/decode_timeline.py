"""Where a decode call's time goes: kernel durations and the gaps between them, inside CUDA-graph
replays of back-to-back calls (fp8attn.bench's decode calls, as it times them), from torch.profiler's CUPTI records.

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
from fp8attn.bench.gpu import paged_decode_case

DEFAULT = ["1,32768,32,8,128,1", "8,8192,32,8,128,1", "1,1024,32,8,128,1", "8,8192,32,8,128,4"]


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
        q, k, v, call = paged_decode_case(B, ctx, H, Hkv, D, qlen)
        r = timeline(lambda: fp8attn.forward(q, k, v, **call), args.calls, args.replays)  # noqa: B023
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
