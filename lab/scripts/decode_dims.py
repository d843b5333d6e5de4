"""The benchmark's decode timing (fp8attn.bench.gpu.bench_decode: paged FP8 cache of 16-token blocks, CUDA-graph
replay of 20 calls) at head dims other than the benchmark's 128; run once per FP8ATTN_PIPELINE to A/B pipelines.

    python3 lab/scripts/decode_dims.py [--shapes B,ctx,Hq,Hkv,D,qlen ...]
"""

from __future__ import annotations

import argparse

from fp8attn.bench.gpu import bench_decode

DEFAULT = ["8,8192,32,8,64,1", "32,8192,32,8,64,1", "8,8192,32,8,64,4", "1,32768,32,8,64,1",
           "8,8192,16,8,256,1", "32,4096,16,8,256,1", "8,8192,32,8,256,4", "1,32768,16,8,256,1"]

if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--shapes", nargs="+", default=DEFAULT)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--reps", type=int, default=20)
    args = ap.parse_args()
    for shape in args.shapes:
        cfg = tuple(int(x) for x in shape.split(","))
        row = bench_decode(cfg, args, peers=set())
        us, err = row["fp8attn_ms"] * 1e3, row["fp8attn_err"]
        print(f"{shape:22s} {row['fp8attn']:7.0f} GB/s  {us:8.1f} us  err {err:.4f}  {row['kernel']}", flush=True)
