"""Summarize Nsight Compute's per-SASS-instruction page of each kernel in a report, side by side.

    ncu --profile-from-start off --clock-control none --set full --export r python3 lab/scripts/ncu_prefill.py ...
    ncu --import r.ncu-rep --page source --print-source sass --csv > r.csv
    python3 lab/scripts/ncu_source.py r.csv [--regions 12]

Per kernel: its SASS size, the warp-stall reasons over all sampled instructions, the samples and executions by
opcode with each opcode's main stall reasons, and the hottest straight-line regions (runs of instructions with
the same execution count: a loop body, the per-work-item code) with their share of the samples -- where a
kernel's cycles go, without symbols.
"""

from __future__ import annotations

import argparse
import collections
import csv
import re

ALL = "Warp Stall Sampling (All Samples)"
EXEC = "Instructions Executed"


def num(x: str) -> float:
    """A CSV cell as a number (ncu writes thousands separators; '-' and '' are 0)."""
    try:
        return float(x.replace(",", ""))
    except ValueError:
        return 0.0


def kernels(path: str) -> list[dict]:
    """[{name, hdr, rows}] of every kernel in the CSV export."""
    out: list[dict] = []
    for row in csv.reader(open(path)):
        if not row:
            continue
        if row[0] == "Kernel Name":
            out.append(dict(name=row[1], rows=[]))
        elif row[0] == "Address":
            out[-1]["hdr"] = row
        else:
            out[-1]["rows"].append(row)
    return out


def opcode(sass: str) -> str:
    """The opcode of a SASS line without predicate and modifiers: '@!P0 BRA 0x..' -> 'BRA'."""
    return re.sub(r"^@!?U?P\w+\s+", "", sass.strip()).split(" ")[0].split(".")[0]


def summarize(k: dict, n_regions: int) -> None:
    ix = {n: i for i, n in enumerate(k["hdr"])}
    reasons = [c for c in k["hdr"] if c.startswith("stall_") and "Not Issued" not in c]
    rows = k["rows"]
    by_reason: collections.Counter = collections.Counter()
    by_op: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    executed: collections.Counter = collections.Counter()
    for r in rows:
        op = opcode(r[1])
        executed[op] += num(r[ix[EXEC]])
        for c in reasons:
            v = num(r[ix[c]])
            by_reason[c[6:]] += v
            by_op[op][c[6:]] += v
    total = sum(by_reason.values()) or 1.0
    print(f"===== {k['name'][:100]}")
    print(f"SASS instructions {len(rows)}, executed (warp level) {sum(executed.values()) / 1e6:.2f} M, "
          f"stall samples {total:.0f}")
    print("stall reasons: " + ", ".join(f"{n} {v / total * 100:.1f} %" for n, v in by_reason.most_common(12)))
    print("by opcode (share of samples, executions, main reasons):")
    for op, c in sorted(by_op.items(), key=lambda t: -sum(t[1].values()))[:16]:
        top = ", ".join(f"{n} {v / total * 100:.1f}" for n, v in c.most_common(3) if v > 0)
        print(f"  {op:10} {sum(c.values()) / total * 100:5.1f} %  {executed[op] / 1e6:8.2f} M  {top}")
    regions: list[list] = []  # [first, last, executions per instruction, samples]
    for i, r in enumerate(rows):
        e = num(r[ix[EXEC]])
        if e == 0:
            continue
        if regions and regions[-1][1] == i - 1 and regions[-1][2] == e:
            regions[-1][1] = i
            regions[-1][3] += num(r[ix[ALL]])
        else:
            regions.append([i, i, e, num(r[ix[ALL]])])
    print("hottest regions (instruction index range, length, executions each, share of samples, first instruction):")
    for a, b, e, s in sorted(regions, key=lambda t: -t[3])[:n_regions]:
        print(f"  {a:6}-{b:<6} {b - a + 1:5}  {e:11.0f}  {s / total * 100:5.1f} %  {rows[a][1].strip()[:60]}")
    print()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("csv")
    ap.add_argument("--regions", type=int, default=12)
    a = ap.parse_args()
    for k in kernels(a.csv):
        summarize(k, a.regions)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
