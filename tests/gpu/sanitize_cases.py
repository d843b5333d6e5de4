"""A representative set of GPU calls for compute-sanitizer (memcheck, racecheck):
    compute-sanitizer --tool memcheck python3 tests/gpu/sanitize_cases.py
Dense causal, varlen GQA with empty sequences, paged with shuffled blocks and NaN-poisoned slots,
split-KV decode (8 and 16 rows), head dims 64/80/128/256 where built, 16-bit q, FP8 and 16-bit
out: on Hopper the wgmma pipeline (D 64/128/256 prefill; 64- and 128-key tiles, kv_tile 0 = its
default), the decodewg pipeline (D 64 / 128 / 256 over 16-key pages), the decode pipeline (D 80; D 128 over
8-key pages) and the portable one (D = 80 prefill); attention sinks on each of them, split and not."""
import os

import torch
from gpu_helpers import DEV, built_head_dims, call, make_case

FN = torch.float8_e4m3fn
dims = built_head_dims()
cases = [
    dict(layout="dense", causal=True, D=128, Sq=100, Sk=150),
    dict(layout="varlen", H=8, Hkv=2, D=128, window=(20, 5), q_dtype=torch.bfloat16, out_dtype=FN),
    dict(layout="paged", H=8, Hkv=1, D=128, Sq=3, Sk=700, softcap=5.0, page=32),
    dict(layout="dense", D=64, Sq=17, Sk=300, q_dtype=torch.float16, out_dtype=torch.float16),
    dict(layout="paged", D=80, Sq=1, Sk=1000, H=32, Hkv=8, causal=True),
    dict(layout="dense", D=256, Sq=70, Sk=90, causal=True, out_dtype=FN),
    dict(layout="paged", D=128, Sq=1, Sk=3000, H=32, Hkv=8, causal=True, out_dtype=FN),
    dict(layout="dense", D=80, Sq=40, Sk=100, H=4, Hkv=4, window=(30, 0)),
    dict(layout="dense", causal=True, D=128, Sq=300, Sk=400, out_dtype=FN, kv_tile=0),
    dict(layout="paged", H=8, Hkv=2, D=64, Sq=90, Sk=333, window=(100, 0), page=48, kv_tile=0),
    dict(layout="varlen", H=8, Hkv=2, D=128, Sq=70, Sk=260, softcap=5.0, q_dtype=torch.bfloat16, kv_tile=0),
    dict(layout="dense", D=256, Sq=200, Sk=333, H=16, Hkv=4, causal=True, out_dtype=FN, kv_tile=128),
    dict(layout="paged", D=256, Sq=60, Sk=300, H=8, Hkv=2, page=16, q_dtype=torch.bfloat16, kv_tile=128),
    dict(layout="paged", D=128, Sq=200, Sk=700, H=8, Hkv=2, page=128, causal=True, kv_tile=0),
    dict(layout="paged", D=128, Sq=4, Sk=600, H=32, Hkv=8, causal=True, out_dtype=FN),
    dict(layout="paged", D=128, Sq=2, Sk=900, H=32, Hkv=8, causal=True, out_dtype=FN, page=8),
    dict(layout="paged", D=64, Sq=1, Sk=2000, H=32, Hkv=8, causal=True, out_dtype=FN),
    dict(layout="paged", D=256, Sq=2, Sk=1500, H=16, Hkv=8, window=(700, 0), out_dtype=FN),
    # attention sinks: read in the epilogue (each pipeline) and in the split-KV combine
    dict(layout="dense", causal=True, D=128, Sq=100, Sk=150, sinks=True),
    dict(layout="paged", D=128, Sq=200, Sk=700, H=8, Hkv=2, page=128, causal=True, kv_tile=0, sinks=True),
    dict(layout="paged", D=128, Sq=1, Sk=3000, H=32, Hkv=8, causal=True, out_dtype=FN, sinks=True),
    dict(layout="paged", D=64, Sq=4, Sk=900, H=32, Hkv=8, causal=True, sinks=True),
    dict(layout="dense", D=80, Sq=40, Sk=100, H=4, Hkv=4, window=(30, 0), sinks=True),
]
# Splits: none, the call's own count, and 5 for the decode-shaped calls.
for split in ("1", "", "5"):
    os.environ["FP8ATTN_NUM_SPLITS"] = split
    for c in cases:
        if c["D"] not in dims or (split == "5" and c.get("Sq", 37) > 4):
            continue
        c = dict(c)
        kv_tile = c.pop("kv_tile", 64)
        args, kw = make_case(B=2, seed=7, **c)
        call(*args, device=DEV, kv_tile=kv_tile, **kw)
        torch.cuda.synchronize()
        print(f"done: split={split or 'auto'} {c} kv_tile={kv_tile}", flush=True)  # (where a timeout stopped)
torch.cuda.synchronize()
print("sanitize cases done", dims)
