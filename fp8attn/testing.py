"""Inputs and metrics shared by the tests, the benchmark and the main job's workload: paged KV caches laid out as
vLLM lays them out (blocks in a shuffled order, a block table per sequence) and the FP8 ulp distance."""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

__all__ = ["NAN_CODE", "block_table", "paged_kv", "sequence_rows", "ordered_codes", "fp8_ulps", "ulps_as_fp8",
           "ulp_agreement"]

#: the FP8 types' NaN code (e4m3fn: 0x7f, and 0xff; e4m3fnuz: 0x80, its only one)
NAN_CODE = {torch.float8_e4m3fn: 0x7F, torch.float8_e4m3fnuz: 0x80}


def block_table(lens: Sequence[int], block_size: int, *, num_blocks: int | None = None, first_block: int = 0,
                cols: int | None = None, pad: int = 0, generator: torch.Generator | None = None,
                device: str | torch.device | None = None) -> torch.Tensor:
    """A shuffled block table (int32 ``[len(lens), cols]``): sequence b holds ``ceil(lens[b] / block_size)``
    blocks, handed out in order from one random permutation of the blocks ``[first_block, num_blocks)``
    (default: just enough); the other entries of a row (``cols`` defaults to the widest need) hold ``pad``.
    The permutation is drawn on ``generator``'s device."""
    need = [math.ceil(n / block_size) for n in lens]
    num_blocks = first_block + sum(need) if num_blocks is None else num_blocks
    cols = max(need, default=0) if cols is None else cols
    if num_blocks - first_block < sum(need) or cols < max(need, default=0):
        raise ValueError(f"sequences of {list(lens)} keys need {need} blocks: more than {num_blocks - first_block} "
                         f"blocks or {cols} columns")
    perm = torch.randperm(num_blocks - first_block, generator=generator,
                          device=generator.device if generator is not None else device) + first_block
    table = torch.full((len(lens), cols), pad, dtype=torch.int32, device=perm.device)
    start = 0
    for b, n in enumerate(need):
        table[b, :n] = perm[start: start + n]
        start += n
    return table.to(device) if device is not None else table


def paged_kv(xs: Sequence[torch.Tensor], lens: Sequence[int], block_size: int, *, spare_blocks: int = 0,
             poison: bool = False, **table_kw) -> tuple[list[torch.Tensor], torch.Tensor]:
    """Rows packed by sequence (each of ``xs`` ``[sum(lens), ...]``, e.g. K and V) -> their paged caches
    ``[num_blocks, block_size, ...]`` (``num_blocks``: the blocks the sequences need plus ``spare_blocks``)
    and the block table (``block_table``'s; ``table_kw`` passes on). A slot no sequence uses holds 0, or NaN
    (FP8: the type's NaN code) when ``poison``, so that reading it shows in the output."""
    num_blocks = table_kw.get("num_blocks") or sum(math.ceil(n / block_size) for n in lens) + spare_blocks
    table = block_table(lens, block_size, **{**table_kw, "num_blocks": num_blocks})
    # the slot of every packed row: block table[b, i // block_size], offset i % block_size for row i of sequence b
    seq = torch.repeat_interleave(torch.arange(len(lens)), torch.tensor(list(lens), dtype=torch.long))
    pos = torch.arange(len(seq)) - torch.tensor([0, *lens]).cumsum(0)[seq]
    slots = table.cpu()[seq, pos // block_size].long() * block_size + pos % block_size
    caches = []
    for x in xs:
        cache = torch.zeros((num_blocks, block_size, *x.shape[1:]), dtype=x.dtype, device=x.device)
        if poison:
            cache.view(torch.uint8).fill_(NAN_CODE[x.dtype]) if x.dtype in NAN_CODE else cache.fill_(math.nan)
        cache.view(torch.uint8).flatten(0, 1)[slots.to(x.device)] = x.view(torch.uint8)
        caches.append(cache)
    return caches, table


def sequence_rows(cache: torch.Tensor, table_row: torch.Tensor, n: int) -> torch.Tensor:
    """The first ``n`` rows of one sequence of a paged cache ``[num_blocks, block_size, ...]``, its block-table
    row ``table_row``: ``[n, ...]``."""
    blocks = table_row[: math.ceil(n / cache.shape[1])].long()
    return cache[blocks.to(cache.device)].flatten(0, 1)[:n]


def ordered_codes(x: torch.Tensor) -> torch.Tensor:
    """FP8 codes mapped to integers whose difference counts representable steps (ulps; sign-magnitude order)."""
    c = x.view(torch.uint8).int()
    mag = c & 0x7F
    return torch.where((c & 0x80) != 0, -mag, mag)


def fp8_ulps(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Distance in FP8 codes between two FP8 tensors of the same type."""
    return (ordered_codes(a) - ordered_codes(b)).abs()


def ulps_as_fp8(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """|a - b| in units of one e4m3 ulp at the larger magnitude (16-bit outputs)."""
    a, b = a.double(), b.double()
    mag = torch.maximum(a.abs(), b.abs()).clamp_min(2.0**-9)
    ulp = torch.exp2(torch.floor(torch.log2(mag)) - 3)
    return (a - b).abs() / ulp


def ulp_agreement(a: torch.Tensor, b: torch.Tensor) -> float:
    """Fraction of the elements within 1 FP8 ulp of each other (FP8: codes; 16-bit: ``ulps_as_fp8``)."""
    if a.numel() == 0:
        return 1.0
    d = fp8_ulps(a, b) if a.dtype in NAN_CODE else ulps_as_fp8(a, b)
    return float((d <= 1).double().mean())
