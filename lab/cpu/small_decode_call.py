"""One fp8attn.forward call shaped like a decode step of the embedded model (lab check, 1 thread)."""
import time

import torch

import fp8attn


def main() -> None:
    B, ctx, H, Hkv, D, page = 16, 128, 8, 2, 64, 128
    torch.set_num_threads(1)
    g = torch.Generator().manual_seed(2)
    nb = B * ctx // page + 1
    kc = torch.randn(nb, page, Hkv, D, generator=g).to(torch.float8_e4m3fn)
    vc = torch.randn(nb, page, Hkv, D, generator=g).to(torch.float8_e4m3fn)
    bt = torch.arange(1, nb).to(torch.int32).view(B, ctx // page)
    q = torch.randn(B, H, D, generator=g).to(torch.float8_e4m3fn)
    out = torch.empty(B, H, D, dtype=torch.bfloat16)
    kw = dict(cu_seqlens_q=torch.arange(0, B + 1, dtype=torch.int32), max_seqlen_q=1, max_seqlen_k=ctx,
              seqused_k=torch.full((B,), ctx, dtype=torch.int32), block_table=bt, causal=True,
              q_descale=torch.tensor([0.05]), k_descale=torch.tensor([1.0]), v_descale=torch.tensor([1.0]), out=out)
    for _ in range(20):
        fp8attn.forward(q, kc, vc, **kw)
    n, t0 = 500, time.perf_counter()
    for _ in range(n):
        fp8attn.forward(q, kc, vc, **kw)
    print(f"fp8attn.forward {(time.perf_counter() - t0) / n * 1e6:.1f} us")


if __name__ == "__main__":
    main()
