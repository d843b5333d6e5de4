"""fp8attn.write_kv_cache: every token lands at its slot, quantized like the kernels quantize."""

from __future__ import annotations

import pytest
import torch
from cases import kv_args

import fp8attn


@pytest.mark.parametrize("fp8", [torch.float8_e4m3fn, torch.float8_e4m3fnuz])
@pytest.mark.parametrize("src_dtype", [torch.bfloat16, torch.float16, "fp8"])
def test_write_kv_cache(fp8, src_dtype):
    T, H, D, nb, bs = 37, 2, 64, 9, 16
    key, value = torch.randn(T, H, D) * 3, torch.randn(T, H, D) * 3
    ks, vs = torch.tensor([0.02]), torch.tensor([0.03])
    if src_dtype == "fp8":
        key, value = fp8attn.quantize(key, ks, fp8), fp8attn.quantize(value, vs, fp8)
    else:
        key, value = key.to(src_dtype), value.to(src_dtype)
    slots = torch.randperm(nb * bs)[:T]
    slots[5] = -1  # padding token: skipped
    kc = torch.full((nb, bs, H, D), 0x7F, dtype=torch.uint8).view(fp8)
    vc = kc.clone()
    fp8attn.write_kv_cache(key, value, kc, vc, slots, ks, vs)
    k_ref = key if src_dtype == "fp8" else fp8attn.quantize(key, ks, fp8)
    v_ref = value if src_dtype == "fp8" else fp8attn.quantize(value, vs, fp8)
    flat_k, flat_v = kc.view(-1, H, D), vc.view(-1, H, D)
    keep = slots >= 0
    assert torch.equal(flat_k[slots[keep]].view(torch.uint8), k_ref[keep].view(torch.uint8))
    assert torch.equal(flat_v[slots[keep]].view(torch.uint8), v_ref[keep].view(torch.uint8))
    untouched = torch.ones(nb * bs, dtype=torch.bool)
    untouched[slots[keep]] = False
    assert (flat_k[untouched].view(torch.uint8) == 0x7F).all()


def test_write_kv_cache_16bit_cache():
    key = torch.randn(5, 2, 64, dtype=torch.bfloat16)
    kc = torch.zeros(2, 16, 2, 64, dtype=torch.bfloat16)
    vc = kc.clone()
    fp8attn.write_kv_cache(key, key, kc, vc, torch.tensor([3, 17, 0, 31, 8]))
    assert torch.equal(kc.view(-1, 2, 64)[[3, 17, 0, 31, 8]], key)


@pytest.mark.parametrize(
    "match,mutate",
    [
        ("slot_mapping entry", lambda a: a.update(slot_mapping=torch.tensor([0, 1, 999]))),
        ("key must be \\[T, Hkv, D\\]", lambda a: a.update(key=a["key"][0])),
        ("value must have key's shape", lambda a: a.update(value=a["value"][:2])),
        ("k_scale must be positive", lambda a: a.update(k_scale=torch.tensor([0.0]))),
        ("key must have the cache's dtype", lambda a: a.update(key=a["key"].float(), value=a["value"].float())),
        ("slot_mapping must be int64 or int32", lambda a: a.update(slot_mapping=a["slot_mapping"].float())),
        (
            "key_cache heads/head dim",
            lambda a: a.update(
                key_cache=torch.zeros(4, 16, 2, 128, dtype=torch.float8_e4m3fn),
                value_cache=torch.zeros(4, 16, 2, 128, dtype=torch.float8_e4m3fn),
            ),
        ),
    ],
)
def test_write_kv_cache_errors(match, mutate):
    a = kv_args()
    mutate(a)
    with pytest.raises((ValueError, TypeError), match=match):
        fp8attn.write_kv_cache(**a)


def test_write_kv_cache_interleaved_cache():
    """vLLM's cache [num_blocks, Hkv, block_size, 2D] split into K and V halves: strided views of one storage
    that ATen's overlap status leaves undecided, disjoint, so accepted; an overlapping pair of such views is not."""
    nb, H, bs, D = 3, 2, 16, 64
    kv = torch.zeros(nb, H, bs, 2 * D, dtype=torch.bfloat16)
    kc, vc = kv.transpose(1, 2).split(D, dim=-1)
    key, value = torch.randn(5, H, D, dtype=torch.bfloat16), torch.randn(5, H, D, dtype=torch.bfloat16)
    slots = torch.tensor([0, 17, 5, 40, 33])
    fp8attn.write_kv_cache(key, value, kc, vc, slots)
    assert torch.equal(kc.reshape(-1, H, D)[slots], key) and torch.equal(vc.reshape(-1, H, D)[slots], value)
    shifted = kv.transpose(1, 2)[..., D // 2: D // 2 + D]  # half over K, half over V
    with pytest.raises(ValueError, match="must not share memory with"):
        fp8attn.write_kv_cache(key, value, kc, shifted, slots)
