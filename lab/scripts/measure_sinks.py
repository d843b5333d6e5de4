"""Measure where an attention sink meets P quantization, against fp64 attention with the same sinks:
  - "final": the running max ignores the sink, which is added once after the last KV tile
    (m = max(m, sink), l += exp(sink - m); P is quantized against the row's own maximum);
  - "in max": the running max starts at the sink (vLLM's Triton kernel), so P is quantized against
    max(sink, logits) and shrinks when the sink dominates.
Sinks per head at delta (natural units) above the median lse of that head's rows without a sink, so a
sink holds about e^delta / (1 + e^delta) of the probability mass. Relative L2 error of the un-rounded output
(bf16 out, as docs/numerics.md's measurement), max |lse error|, averaged over problems. Writes
docs/numerics-sinks.json and prints a markdown table.

    python lab/scripts/measure_sinks.py [--out docs/numerics-sinks.json]
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

from fp8attn.reference import ideal_attention, quantized_attention  # noqa: E402

PROBLEMS = [(q, k, c) for q, k in ((128, 512), (64, 2048), (32, 8192)) for c in (False, True)]
DELTAS = [-4.0, 0.0, 4.0, 8.0, 12.0]
KV_TILE = 64


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="docs/numerics-sinks.json")
    args = ap.parse_args()
    torch.set_num_threads(2)
    rows = []
    for fp8 in (torch.float8_e4m3fn, torch.float8_e4m3fnuz):
        errs: dict[tuple[float, str], list[float]] = {}
        lse_errs: dict[tuple[float, str], list[float]] = {}
        for i, (sq, sk, causal) in enumerate(PROBLEMS):
            case = make_case(q_lens=[sq], k_lens=[sk], heads=8, kv_heads=2, head_dim=128, fp8=fp8, fp8_out=False,
                             causal=causal, seed=200 + i)
            (q, k, v), kw = case.call_args()
            _, lse0 = ideal_attention(q, k, v, **kw)  # [B, H, Sq]
            center = lse0[0].median(dim=-1).values.float()
            for delta in DELTAS:
                sinks = center + delta
                ideal, ideal_lse = ideal_attention(q, k, v, sinks=sinks, **kw)
                for mode, in_max in (("final", False), ("in max", True)):
                    out, lse = quantized_attention(q, k, v, kv_tile=KV_TILE, sink_in_max=in_max, sinks=sinks,
                                                   out_dtype=torch.bfloat16, **kw)
                    errs.setdefault((delta, mode), []).append(rel_l2(out.double(), ideal))
                    lse_errs.setdefault((delta, mode), []).append(float((lse.double() - ideal_lse).abs().max()))
        for (delta, mode), e in errs.items():
            rows.append(dict(fp8=str(fp8).replace("torch.", ""), delta=delta, mode=mode,
                             mean_rel_l2=statistics.mean(e), max_lse_err=max(lse_errs[(delta, mode)]),
                             per_problem=e))
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    result = dict(
        date=datetime.date.today().isoformat(),
        commit=commit,
        torch=torch.__version__,
        device="cpu (fp64 reference)",
        problems=[dict(q_len=a, k_len=b, causal=c, heads=8, kv_heads=2, head_dim=128) for a, b, c in PROBLEMS],
        kv_tile=KV_TILE,
        sinks="per head: the median lse of its rows without a sink + delta",
        rows=rows,
    )
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print("| fp8 | sink - lse | running max | mean rel. L2 vs fp64 | max abs. lse error |\n|---|---:|---|---:|---:|")
    for r in rows:
        print(f"| {r['fp8']} | {r['delta']:+g} | {r['mode']} | {r['mean_rel_l2']:.5f} | {r['max_lse_err']:.1e} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
