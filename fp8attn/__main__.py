"""``python -m fp8attn``: the main job on its embedded default workload.

A Llama-3.1-8B-shaped attention batch (32 q / 8 kv heads, head dim 128; prefills, a chunked-prefill
continuation and decodes on a shuffled paged FP8 KV cache; calibrated per-tensor scales, P quantized,
FP8 output) runs on the best device present. Prints its accuracy against the fp64 reference and its
throughput, then the end-to-end perplexity comparison on the embedded model when it is available.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.util
import json
import statistics
import sys
import time

import torch

from . import build_commit, forward, kernel_kv_tile, kernel_name
from .quant import fp8_max
from .reference import ideal_attention, quantized_attention
from .workload import llama_batch


def best_device() -> torch.device:
    """CUDA/HIP when a GPU and the GPU kernels are present, else the CPU."""
    if torch.cuda.is_available() and torch._C._dispatch_has_kernel_for_dispatch_key("fp8attn::forward", "CUDA"):
        return torch.device("cuda")
    return torch.device("cpu")


def _timeit(fn, device: torch.device, repeats: int) -> float:
    """Median seconds of `repeats` calls after one warm-up (events on a GPU)."""
    fn()
    times = []
    for _ in range(repeats):
        if device.type == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) / 1e3)
        else:
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
    return statistics.median(times)


def run_attention(device: torch.device, repeats: int) -> dict:
    w = llama_batch(device=device)
    fp8 = w.key_cache.dtype
    # Output scale calibrated on a separate batch of the same distribution, as o_proj.input_scale is.
    calib = llama_batch(seed=1)
    ideal_calib, _ = ideal_attention(calib.q, calib.key_cache, calib.value_cache, **calib.kwargs)
    out_scale = (ideal_calib.abs().max() / fp8_max(fp8)).float().reshape(1).to(device)

    def call():
        return forward(w.q, w.key_cache, w.value_cache, out_scale=out_scale, **w.kwargs)

    out = call()
    # The reference at the kernel's own KV tile (Hopper's wgmma kernels take 128 keys by default).
    kernel = kernel_name(w.q, w.key_cache, w.value_cache, out_scale=out_scale, **w.kwargs)
    kv_tile = kernel_kv_tile(kernel)
    cpu = w.to("cpu")
    ideal, _ = ideal_attention(cpu.q, cpu.key_cache, cpu.value_cache, **cpu.kwargs)
    quant, _ = quantized_attention(cpu.q, cpu.key_cache, cpu.value_cache, kv_tile=kv_tile, out_scale=out_scale.cpu(),
                                   **cpu.kwargs)
    o = out.cpu().double() * float(out_scale)
    err = ((o - ideal).norm() / ideal.norm()).item()
    rounded = (ideal / float(out_scale)).clamp(-fp8_max(fp8), fp8_max(fp8)).float().to(fp8).double() * float(out_scale)
    floor = ((rounded - ideal).norm() / ideal.norm()).item()
    codes = out.cpu().view(torch.uint8).int(), quant.view(torch.uint8).int()
    same = (codes[0] == codes[1]).float().mean().item()
    t = _timeit(call, device, repeats)
    return dict(device=str(device), device_name=torch.cuda.get_device_name() if device.type == "cuda" else "cpu",
                kernel=kernel, sequences=len(w.seqs), query_tokens=int(w.q.shape[0]),
                key_tokens=sum(k for _, k in w.seqs),
                fp8=str(fp8), rel_l2_vs_fp64=err, fp8_rounding_floor=floor, identical_to_quantized_ref=same,
                seconds=t, tflops=w.flops / t / 1e12, kv_gb_per_s=w.kv_bytes / t / 1e9)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m fp8attn", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default=None, help="cpu or cuda (default: the best present)")
    ap.add_argument("--repeats", type=int, default=5, help="timed runs (median)")
    ap.add_argument("--json", default=None, help="also write the results to this file")
    ap.add_argument("--no-model", action="store_true", help="skip the end-to-end perplexity comparison")
    args = ap.parse_args(argv)
    missing = [] if args.no_model else _missing_model_packages()
    if missing:
        print(f"python -m fp8attn: the model comparison needs {', '.join(missing)} (bash scripts/setup.sh installs "
              "the pinned versions); --no-model skips it", file=sys.stderr)
        return 2
    device = torch.device(args.device) if args.device else best_device()
    torch.manual_seed(0)

    r = run_attention(device, args.repeats)
    print(f"fp8attn on {r['device_name']} ({r['device']}): Llama-3.1-8B attention (32 q / 8 kv heads, D 128), "
          f"{r['sequences']} sequences, {r['query_tokens']} query / {r['key_tokens']} key tokens, paged "
          f"{r['fp8']} KV, P quantized, FP8 output")
    print(f"  accuracy: relative L2 error vs fp64 attention {r['rel_l2_vs_fp64']:.4f} "
          f"(rounding the exact output to FP8 alone: {r['fp8_rounding_floor']:.4f}); "
          f"{100 * r['identical_to_quantized_ref']:.2f}% of outputs bit-identical to the quantized fp64 reference")
    print(f"  throughput: {r['seconds'] * 1e3:.2f} ms, {r['tflops']:.3f} TFLOP/s, KV read {r['kv_gb_per_s']:.3g} GB/s")
    results = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
               "torch": torch.__version__, "commit": build_commit(), "attention": r}
    if not args.no_model:
        results["model"] = _model_comparison(device)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)
    return 0



def _model_comparison(device: torch.device) -> dict:
    """Held-out perplexity of the embedded model with bf16 and FP8 attention (fp8attn.eval)."""
    from .eval import compare

    return compare(device=str(device))


def _missing_model_packages() -> list[str]:
    """The packages the model comparison imports that are not installed (scripts/setup.sh installs them)."""
    return [m for m in ("transformers", "safetensors") if importlib.util.find_spec(m) is None]


if __name__ == "__main__":
    sys.exit(main())
