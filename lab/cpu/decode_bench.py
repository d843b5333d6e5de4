"""Paged decode on the CPU: GB/s of K+V read, fp8attn (lab check)."""
import os
import sys
import time

import torch

import fp8attn


def main():
    B, ctx = int(sys.argv[1]), int(sys.argv[2])
    H, Hkv, D, page, qlen = 32, 8, 128, 16, 1
    reps = int(os.environ.get("REPS", 5))
    g = torch.Generator().manual_seed(2)
    nb = B * ctx // page
    kc = torch.randn(nb, page, Hkv, D, generator=g).to(torch.float8_e4m3fn)
    vc = torch.randn(nb, page, Hkv, D, generator=g).to(torch.float8_e4m3fn)
    order = torch.arange(nb) if os.environ.get("SEQ_BLOCKS") else torch.randperm(nb, generator=g)
    bt = order.to(torch.int32).view(B, ctx // page)
    used = torch.full((B,), ctx, dtype=torch.int32)
    q = torch.randn(B * qlen, H, D, generator=g).to(torch.bfloat16)
    cu = torch.arange(0, B * qlen + 1, qlen, dtype=torch.int32)
    out = torch.empty(B * qlen, H, D, dtype=torch.bfloat16)
    kw = dict(cu_seqlens_q=cu, max_seqlen_q=qlen, max_seqlen_k=ctx, seqused_k=used, block_table=bt, causal=True,
              q_descale=torch.tensor([0.05]), out=out)
    fp8attn.forward(q, kc, vc, **kw)
    t = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fp8attn.forward(q, kc, vc, **kw)
        t.append(time.perf_counter() - t0)
    tm = min(t)
    gb = 2 * B * ctx * Hkv * D / 1e9
    print(f"decode B{B} ctx{ctx} [{torch.ops.fp8attn.cpu_isa()}, {torch.get_num_threads()} thr]: {tm*1e3:.2f} ms, "
          f"{gb/tm:.1f} GB/s of KV")


if __name__ == "__main__":
    main()
