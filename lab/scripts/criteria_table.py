"""Issue 46's criteria from one criteria_run.sh output folder: the benchmark's bench.json (FA3 FP8 in its rows:
`python -m fp8attn.bench --fa3-peer`, fa3_fp8 / fa3_fp8_ms) and gather_bw.txt (the paged read ceiling).

    python3 lab/scripts/criteria_table.py OUTDIR

Prints markdown: the prefill rows against the faster of FA3 FP8 and cuDNN FP8 (FA3 alone on GQA rows; bar 1.05x),
varlen over a paged cache against dense varlen (bar 90 %), and the decode rows as % of the paged read ceiling
measured on the same card (the best GB/s of gather_bw's variants; bars: 85 % at 1 x 32k and at q_len 4, 95 % from
8 x 8k up) and against FA3's paged FP8 decode per call (bar: faster).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def mark(ok: bool) -> str:
    return "met" if ok else "not met"


def fmt(x: float | None, nd: int = 0) -> str:
    """fp8attn.bench.fmt's form; not imported from there: the benchmark module loads torch and the built extension,
    and this table is read off result files anywhere."""
    return "-" if x is None else f"{x:.{nd}f}"


def head(*cols: str) -> None:
    """A markdown table's header and separator."""
    print("| " + " | ".join(cols) + " |")
    print("|---" * len(cols) + "|")


def read_ceiling(out: Path) -> float | None:
    """The best GB/s among gather_bw's variants (the last column of its table), or None without the file."""
    path = out / "gather_bw.txt"
    if not path.exists():
        return None
    rates = []
    for line in path.read_text().splitlines():
        cols = line.split()
        if len(cols) == 6 and cols[-1].isdigit():
            rates.append(float(cols[-1]))
    return max(rates, default=None)


def main(out: Path) -> None:
    bench = json.loads((out / "bench.json").read_text())
    rows = [r for r in bench["rows"] if "error" not in r]
    of = lambda kind: [r for r in rows if r["kind"] == kind]  # noqa: E731
    copy, ceiling = bench["env"].get("copy_gbps"), read_ceiling(out)
    print(f"{bench['env']['device']}, torch {bench['env']['torch']}, commit {bench['env']['commit']}, "
          f"{bench['env']['date']}; copy bandwidth {copy} GB/s, paged read ceiling {fmt(ceiling)} GB/s")
    fa3_run = bench.get("fa3_peer")
    if fa3_run is None:
        print("FA3 FP8: not in this run (the benchmark had no --fa3-peer)")
    elif fa3_run["rc"] != 0:
        print(f"FA3 FP8: fa3_peer exited {fa3_run['rc']}: {' / '.join(fa3_run.get('stderr', [])[-2:])}")
    print()
    head("prefill B, H/Hkv, S, D, causal", "cuDNN FP8", "FA3 FP8", "fp8attn", "/ faster peer", ">= 1.05x")
    for r in of("prefill"):
        cudnn, fa3 = r.get("cudnn_fp8"), r.get("fa3_fp8")
        peer = max(x for x in (cudnn, fa3, 0.0) if x is not None)
        ratio = r["fp8attn"] / peer if peer else float("nan")
        print(f"| {r['B']}, {r['H']}/{r['Hkv']}, {r['Sq']}, {r['D']}, {'yes' if r['causal'] else 'no'} | "
              f"{fmt(cudnn)} | {fmt(fa3)} | {r['fp8attn']:.0f} | {ratio:.2f} | {mark(ratio >= 1.05)} |")
    dense = next((r["fp8attn"] for r in of("varlen")), None)
    paged = next((r["fp8attn"] for r in of("varlen paged")), None)
    if dense and paged:
        print(f"\nvarlen over a paged cache {paged:.0f} TFLOP/s, dense varlen {dense:.0f}: {100 * paged / dense:.0f} % "
              f"(>= 90 %: {mark(paged >= 0.9 * dense)})\n")
    head("decode B, context, q_len", "GB/s", "% of ceiling", "bar", "fp8attn us", "FA3 paged FP8 us", "FA3 / fp8attn")
    for r in of("decode"):
        b, ctx, qlen = r["B"], r["Sk"], r["Sq"]
        bar = 85 if qlen > 1 or (b == 1 and ctx >= 32768) else 95 if b * ctx >= 8 * 8192 else None
        pct = 100 * r["fp8attn"] / ceiling if ceiling else None
        us = 1000 * r["fp8attn_ms"]
        fa3 = 1000 * r["fa3_fp8_ms"] if r.get("fa3_fp8") is not None else None  # None: absent or its check failed
        bar_txt = f">= {bar} %: {mark(pct >= bar)}" if bar and pct is not None else "-"
        fa3_txt = f"{fa3:.1f} | {fa3 / us:.2f} ({mark(fa3 > us)})" if fa3 else "- | -"
        pct_txt = f"{pct:.0f} %" if pct is not None else "-"
        print(f"| {b}, {ctx}, {qlen} | {r['fp8attn']:.0f} | {pct_txt} | {bar_txt} | {us:.1f} | {fa3_txt} |")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
