"""Summarize an event trace printed by the standalone checks built with -DFP8ATTN_EVENT_TRACE
(lab/standalone/event_trace.h: lines "block B warp W (N events): e@ns e@ns ...").

For every recorded warp the time between consecutive events is charged to that pair of events
(named from csrc/kernels/trace.h); per warp role (the warp index: 0 the wgmma producer, 4 and 8 the
consumer leaders, ...) the pairs are listed by their share of the role's traced time, with count
and mean. Which wait eats a step is then one line, instead of a reading of thousands of stamps.

    python3 lab/scripts/trace_summary.py TRACE.txt [--top N]
"""

from __future__ import annotations

import argparse
import collections
import itertools
import pathlib
import re

TRACE_H = pathlib.Path(__file__).resolve().parents[2] / "csrc" / "kernels" / "trace.h"
LINE = re.compile(r"block\s+(\d+)\s+warp\s+(\d+)\s+\(\d+ events\):(.*)")


def event_names(path: pathlib.Path = TRACE_H) -> dict[int, str]:
    """Event id -> enumerator name without the kTrace prefix, from the TraceEvent enum."""
    return {int(v): n for n, v in re.findall(r"kTrace(\w+)\s*=\s*(\d+)", path.read_text())}


def parse(text: str) -> list[tuple[str, dict[tuple[int, int], list[tuple[int, int]]]]]:
    """[(header, {(block, warp): [(event, ns), ...]})] per run: a run starts at a line beginning with
    "===" (wgmma_check_trace prints one per shape) or at the first trace line."""
    out: list[tuple[str, dict]] = []
    for line in text.splitlines():
        if line.startswith("===") or (not out and LINE.search(line)):
            out.append((line.strip("= ").strip() if line.startswith("===") else "", {}))
        m = LINE.search(line)
        if m:
            stamps = [tuple(map(int, tok.split("@"))) for tok in m.group(3).split()]
            out[-1][1].setdefault((int(m.group(1)), int(m.group(2))), []).extend(stamps)
    return out


def summarize(runs: dict[tuple[int, int], list[tuple[int, int]]], names: dict[int, str]) -> dict[int, list[tuple]]:
    """warp -> [(share, from, to, count, mean ns)] over every block, largest share first."""
    pairs: dict[int, dict[tuple[int, int], list[int]]] = collections.defaultdict(lambda: collections.defaultdict(list))
    for (_, warp), stamps in runs.items():
        for (e0, t0), (e1, t1) in itertools.pairwise(stamps):
            pairs[warp][(e0, e1)].append(t1 - t0)
    out = {}
    for warp, by_pair in sorted(pairs.items()):
        total = sum(sum(d) for d in by_pair.values()) or 1
        rows = [(sum(d) / total, names.get(a, str(a)), names.get(b, str(b)), len(d), sum(d) / len(d))
                for (a, b), d in by_pair.items()]
        out[warp] = sorted(rows, reverse=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("trace", type=pathlib.Path)
    ap.add_argument("--top", type=int, default=8, help="pairs listed per warp role")
    args = ap.parse_args()
    names = event_names()
    for header, runs in parse(args.trace.read_text()):
        print(f"== {header}")
        for warp, rows in summarize(runs, names).items():
            print(f"warp {warp}: share  count   mean ns  from -> to")
            for share, a, b, n, mean in rows[: args.top]:
                print(f"        {100 * share:5.1f}% {n:6d} {mean:9.0f}  {a} -> {b}")


if __name__ == "__main__":
    main()
