"""The NaN rule (docs/design.md §1, docs/numerics.md "NaN"), on the CPU implementation and the fp64 reference alike.

Each test poisons one input of a random problem and checks, against the reference on the same input and
against the clean call, exactly which outputs become NaN: every case the rule specifies."""

from __future__ import annotations

import math

import pytest
import torch
from cases import NAN_CODE, make_case, ordered_codes

import fp8attn
from fp8attn.reference import ideal_attention, quantized_attention

FP8 = [torch.float8_e4m3fn, torch.float8_e4m3fnuz]


def run(q, k, v, kw, kv_tile=16):
    out, lse = fp8attn.forward(q, k, v, return_softmax_lse=True, kv_tile=kv_tile, **kw)
    ref, ref_lse = quantized_attention(q, k, v, kv_tile=kv_tile, **kw)
    return out, lse, ref, ref_lse


def nan_of(x: torch.Tensor) -> torch.Tensor:
    return torch.isnan(x.float())


def assert_same_finite(a: torch.Tensor, b: torch.Tensor, where: torch.Tensor) -> None:
    """a == b (FP8: within 1 code; 16-bit / lse: close) on the elements `where`."""
    if a.dtype in FP8:
        assert ((ordered_codes(a) - ordered_codes(b)).abs()[where] <= 1).all()
    else:
        torch.testing.assert_close(a.float()[where], b.float()[where], rtol=2e-2, atol=1e-2)


def check(out, lse, ref, ref_lse, want_out: torch.Tensor, want_lse: torch.Tensor) -> None:
    """NaN exactly at want_out / want_lse in both the op and the reference; the rest agrees."""
    assert torch.equal(nan_of(ref), want_out) and torch.equal(nan_of(ref_lse), want_lse)
    assert torch.equal(nan_of(out), want_out) and torch.equal(nan_of(lse), want_lse)
    assert_same_finite(out, ref, ~want_out)
    torch.testing.assert_close(lse[~want_lse], ref_lse[~want_lse], rtol=1e-4, atol=1e-4)


def poison_fp8(x: torch.Tensor, idx) -> torch.Tensor:
    x = x.clone()
    x.view(torch.uint8)[idx] = NAN_CODE[x.dtype]
    return x


def dense_case(fp8, q_dtype=None, causal=True, fp8_out=True, **kw):
    return make_case(q_lens=[24] * 2, k_lens=[40] * 2, heads=4, kv_heads=2, head_dim=64, fp8=fp8,
                     q_dtype=q_dtype or fp8, causal=causal, fp8_out=fp8_out, seed=3, **kw)


@pytest.mark.parametrize("fp8", FP8)
@pytest.mark.parametrize("q_dtype", ["fp8", torch.bfloat16])
def test_nan_in_q_row(fp8, q_dtype):
    """NaN in one element of a query row's q: that row's whole output and its lse are NaN (not 0 / -inf)."""
    case = dense_case(fp8, None if q_dtype == "fp8" else q_dtype)
    (q, k, v), kw = case.call_args()
    b, i, h = 1, 7, 2
    if q.dtype in FP8:
        q = poison_fp8(q, (b, i, h, 5))
    else:
        q = q.clone()
        q[b, i, h, 5] = float("nan")
    out, lse, ref, ref_lse = run(q, k, v, kw)
    want_out = torch.zeros(out.shape, dtype=torch.bool)
    want_out[b, i, h] = True
    want_lse = torch.zeros(lse.shape, dtype=torch.bool)
    want_lse[b, h, i] = True
    check(out, lse, ref, ref_lse, want_out, want_lse)


@pytest.mark.parametrize("fp8", FP8)
def test_inf_in_16bit_q_saturates(fp8):
    case = dense_case(fp8, torch.float16)
    (q, k, v), kw = case.call_args()
    q = q.clone()
    q[0, 3, 1, :4] = float("inf")
    q[0, 3, 1, 4:8] = -float("inf")
    out, lse, ref, ref_lse = run(q, k, v, kw)
    none = torch.zeros(out.shape, dtype=torch.bool)
    check(out, lse, ref, ref_lse, none, torch.zeros(lse.shape, dtype=torch.bool))


@pytest.mark.parametrize("fp8", FP8)
@pytest.mark.parametrize("key", [0, 9, 30])  # key 0: the first visible tile of every row
def test_nan_in_visible_k(fp8, key):
    """NaN in a k row: every row of its kv head's group that sees the key (causal: rows i >= key - 16) is
    all NaN; rows that do not see it, the other kv head and the other batch entry are unaffected."""
    case = dense_case(fp8)
    (q, k, v), kw = case.call_args()
    k = poison_fp8(k, (0, key, 1, 3))
    out, lse, ref, ref_lse = run(q, k, v, kw)
    shift = 40 - 24
    sees = torch.arange(24) + shift >= key  # [Sq]
    want_out = torch.zeros(out.shape, dtype=torch.bool)
    want_out[0, sees, 2:] = True  # q heads 2, 3 read kv head 1
    want_lse = torch.zeros(lse.shape, dtype=torch.bool)
    want_lse[0, 2:, sees] = True
    check(out, lse, ref, ref_lse, want_out, want_lse)
    assert want_out.any() and (~want_out).any()


@pytest.mark.parametrize("fp8", FP8)
@pytest.mark.parametrize("fp8_out", [True, False])
def test_nan_in_visible_v(fp8, fp8_out):
    """NaN in one element (column d) of a v row: that column is NaN in every row that sees the key; every
    other column, and lse, stay finite."""
    case = dense_case(fp8, causal=False, fp8_out=fp8_out)
    (q, k, v), kw = case.call_args()
    v = poison_fp8(v, (1, 17, 0, 11))
    out, lse, ref, ref_lse = run(q, k, v, kw)
    want_out = torch.zeros(out.shape, dtype=torch.bool)
    want_out[1, :, :2, 11] = True  # every row sees key 17; q heads 0, 1 read kv head 0
    check(out, lse, ref, ref_lse, want_out, torch.zeros(lse.shape, dtype=torch.bool))


@pytest.mark.parametrize("fp8", FP8)
@pytest.mark.parametrize("mask", ["causal", "window"])
def test_nan_in_masked_k_has_no_effect(fp8, mask):
    """NaN in the k of keys a row does not see, in the rows' own tiles too: those rows equal the clean call."""
    if mask == "causal":
        case, bad_keys = dense_case(fp8), [33, 38, 39]  # row i sees keys <= i + 16: rows 0..16 never see 33+
        blind = torch.arange(24) + 16 < 33
    else:
        case = dense_case(fp8, causal=False, window=(4, -1))  # row i sees keys >= i + 12
        bad_keys, blind = [0, 5, 11], torch.ones(24, dtype=torch.bool)
    (q, k, v), kw = case.call_args()
    clean, clean_lse = fp8attn.forward(q, k, v, return_softmax_lse=True, kv_tile=16, **kw)
    for j in bad_keys:
        k = poison_fp8(k, (0, j, slice(None), slice(None)))
    out, lse, ref, ref_lse = run(q, k, v, kw)
    rows = blind.view(1, -1, 1, 1).expand(out.shape).clone()
    rows[1] = False  # batch entry 1 is clean anyway
    assert not nan_of(out)[0][blind].any() and not nan_of(ref)[0][blind].any()
    assert torch.equal(out.view(torch.uint8)[0][blind], clean.view(torch.uint8)[0][blind])
    assert torch.equal(lse[0][:, blind], clean_lse[0][:, blind])
    assert_same_finite(out, ref, rows)


@pytest.mark.parametrize("fp8", FP8)
def test_nan_outside_the_sequence_has_no_effect(fp8):
    """NaN in keys past seqused_k (dense and varlen), in the unused slots of a sequence's last cache block
    and in cache blocks no sequence uses: never read."""
    for layout in ["dense", "varlen", "paged"]:
        lens = ([20] * 2, [37] * 2) if layout == "dense" else ([20, 9], [37, 21])
        case = make_case(layout=layout, q_lens=lens[0], k_lens=lens[1], heads=4, kv_heads=2, head_dim=64, fp8=fp8,
                         causal=True, seed=8)
        (q, k, v), kw = case.call_args()
        clean = fp8attn.forward(q, k, v, **kw)
        if layout == "paged":
            # make_case leaves the tail of each last block and the spare blocks as NaN codes
            assert nan_of(k).any() and nan_of(v).any()
            out = clean
        else:
            used = [30, 15] if layout == "varlen" else [30, 30]
            kw["seqused_k"] = torch.tensor(used, dtype=torch.int32)
            clean = fp8attn.forward(q, k, v, **kw)
            k2, v2 = k.clone(), v.clone()
            for b, n in enumerate(used):
                rows = slice(n, lens[1][b]) if layout == "dense" else slice(sum(lens[1][:b]) + n,
                                                                            sum(lens[1][: b + 1]))
                idx = (b, rows) if layout == "dense" else (rows,)
                k2.view(torch.uint8)[idx] = NAN_CODE[fp8]
                v2.view(torch.uint8)[idx] = NAN_CODE[fp8]
            out = fp8attn.forward(q, k2, v2, **kw)
            ref, _ = quantized_attention(q, k2, v2, kv_tile=64, **kw)
            assert not nan_of(ref).any()
        assert not nan_of(out).any()
        assert torch.equal(out.view(torch.uint8), clean.view(torch.uint8))


@pytest.mark.parametrize("fp8", FP8)
def test_empty_rows_stay_zero(fp8):
    """Rows with no visible key (causal with Sq > Sk: the first 8 rows) give 0 and lse = -inf, with NaN in
    every k and v row they do not see."""
    case = make_case(q_lens=[12], k_lens=[4], heads=4, kv_heads=2, head_dim=64, fp8=fp8, causal=True,
                     fp8_out=False, seed=9)
    (q, k, v), kw = case.call_args()
    k = poison_fp8(k, (0, 3))  # key 3 is seen by the last row only
    v = poison_fp8(v, (0, 3))
    out, lse, ref, ref_lse = run(q, k, v, kw)
    assert (out[0, :8].float() == 0).all() and (lse[0, :, :8] == -math.inf).all()
    assert (ref[0, :8].float() == 0).all() and (ref_lse[0, :, :8] == -math.inf).all()
    assert nan_of(out[0, 11]).all() and nan_of(ref[0, 11]).all()
    # Rows 8-10 see keys before 3: their lse stays finite (their out reads key 3's NaN v times P = 0 in the
    # same tile: unspecified by the rule).
    assert torch.isfinite(lse[0, :, 8:11]).all() and torch.isfinite(ref_lse[0, :, 8:11]).all()


def test_ideal_reference_propagates_nan():
    """ideal_attention is a NaN oracle too: NaN in a visible k makes the row NaN, a masked one does not."""
    case = dense_case(torch.float8_e4m3fn)
    (q, k, v), kw = case.call_args()
    o, lse = ideal_attention(poison_fp8(q, (0, 2, 0, 0)), k, v, **kw)
    assert torch.isnan(o[0, 2, 0]).all() and torch.isnan(lse[0, 0, 2])
    o, lse = ideal_attention(q, poison_fp8(k, (0, 39, 0, 0)), v, **kw)  # seen by the last row only
    assert torch.isnan(lse[0, :2, 23]).all() and not torch.isnan(lse[0, :, :23]).any()
    assert not torch.isnan(o[0, :23]).any()
