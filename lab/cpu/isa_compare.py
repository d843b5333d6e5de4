"""Every CPU instruction set against the scalar oracle, bit for bit, on random cases (lab check)."""
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "tests"))
from cases import make_case  # noqa: E402

from fp8attn.ops import _forward  # noqa: E402


def run(isa, case, kv_tile):
    os.environ["FP8ATTN_CPU_ISA"] = isa
    (q, k, v), kw = case.call_args()
    out, lse = _forward(q, k, v, return_softmax_lse=True, kv_tile=kv_tile, **kw)
    return out, lse


def main():
    isas = torch.ops.fp8attn.cpu_isas()
    g = torch.Generator().manual_seed(0)
    bad = 0
    for it in range(int(sys.argv[1]) if len(sys.argv) > 1 else 40):
        def r(a, b):
            return int(torch.randint(a, b + 1, (1,), generator=g))
        layout = ["dense", "varlen", "paged"][r(0, 2)]
        B = r(1, 3)
        ql = r(1, 70)
        qls = [ql] * B if layout == "dense" else [r(0, ql) for _ in range(B)]
        kls = [n + r(0, 150) for n in qls] if layout != "dense" else [ql + r(0, 150)] * B
        heads, kvh = [(4, 4), (8, 2), (6, 1), (32, 8)][r(0, 3)]
        D = [64, 80, 96, 112, 128, 192, 256][r(0, 6)]
        fp8 = [torch.float8_e4m3fn, torch.float8_e4m3fnuz][r(0, 1)]
        mask = ["none", "causal", "window", "causal_window"][r(0, 3)]
        window = {"none": (-1, -1), "causal": (-1, -1), "window": (17, 5), "causal_window": (23, -1)}[mask]
        case = make_case(layout=layout, q_lens=qls, k_lens=kls, heads=heads, kv_heads=kvh, head_dim=D, fp8=fp8,
                         q_dtype=[fp8, torch.bfloat16][r(0, 1)], fp8_out=bool(r(0, 1)),
                         causal=mask.startswith("causal"), window=window, softcap=[0.0, 0.0, 7.5][r(0, 2)],
                         per_head=bool(r(0, 1)), block_size=16, seed=it)
        tile = [16, 32, 64, 128, 0, 7][r(0, 5)]
        ref_o, ref_l = run("scalar", case, tile)
        for isa in isas:
            if isa == "scalar":
                continue
            o, lse = run(isa, case, tile)
            same = torch.equal(o.view(torch.uint8) if o.dtype.itemsize == 1 else o.view(torch.int16),
                               ref_o.view(torch.uint8) if o.dtype.itemsize == 1 else ref_o.view(torch.int16))
            same_l = torch.equal(torch.nan_to_num(lse, nan=7.0), torch.nan_to_num(ref_l, nan=7.0))
            if not (same and same_l):
                bad += 1
                diff = (o.float() - ref_o.float()).abs().max().item()
                print(f"MISMATCH {isa} it={it} {layout} B={B} q={qls} k={kls} H={heads}/{kvh} D={D} {fp8} {mask} "
                      f"tile={tile} out_same={same} lse_same={same_l} maxdiff={diff}")
    print("mismatches:", bad, {i: torch.ops.fp8attn.cpu_isa_calls(i) for i in isas})


if __name__ == "__main__":
    main()
