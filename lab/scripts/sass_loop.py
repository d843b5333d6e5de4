"""The instruction mix of the wgmma consumer's KV loop in a cubin's SASS (no GPU needed).

    nvdisasm -c fwd_wgmma_hd128_e4m3fn_nomask_kv128.cubin > k.sass
    python3 lab/scripts/sass_loop.py k.sass

The loop is the smallest range between a backward branch and its target that holds 60 or more
MUFU.EX2 (a tile's softmax), an m64n8 QGMMA (the row sums) and an mbarrier try_wait: the steady
KV loop of the wgmma pipeline. The counts are static -- the loop's cold paths (softcap, masks)
included -- so compare builds with them, and take executed counts from ncu (lab-notes:lab/h200-logs/58-*).
"""

from __future__ import annotations

import argparse
import collections
import re


def read_sass(path: str) -> tuple[list[str], dict[str, int]]:
    """The instructions in order, and the index each label points at."""
    labels: dict[str, int] = {}
    ins: list[str] = []
    for line in open(path):
        m = re.match(r"\s*(\.L_x_\d+):", line)
        if m:
            labels[m.group(1)] = len(ins)
            continue
        m = re.search(r"/\*[0-9a-f]+\*/\s+(.*?)\s*;", line)
        if m:
            ins.append(m.group(1))
    return ins, labels


def kv_loop(ins: list[str], labels: dict[str, int]) -> tuple[int, int]:
    """[first, last] instruction indices of the steady KV loop."""
    best: tuple[int, int] | None = None
    for i, text in enumerate(ins):
        m = re.search(r"BRA\s+`?\(?(\.L_x_\d+)", text)
        if not m or labels.get(m.group(1), i) >= i:
            continue
        j = labels[m.group(1)]
        body = ins[j:i + 1]
        if (sum("MUFU.EX2" in x for x in body) >= 60 and any("QGMMA.64x8x32" in x for x in body)
                and any("TRYWAIT" in x for x in body) and (best is None or i - j < best[1] - best[0])):
            best = (j, i)
    if best is None:
        raise SystemExit("no wgmma KV loop found (is this an sm90a wgmma instance?)")
    return best


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("sass", help="nvdisasm -c output")
    a = ap.parse_args()
    ins, labels = read_sass(a.sass)
    j, i = kv_loop(ins, labels)
    ops: collections.Counter[str] = collections.Counter()
    for text in ins[j:i + 1]:
        op = text.split()[1] if text.startswith("@") else text.split()[0]
        ops[op.split(".")[0]] += 1
    uniform = sum(c for o, c in ops.items() if o.startswith("U") or o in ("R2UR", "S2UR"))
    print(f"KV loop: {i - j + 1} instructions, {uniform} on the uniform datapath")
    print(", ".join(f"{o} {c}" for o, c in ops.most_common()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
