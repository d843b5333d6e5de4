"""Load balance of the Hopper pipeline's work-item orders, modelled: ``python3 lab/scripts/schedule_model.py``.

An item (one block of 128 packed rows of one (batch, kv head)) costs its KV tiles of 128 keys plus a fixed
per-item overhead; items come in launch order (make_block: masked problems level by level, the longest level
first, every (batch, kv head) within a level; varlen levels follow the longest sequence, so shorter
sequences' items of a level are empty). Printed per shape: the last block's load over the mean load for
round robin over the persistent blocks (before 4b1c0f1), every other round reversed (the static order,
kernel_wgmma.h ItemSource), and greedy (each item to the least-loaded block: what the dynamic counter order of
varlen approximates). Scheduling only: no memory or clock effects.
"""

from __future__ import annotations

import argparse
import heapq
import math
from collections.abc import Callable

BM = BN = 128


def dense_items(b: int, h: int, hkv: int, s: int) -> list[int | None]:
    """Tiles of every causal item of a dense batch, in launch order."""
    return varlen_items([s] * b, h, hkv)


def varlen_items(lens: list[int], h: int, hkv: int) -> list[int | None]:
    """Tiles of every causal item (None: empty) of a varlen batch, in launch order."""
    g = h // hkv
    n_bh = len(lens) * hkv
    m_blocks = math.ceil(max(lens) * g / BM)
    out: list[int | None] = []
    for x in range(m_blocks * n_bh):
        mb, bh = divmod(x, n_bh)
        rows = lens[bh // hkv] * g
        m0 = (m_blocks - 1 - mb) * BM
        out.append(None if m0 >= rows else math.ceil(((min(m0 + BM, rows) - 1) // g + 1) / BN))
    return out


def cost(t: int | None, overhead: float) -> float:
    return 0.05 if t is None else t + overhead


def static(items: list[int | None], blocks: int, overhead: float, snake: bool) -> float:
    load = [0.0] * blocks
    for i, t in enumerate(items):
        r, j = divmod(i, blocks)
        load[blocks - 1 - j if snake and r % 2 else j] += cost(t, overhead)
    return max(load) / (sum(load) / blocks)


def greedy(items: list[int | None], blocks: int, overhead: float) -> float:
    heap = [(0.0, j) for j in range(blocks)]
    for t in items:
        load, j = heapq.heappop(heap)
        heapq.heappush(heap, (load + cost(t, overhead), j))
    loads = [x for x, _ in heap]
    return max(loads) / (sum(loads) / blocks)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--blocks", type=int, default=132, help="persistent blocks (SMs)")
    ap.add_argument("--overhead", type=float, default=0.3, help="per-item cost in tiles")
    a = ap.parse_args()
    shapes: list[tuple[str, Callable[[], list[int | None]]]] = [
        ("1x32x8192 causal", lambda: dense_items(1, 32, 32, 8192)),
        ("2x32x4096 causal", lambda: dense_items(2, 32, 32, 4096)),
        ("4x32x2048 causal", lambda: dense_items(4, 32, 32, 2048)),
        ("16x32x512 causal", lambda: dense_items(16, 32, 32, 512)),
        ("1x32/8x8192 causal", lambda: dense_items(1, 32, 8, 8192)),
        ("4x32/8x2048 causal", lambda: dense_items(4, 32, 8, 2048)),
        ("varlen bench 32/8", lambda: varlen_items([512, 1024, 2048, 3000, 777, 4096, 128, 1500], 32, 8)),
    ]
    print(f"{'shape':22} {'items':>6} {'round robin':>12} {'snake':>8} {'greedy':>8}   (last block / mean load)")
    for name, make in shapes:
        items = make()
        print(f"{name:22} {len(items):6} {static(items, a.blocks, a.overhead, False):12.3f} "
              f"{static(items, a.blocks, a.overhead, True):8.3f} {greedy(items, a.blocks, a.overhead):8.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
