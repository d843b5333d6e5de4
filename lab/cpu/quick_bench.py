"""fp8attn CPU vs torch SDPA fp32 on the issue's dense shapes, same process, medians (lab check)."""
import os
import sys
import time

import torch

import fp8attn

SHAPES = [(1, 32, 8, 2048, 128, True), (1, 32, 32, 1024, 128, False), (4, 32, 8, 512, 64, True)]


CLOCK = time.thread_time if os.environ.get("CPU_TIME") else time.perf_counter  # CPU_TIME=1: with 1 thread


def med(fn, reps):
    fn()
    t = []
    for _ in range(reps):
        t0 = CLOCK()
        fn()
        t.append(CLOCK() - t0)
    return min(t) if os.environ.get("MIN") else sorted(t)[len(t) // 2]


def main():
    reps = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    if os.environ.get("CPU_TIME"):
        torch.set_num_threads(1)
    isa = os.environ.get("FP8ATTN_CPU_ISA", torch.ops.fp8attn.cpu_isa())
    only = sys.argv[2] if len(sys.argv) > 2 else None
    for i, (B, H, Hkv, S, D, causal) in enumerate(SHAPES):
        if only is not None and str(i) not in only:
            continue
        g = torch.Generator().manual_seed(0)
        q = torch.randn(B, S, H, D, generator=g)
        k = torch.randn(B, S, Hkv, D, generator=g)
        v = torch.randn(B, S, Hkv, D, generator=g)
        q8, k8, v8 = (x.to(torch.float8_e4m3fn) for x in (q, k, v))
        out = torch.empty(B, S, H, D, dtype=torch.float8_e4m3fn)
        ps, osc = torch.tensor([1 / 448.0]), torch.tensor([1 / 16.0])
        def f8(q8=q8, k8=k8, v8=v8, causal=causal, ps=ps, osc=osc, out=out):
            return fp8attn.forward(q8, k8, v8, causal=causal, p_scale=ps, out_scale=osc, out=out)

        qf, kf, vf = (x.float().transpose(1, 2).contiguous() for x in (q8, k8, v8))

        def sd(qf=qf, kf=kf, vf=vf, causal=causal, gqa=H != Hkv):
            return torch.nn.functional.scaled_dot_product_attention(qf, kf, vf, is_causal=causal, enable_gqa=gqa)

        t8, ts = med(f8, reps), med(sd, reps)
        fl = 4 * B * H * S * S * D * (0.5 if causal else 1.0)
        print(f"B{B} H{H}/{Hkv} S{S} D{D} c={causal}: fp8attn[{isa}] {t8*1e3:.1f} ms ({fl/t8/1e9:.0f} GFLOP/s)  "
              f"sdpa fp32 {ts*1e3:.1f} ms ({fl/ts/1e9:.0f})  ratio {t8/ts:.2f}", flush=True)


if __name__ == "__main__":
    main()
