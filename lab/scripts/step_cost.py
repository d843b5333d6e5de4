"""Per-step and per-item cost of the prefill kernels, by regression over the key length.

    python3 lab/scripts/step_cost.py [--peers] [--out FILE]

At a fixed q shape (1 x 32 heads x 8192 rows, non-causal) the time is T(Sk) = a + b Sk: b is the cost
of the KV steps, a what every work item pays once (Q load, epilogue, pipeline fill and drain) plus the
launch. `--vary sq` holds Sk = 8192 and varies the rows instead (the number of work items, so of
rounds of the persistent blocks): there a is what a call pays once, b the cost of the items.
Printed per head dim for fp8attn and, with --peers, cuDNN's FP8 SDPA, with the SM clock
nvidia-smi reported meanwhile (the steps' cycles are b x clock). `--profile` adds a torch.profiler
breakdown of one fp8attn call per head dim (which kernels a call launches, and their times).
"""
from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import time
from datetime import datetime
from functools import partial

import torch

import fp8attn
from fp8attn.bench.gpu import FN, OUT_SCALE, P_SCALE, cudnn_fp8_runner, time_ms

SQ, H = 8192, 32  # the fixed length (rows or keys)
SKS = (2048, 4096, 8192, 16384)  # the varied one


def clocks_between(log: list[tuple[float, int]], t0: float, t1: float) -> float:
    """Median SM clock (MHz) nvidia-smi sampled between t0 and t1 (0 if none)."""
    xs = sorted(c for t, c in log if t0 <= t <= t1)
    return float(xs[len(xs) // 2]) if xs else 0.0


def fit(xs: list[float], ys: list[float]) -> tuple[float, float]:
    """Least-squares intercept and slope."""
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sum((x - mx) ** 2 for x in xs)
    return my - b * mx, b


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--peers", action="store_true", help="cuDNN FP8 SDPA beside fp8attn")
    ap.add_argument("--profile", action="store_true", help="kernel breakdown of 5 calls per head dim (at 8192 x 8192)")
    ap.add_argument("--dims", default="64,128,256")
    ap.add_argument("--vary", choices=["sk", "sq"], default="sk")
    ap.add_argument("--out", default="")
    args = ap.parse_args()
    smi = subprocess.Popen(["nvidia-smi", "--query-gpu=timestamp,clocks.sm", "--format=csv,noheader,nounits",
                            "-lms", "50"], stdout=subprocess.PIPE, text=True)
    stamps: list[tuple[str, int, int, float, float]] = []  # (impl, D, varied length, t0, t1)
    times: dict[tuple[str, int, int], float] = {}
    gen = torch.Generator(device="cuda").manual_seed(0)
    ps, osc = torch.tensor([P_SCALE], device="cuda"), torch.tensor([OUT_SCALE], device="cuda")
    for D in (int(d) for d in args.dims.split(",")):
        scale = 1.0 / math.sqrt(D)
        for n in SKS:
            sq, sk = (SQ, n) if args.vary == "sk" else (n, SQ)
            q8 = torch.randn(1, sq, H, D, device="cuda", generator=gen).to(FN)
            out = torch.empty_like(q8)
            k8 = torch.randn(1, sk, H, D, device="cuda", generator=gen).to(FN)
            v8 = torch.randn(1, sk, H, D, device="cuda", generator=gen).to(FN)
            runs = [("fp8attn", partial(fp8attn.forward, q8, k8, v8, p_scale=ps, out_scale=osc, out=out))]
            if args.peers:
                f, _ = cudnn_fp8_runner(*(x.transpose(1, 2).contiguous() for x in (q8, k8, v8)), False, scale)
                runs.append(("cudnn_fp8", f))
            for name, fn in runs:
                t0 = time.time()
                times[name, D, n] = time_ms(fn, 5, 30, min_warm_ms=300.0)
                stamps.append((name, D, n, t0, time.time()))
            if args.profile and n == SQ:
                with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
                    for _ in range(5):
                        runs[0][1]()
                    torch.cuda.synchronize()
                print(f"== D {D}, Sq {sq}, Sk {sk}: fp8attn's kernels over 5 calls")
                print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=8))
        torch.cuda.empty_cache()
    smi.terminate()
    log = []
    for line in smi.communicate()[0].splitlines():  # "2026/11/30 19:25:04.123, 1755"
        stamp, _, mhz = line.rpartition(",")
        try:
            log.append((datetime.strptime(stamp.strip(), "%Y/%m/%d %H:%M:%S.%f").timestamp(), int(mhz)))
        except ValueError:
            continue
    rows = []
    v = "Sk" if args.vary == "sk" else "Sq"
    fixed = f"{SQ} queries" if args.vary == "sk" else f"{SQ} keys"
    print(f"1 x {H} heads x {fixed}, non-causal, FP8 out; T({v}) = a + b {v} (ms)")
    print(f"{'impl':10s} {'D':>4s} " + " ".join(f"{v + ' ' + str(s):>10s}" for s in SKS) +
          f" {'a (us)':>8s} {'b (us/1k)':>10s} {'a / T(8192)':>12s} {'TFLOP/s 8k':>11s} {'MHz':>6s}")
    for name, D in sorted({(n, d) for n, d, _ in times}):
        ts = [times[name, D, s] for s in SKS]
        a, b = fit(list(SKS), ts)
        mhz = [clocks_between(log, t0, t1) for n, d, _, t0, t1 in stamps if (n, d) == (name, D)]
        t8 = times[name, D, SQ]
        tflops = 4 * H * SQ * SQ * D / t8 / 1e9
        print(f"{name:10s} {D:4d} " + " ".join(f"{t:10.3f}" for t in ts) +
              f" {a * 1e3:8.1f} {b * 1e6:10.2f} {a / t8:12.3f} {tflops:11.0f} {sum(mhz) / len(mhz):6.0f}")
        rows.append(dict(impl=name, D=D, vary=args.vary, n=list(SKS), ms=ts, a_us=a * 1e3, b_us_per_1k=b * 1e6,
                         mhz=mhz))
    if args.out:
        with open(args.out, "w") as f:
            json.dump(dict(kernel_rows=rows, device=torch.cuda.get_device_name()), f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
