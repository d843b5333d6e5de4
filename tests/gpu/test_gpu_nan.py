"""The NaN rule (docs/design.md §1) in the GPU kernels: a NaN in a row's q or in the k of a key the row sees
makes the row's output and lse NaN; a NaN in the v of a seen key makes that output column NaN; a NaN
in the k of a key the row does not see, or in a cache slot past the sequence, changes nothing. Run
on the pipeline each call gets (the default pass of scripts/gpu_check.sh covers the Hopper wgmma
and decode kernels, its FP8ATTN_PIPELINE=f16 pass the portable one: the preference is read once per
process), both FP8 kinds, masked and unmasked, split and unsplit. Skipped without a GPU build (see conftest.py)."""

import pytest
import torch
from gpu_helpers import DEV, built_fp8_kind, built_head_dims, call, kernel_of, make_case

FN, FNUZ = torch.float8_e4m3fn, torch.float8_e4m3fnuz
NAN_CODE = {FN: 0x7F, FNUZ: 0x80}


def _dims():
    return built_head_dims() if torch.cuda.is_available() else []


def _nan_rows(out):
    """[B, S, H] bool: the rows whose output has a NaN (FP8 NaN code or float NaN), and [.., D] per element."""
    if out.dtype in (FN, FNUZ):
        c = out.cpu().view(torch.uint8)
        el = (c & 0x7F) == 0x7F if out.dtype == FN else c == 0x80
    else:
        el = out.cpu().float().isnan()
    return el.any(-1), el


def _poison(t, index):
    """t[index] = NaN (FP8: the kind's NaN code), in place."""
    if t.dtype in (FN, FNUZ):
        t.view(torch.uint8)[index] = NAN_CODE[t.dtype]
    else:
        t[index] = float("nan")


def _run(q, k, v, kw):
    name = kernel_of(q, k, v, device=DEV, **kw)
    out, lse = call(q, k, v, device=DEV, **kw)
    return name, out, lse.cpu()


def _need_kind(fp8):
    if not built_fp8_kind(fp8):
        pytest.skip(f"no {fp8} kernels in this build (FP8ATTN_FP8_KINDS)")


def _case(fp8, d, causal, q_dtype=None, Sq=37, Sk=203, out_dtype=torch.bfloat16):
    _need_kind(fp8)
    if d not in _dims():
        pytest.skip(f"head dim {d} not built")
    return make_case(B=2, Sq=Sq, Sk=Sk, H=4, Hkv=2, D=d, fp8=fp8, q_dtype=q_dtype or fp8, causal=causal,
                     out_dtype=out_dtype, seed=11)


@pytest.mark.parametrize("fp8", [FN, FNUZ])
@pytest.mark.parametrize("causal", [False, True])
def test_nan_q_row(fp8, causal):
    (q, k, v), kw = _case(fp8, 128, causal)
    _poison(q, (1, 5, 2, 17))  # one element of row 5, head 2, batch 1
    name, out, lse = _run(q, k, v, kw)
    rows, _ = _nan_rows(out)
    want = torch.zeros_like(rows)
    want[1, 5, 2] = True
    assert torch.equal(rows, want), name
    _, el = _nan_rows(out)
    assert bool(el[1, 5, 2].all()), f"{name}: a NaN q row must make its whole output NaN"
    assert bool(lse[1, 2, 5].isnan()), name
    assert int(lse.isnan().sum()) == 1, name


@pytest.mark.parametrize("fp8", [FN, FNUZ])
@pytest.mark.parametrize("key", [0, 70, 202])  # in the first KV tile, a middle one, the last key
def test_nan_k_visible_and_masked(fp8, key):
    """Causal, Sq = Sk: key j is seen by rows i >= j only; a NaN in its k reaches exactly those rows
    (of the kv head's q heads), whichever KV tile it is in (the first tile included: no skip drops it)."""
    (q, k, v), kw = _case(fp8, 128, True, Sq=203, Sk=203)
    _poison(k, (0, key, 1, 3))  # batch 0, kv head 1 (q heads 2, 3)
    name, out, lse = _run(q, k, v, kw)
    rows, _ = _nan_rows(out)
    want = torch.zeros_like(rows)
    want[0, key:, 2:4] = True
    assert torch.equal(rows, want), f"{name}: NaN rows {rows.nonzero().tolist()[:8]}"
    assert torch.equal(lse.isnan(), want.permute(0, 2, 1)), name


@pytest.mark.parametrize("fp8", [FN, FNUZ])
def test_nan_v_column(fp8):
    (q, k, v), kw = _case(fp8, 128, False)
    _poison(v, (1, 40, 0, 9))  # batch 1, key 40, kv head 0 (q heads 0, 1), column 9
    name, out, lse = _run(q, k, v, kw)
    _, el = _nan_rows(out)
    want = torch.zeros_like(el)
    want[1, :, 0:2, 9] = True
    assert torch.equal(el, want), name
    assert not bool(lse.isnan().any()), f"{name}: a NaN in v changes no lse"


@pytest.mark.parametrize("fp8", [FN, FNUZ])
def test_nan_16bit_q_and_fp8_out(fp8):
    """A 16-bit q stays NaN through sat(q / q_descale); FP8 output writes the kind's NaN code; +-inf
    in q saturates like any large value (finite output)."""
    (q, k, v), kw = _case(fp8, 128, False, q_dtype=torch.bfloat16, out_dtype=fp8)
    q[0, 3, 1, 0] = float("nan")
    q[0, 4, 1, 0] = float("inf")
    q[0, 6, 1, 5] = float("-inf")
    name = kernel_of(q, k, v, device=DEV, **kw)
    out, lse = call(q, k, v, device=DEV, **kw)
    rows, el = _nan_rows(out)
    want = torch.zeros_like(rows)
    want[0, 3, 1] = True
    assert torch.equal(rows, want), name
    assert bool(el[0, 3, 1].all()), name
    assert bool(lse.cpu()[0, 1, 3].isnan()) and int(lse.isnan().sum()) == 1, name


@pytest.mark.parametrize("splits", ["1", "7"])
@pytest.mark.parametrize("fp8", [FN, FNUZ])
def test_nan_decode_split(splits, fp8, monkeypatch):
    """Decode-shaped (q_len 1, GQA 4): the split KV range and the combine keep a NaN row NaN, and a
    split with no NaN does not hide it; other rows stay finite."""
    if 128 not in _dims():
        pytest.skip("head dim 128 not built")
    _need_kind(fp8)
    (q, k, v), kw = make_case(B=3, Sq=1, Sk=4096, H=8, Hkv=2, D=128, fp8=fp8, q_dtype=fp8, seed=5)
    _poison(k, (2, 3000, 1, 0))
    _poison(q, (0, 0, 5, 1))
    monkeypatch.setenv("FP8ATTN_NUM_SPLITS", splits)
    name = kernel_of(q, k, v, device=DEV, **kw)
    out, lse = call(q, k, v, device=DEV, **kw)
    rows, _ = _nan_rows(out)
    want = torch.zeros_like(rows)
    want[2, 0, 4:8] = True
    want[0, 0, 5] = True
    assert torch.equal(rows, want), name
    assert torch.equal(lse.cpu().isnan(), want.permute(0, 2, 1)), name


@pytest.mark.parametrize("fp8", [FN, FNUZ])
def test_nan_outside_the_sequence_never_read(fp8, monkeypatch):
    """Paged, sliding window: every unused cache slot holds the NaN code (make_case); no output or
    lse is NaN."""
    if 128 not in _dims():
        pytest.skip("head dim 128 not built")
    _need_kind(fp8)
    (q, k, v), kw = make_case(layout="paged", B=2, Sq=16, Sk=300, H=4, Hkv=2, D=128, fp8=fp8, q_dtype=fp8,
                              window=(8, 0), seed=3)
    out, lse = call(q, k, v, device=DEV, **kw)
    rows, _ = _nan_rows(out)
    assert not bool(rows.any()), kernel_of(q, k, v, device=DEV, **kw)
    assert not bool(lse.cpu().isnan().any())
