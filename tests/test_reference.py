"""The fp64 references themselves: quantized_attention_bounds against quantized_attention."""

from __future__ import annotations

import math

import pytest
import torch
from cases import make_case

from fp8attn.reference import ideal_attention, quantized_attention, quantized_attention_bounds


def _bits(x: torch.Tensor) -> torch.Tensor:
    return x.view(torch.uint8) if x.element_size() == 1 else x


@pytest.mark.parametrize("layout", ["dense", "varlen", "paged"])
@pytest.mark.parametrize("fp8_out", [True, False])
@pytest.mark.parametrize("l_mode", ["quantized", "exact"])
def test_bounds_contain_the_reference(layout, fp8_out, l_mode):
    """out / lse are quantized_attention's bit for bit; lo <= ref <= hi; with tie_tol=0 the bounds collapse."""
    dense = layout == "dense"
    case = make_case(
        layout=layout,
        q_lens=[23] * 2 if dense else [23, 0, 9],
        k_lens=[90] * 2 if dense else [90, 4, 9],
        heads=6,
        kv_heads=2,
        head_dim=64,
        fp8_out=fp8_out,
        softcap=7.5,
        causal=True,
        seed=3,
    )
    (q, k, v), kw = case.call_args()
    out, lse = quantized_attention(q, k, v, kv_tile=16, l_mode=l_mode, **kw)
    for tol in (0.0, 2.0**-20, 2.0**-10):
        b = quantized_attention_bounds(q, k, v, kv_tile=16, l_mode=l_mode, tie_tol=tol, **kw)
        assert torch.equal(_bits(b.out), _bits(out)) and torch.equal(b.lse, lse)
        assert (b.out_lo.float() <= out.float()).all() and (out.float() <= b.out_hi.float()).all()
        assert (b.lse_lo <= lse).all() and (lse <= b.lse_hi).all()
        rows = ~b.tie  # rows without a tie: the bounds are the reference itself
        assert torch.equal(b.lse_lo[rows], lse[rows]) and torch.equal(b.lse_hi[rows], lse[rows])
        if tol == 0.0:
            assert not b.tie.any()
            assert torch.equal(_bits(b.out_lo), _bits(out)) and torch.equal(_bits(b.out_hi), _bits(out))
    assert b.tie.any()  # 2^-10 is far wider than float32 rounding: plenty of P codes count as ties


def test_constructed_tie():
    """p_scale = 1/116 puts the code of p = 1 on the tie between the FP8 values 112 and 120: the bounds are
    the attention with either code (one key: lse = s + ln(p8 * p_scale), O = v whatever p8 is)."""
    case = make_case(q_lens=[1], k_lens=[1], heads=1, kv_heads=1, head_dim=64, fp8_out=False, p_scale=1 / 116, seed=5)
    (q, k, v), kw = case.call_args()
    ps = float(kw["p_scale"])
    assert float(torch.tensor(1 / ps, dtype=torch.float32)) == 116.0  # exactly on the tie
    _, s = ideal_attention(q, k, v, **kw)  # one key: lse = its logit
    b = quantized_attention_bounds(q, k, v, **kw)
    assert b.tie.all()
    torch.testing.assert_close(b.lse_lo.double(), s + math.log(112 * ps), rtol=0, atol=1e-6)
    torch.testing.assert_close(b.lse_hi.double(), s + math.log(120 * ps), rtol=0, atol=1e-6)
    torch.testing.assert_close(b.lse.double(), s + math.log(112 * ps), rtol=0, atol=1e-6)  # ties round to even
    assert (b.out_lo.float() <= b.out.float()).all() and (b.out.float() <= b.out_hi.float()).all()
    assert not quantized_attention_bounds(q, k, v, tie_tol=0.0, **kw).tie.any()


def test_tie_tol_must_be_non_negative():
    q = torch.randn(1, 4, 1, 64).to(torch.float8_e4m3fn)
    with pytest.raises(ValueError, match="tie_tol"):
        quantized_attention_bounds(q, q, q, tie_tol=-1.0)
