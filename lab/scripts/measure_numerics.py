"""Measure the two numerical choices docs/design.md §1 leaves open, against fp64 attention:
  - the softmax normaliser l: sum of the quantized P (p8·p_scale, consistent with the numerator)
    or of the unquantized p (vLLM's ROCm Triton kernel);
  - the default P scale: a power of two (2^-8 fn / 2^-7 fnuz) or 1/max_F (what Quark calibrates).
Relative L2 error of the un-rounded output (fp32 out), random normal FP8 inputs with amax scales,
averaged over problems. Writes docs/numerics.json and prints a markdown table.

    python lab/scripts/measure_numerics.py [--out docs/numerics.json]
"""

from __future__ import annotations

import argparse
import datetime
import json
import statistics
import subprocess
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests"))
from cases import make_case, rel_l2  # noqa: E402

from fp8attn.quant import default_p_scale, fp8_max  # noqa: E402
from fp8attn.reference import ideal_attention, quantized_attention  # noqa: E402

PROBLEMS = [(q, k, c) for q, k in ((128, 512), (64, 2048), (32, 8192)) for c in (False, True)]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="docs/numerics.json")
    args = ap.parse_args()
    torch.set_num_threads(2)
    rows = []
    for fp8 in (torch.float8_e4m3fn, torch.float8_e4m3fnuz):
        variants = {
            ("quantized", "pow2"): [],
            ("exact", "pow2"): [],
            ("quantized", "1/max"): [],
            ("exact", "1/max"): [],
        }
        for i, (sq, sk, causal) in enumerate(PROBLEMS):
            case = make_case(
                q_lens=[sq],
                k_lens=[sk],
                heads=8,
                kv_heads=2,
                head_dim=128,
                fp8=fp8,
                fp8_out=False,
                causal=causal,
                seed=100 + i,
            )
            (q, k, v), kw = case.call_args()
            ideal, _ = ideal_attention(q, k, v, **kw)
            for l_mode, ps in [key for key in variants if key[1] != "-"]:
                p_scale = torch.tensor([default_p_scale(fp8) if ps == "pow2" else 1 / fp8_max(fp8)])
                out, _ = quantized_attention(
                    q, k, v, kv_tile=128, l_mode=l_mode, p_scale=p_scale, out_dtype=torch.bfloat16, **kw
                )
                variants[(l_mode, ps)].append(rel_l2(out.double(), ideal))
            bf16_floor = rel_l2(ideal.to(torch.bfloat16).double(), ideal)
            variants.setdefault(("bf16 rounding only", "-"), []).append(bf16_floor)
        for (l_mode, ps), errs in variants.items():
            rows.append(
                dict(
                    fp8=str(fp8).replace("torch.", ""),
                    l=l_mode,
                    p_scale=ps,
                    mean_rel_l2=statistics.mean(errs),
                    per_problem=errs,
                )
            )
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    result = dict(
        date=datetime.date.today().isoformat(),
        commit=commit,
        torch=torch.__version__,
        device="cpu (fp64 reference)",
        problems=[dict(q_len=a, k_len=b, causal=c, heads=8, kv_heads=2, head_dim=128) for a, b, c in PROBLEMS],
        kv_tile=128,
        rows=rows,
    )
    Path(args.out).write_text(json.dumps(result, indent=2))
    print("| fp8 | l sums | P scale | mean rel. L2 vs fp64 |\n|---|---|---|---|")
    for r in rows:
        print(f"| {r['fp8']} | {r['l']} | {r['p_scale']} | {r['mean_rel_l2']:.5f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
