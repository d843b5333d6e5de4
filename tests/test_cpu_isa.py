"""The CPU kernels of every instruction set this machine runs (FP8ATTN_CPU_ISA forces one): the vector kernels
give the scalar oracle's bits, the AMX kernel agrees with it to rounding (its tile products sum in the hardware's
order); the reference's agreement, thread-count independence and the NaN rule on each."""

from __future__ import annotations

import math

import pytest
import torch
from cases import make_case
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_forward_cpu import assert_matches_reference

import fp8attn
from fp8attn.reference import quantized_attention_bounds
from fp8attn.testing import NAN_CODE, ulp_agreement

ISAS = list(torch.ops.fp8attn.cpu_isas())
TILED = [i for i in ISAS if i == "amx"]  # kernels whose products are tile products (docs/cpu.md)
EXACT = [i for i in ISAS if i not in TILED]
FP8 = [torch.float8_e4m3fn, torch.float8_e4m3fnuz]
# The AMX kernel against the oracle: its logits differ in the last fp32 bits, which now and then moves a P (or
# an output) across an FP8 rounding boundary: outputs within 1 FP8 ulp, lse within 1e-4 of the oracle's.
TILED_MIN_AGREEMENT = 0.99
TILED_LSE_TOL = 1e-4


def run(isa: str, case, kv_tile: int = 0):
    """The call on one instruction set, proving that its kernel ran (when there is a query row to run it on)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("FP8ATTN_CPU_ISA", isa)
        assert torch.ops.fp8attn.cpu_isa() == isa
        before = torch.ops.fp8attn.cpu_isa_calls(isa)
        (q, k, v), kw = case.call_args()
        out, lse = fp8attn.forward(q, k, v, return_softmax_lse=True, kv_tile=kv_tile, **kw)
        assert torch.ops.fp8attn.cpu_isa_calls(isa) == before + (q.numel() > 0)  # no query row: no kernel runs
    return out, lse


def bits(x: torch.Tensor) -> torch.Tensor:
    """Bit patterns (NaNs of any payload as one value, so NaN positions are compared)."""
    if x.dtype == torch.float32:
        return torch.where(torch.isnan(x), torch.full_like(x, math.nan), x).view(torch.int32)
    if x.dtype in FP8:
        return x.view(torch.uint8)
    return torch.where(torch.isnan(x.float()), torch.full_like(x, math.nan), x).view(torch.int16)


def assert_same_bits(a: tuple, b: tuple) -> None:
    for x, y in zip(a, b, strict=True):
        assert torch.equal(bits(x), bits(y))


def assert_near_oracle(result: tuple, oracle: tuple) -> None:
    """A tiled kernel's (out, lse) against the oracle's: NaN and -inf where the oracle has them, outputs within
    1 FP8 ulp (TILED_MIN_AGREEMENT of them), every finite lse within TILED_LSE_TOL."""
    (out, lse), (ref_out, ref_lse) = result, oracle
    assert torch.equal(out.float().isnan(), ref_out.float().isnan()) and torch.equal(lse.isnan(), ref_lse.isnan())
    assert torch.equal(torch.isneginf(lse), torch.isneginf(ref_lse))
    fin = torch.isfinite(ref_lse)
    assert (lse[fin] - ref_lse[fin]).abs().max().item() <= TILED_LSE_TOL if fin.any() else True
    keep = ~ref_out.float().isnan()
    assert ulp_agreement(out[keep], ref_out[keep]) >= TILED_MIN_AGREEMENT


def assert_like_oracle(isa: str, result: tuple, oracle: tuple) -> None:
    """The oracle's bits on a vector kernel, its values to rounding on a tiled one."""
    if isa in TILED:
        assert_near_oracle(result, oracle)
    else:
        assert_same_bits(result, oracle)


def test_the_machine_runs_more_than_scalar():
    """The dispatch lists the best instruction set first and always keeps the scalar oracle: AMX where the CPU
    has it, then the two byte-lookup AVX-512 kernels, the VBMI one ahead on Intel CPUs (isa.cpp says why)."""
    assert ISAS[-1] == "scalar" and torch.ops.fp8attn.cpu_isa() in ISAS
    assert ISAS[: len(TILED)] == TILED
    lookup = {"avx512_bf16", "avx512_vbmi"} & set(ISAS)
    assert set(EXACT[: len(lookup)]) == lookup
    assert EXACT[len(lookup):] == [i for i in ["avx512", "avx2", "scalar"] if i in ISAS]


def test_unknown_isa_is_refused(monkeypatch):
    monkeypatch.setenv("FP8ATTN_CPU_ISA", "avx9000")
    case = make_case(q_lens=[3], k_lens=[9], seed=1)
    (q, k, v), kw = case.call_args()
    with pytest.raises(ValueError, match="FP8ATTN_CPU_ISA=avx9000"):
        fp8attn.forward(q, k, v, **kw)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    layout=st.sampled_from(["dense", "varlen", "paged"]),
    batch=st.integers(1, 3),
    q_len=st.integers(1, 70),
    k_extra=st.integers(0, 130),
    group=st.sampled_from([(4, 4), (8, 2), (6, 1), (32, 8)]),
    head_dim=st.sampled_from([64, 80, 96, 112, 128, 192, 256]),
    fp8=st.sampled_from(FP8),
    q_dtype=st.sampled_from(["fp8", torch.bfloat16, torch.float16]),
    out=st.sampled_from(["fp8", torch.bfloat16, torch.float16]),
    mask=st.sampled_from(["none", "causal", "window", "causal_window"]),
    softcap=st.sampled_from([0.0, 0.0, 7.5]),
    kv_tile=st.sampled_from([0, 7, 16, 64, 127, 128]),
    per_head=st.booleans(),
    sinks=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_every_isa_gives_the_oracles_result(layout, batch, q_len, k_extra, group, head_dim, fp8, q_dtype, out, mask,
                                        softcap, kv_tile, per_head, sinks, seed):
    g = torch.Generator().manual_seed(seed)
    if layout == "dense":
        q_lens, k_lens = [q_len] * batch, [q_len + k_extra] * batch
    else:
        q_lens = [int(torch.randint(0, q_len + 1, (1,), generator=g)) for _ in range(batch)]
        k_lens = [n + int(torch.randint(0, k_extra + 1, (1,), generator=g)) for n in q_lens]
    window = {"none": (-1, -1), "causal": (-1, -1), "window": (17, 5), "causal_window": (23, -1)}[mask]
    case = make_case(layout=layout, q_lens=q_lens, k_lens=k_lens, heads=group[0], kv_heads=group[1],
                     head_dim=head_dim, fp8=fp8, q_dtype=fp8 if q_dtype == "fp8" else q_dtype, fp8_out=out == "fp8",
                     causal=mask.startswith("causal"), window=window, softcap=softcap, per_head=per_head,
                     sinks=sinks, seed=seed)
    if out != "fp8":
        case.kwargs["out_dtype"] = out
    oracle = run("scalar", case, kv_tile)
    for isa in ISAS[:-1]:
        assert_like_oracle(isa, run(isa, case, kv_tile), oracle)


@pytest.mark.parametrize("q_len", [1, 2, 5])
def test_decode_batches_give_the_oracles_result(q_len):
    """Decode-like batches (a few query rows per kv head: several kv heads of a sequence in one pass) on a
    paged cache with per-head scales, GQA and MQA, bf16 and FP8 outputs, with and without sinks."""
    for heads, kv_heads, fp8_out, sinks in [(32, 8, True, False), (16, 1, False, True), (8, 8, True, True)]:
        case = make_case(layout="paged", q_lens=[q_len] * 5, k_lens=[q_len + n for n in (900, 3, 200, 77, 1500)],
                         heads=heads, kv_heads=kv_heads, head_dim=128, q_dtype=torch.bfloat16, per_head=True,
                         fp8_out=fp8_out, causal=True, block_size=32, sinks=sinks, seed=q_len)
        oracle = run("scalar", case)
        for isa in ISAS[:-1]:
            assert_like_oracle(isa, run(isa, case), oracle)


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("fp8", FP8)
def test_isa_matches_quantized_reference(isa, fp8):
    """Each path on its own against the fp64 reference at its tiling (a prefill, a chunked continuation and
    decodes on a paged cache, GQA, causal, a 16-bit q, a window, sinks)."""
    case = make_case(layout="paged", q_lens=[150, 33, 1, 1, 4], k_lens=[150, 200, 517, 64, 90], heads=8, kv_heads=2,
                     head_dim=128, fp8=fp8, q_dtype=torch.bfloat16, causal=True, window=(100, -1), sinks=True, seed=5)
    (q, k, v), kw = case.call_args()
    out, lse = run(isa, case)
    assert_matches_reference(out, lse, quantized_attention_bounds(q, k, v, kv_tile=64, **kw))


@pytest.mark.parametrize("isa", ISAS)
def test_thread_count_does_not_change_bits(isa):
    """One thread and two (which split work differently: heads per item, item order) give the same bits."""
    cases = [make_case(q_lens=[300], k_lens=[300], heads=8, kv_heads=2, head_dim=64, causal=True, seed=3),
             make_case(layout="paged", q_lens=[1] * 3, k_lens=[700, 5, 333], heads=32, kv_heads=8, head_dim=128,
                       seed=4),
             make_case(layout="varlen", q_lens=[40, 0, 97], k_lens=[40, 3, 300], heads=4, kv_heads=1, head_dim=96,
                       q_dtype=torch.float16, fp8_out=False, softcap=7.5, seed=6)]
    threads = torch.get_num_threads()
    try:
        results = []
        for n in (1, 2):
            torch.set_num_threads(n)
            results.append([run(isa, c) for c in cases])
    finally:
        torch.set_num_threads(threads)
    for a, b in zip(*results, strict=True):
        assert_same_bits(a, b)


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("fp8", FP8)
def test_every_fp8_code(isa, fp8):
    """K and V holding every FP8 code but NaN decode like the scalar oracle: one key per sequence, so the
    output is that key's v row and the lse follows its k row (q one-hot on a dimension)."""
    codes = torch.tensor([c for c in range(256) if c != NAN_CODE[fp8] and not (fp8 == FP8[0] and c == 0xFF)],
                         dtype=torch.uint8)
    n = codes.numel()
    D = 128
    rows = (n + D - 1) // D * 2
    flat = codes.repeat(rows * D // n + 1)[: rows * D]
    kv = flat.view(rows, 1, 1, D).view(fp8)
    q = torch.zeros(rows, 1, 1, D, dtype=torch.uint8)
    q[torch.arange(rows), 0, 0, torch.arange(rows) % D] = 0x38  # 1.0 in e4m3fn (0.5 in fnuz)
    case = make_case(q_lens=[1], k_lens=[1], heads=1, kv_heads=1, head_dim=D, fp8=fp8, fp8_out=False, seed=0)
    case.q, case.k, case.v = q.view(fp8), kv, kv
    case.kwargs.update(q_descale=None, k_descale=None, v_descale=None)
    out, lse = run(isa, case)
    assert_same_bits((out, lse), run("scalar", case))
    torch.testing.assert_close(out.float(), kv.float().to(out.dtype).float(), rtol=0, atol=0)


def _nan_case(fp8, **kw):
    return make_case(q_lens=[20], k_lens=[90], heads=4, kv_heads=2, head_dim=64, fp8=fp8, fp8_out=False, seed=9, **kw)


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("fp8", FP8)
def test_nan_rule(isa, fp8):
    """The NaN rule (docs/design.md §1) on each path: a NaN in q or in the k of a key a row sees makes that row NaN
    (lse NaN), in the v of a seen key those columns; a NaN in the k of a masked key changes nothing."""
    nan = NAN_CODE[fp8]
    clean = _nan_case(fp8, causal=True)
    ref_out, ref_lse = run(isa, clean)

    def with_codes(tensor_name, index):
        case = _nan_case(fp8, causal=True)
        t = getattr(case, tensor_name).clone()
        t.view(torch.uint8)[index] = nan
        setattr(case, tensor_name, t)
        return run(isa, case)

    # q row 5 of head 3: that row only
    out, lse = with_codes("q", (0, 5, 3, 17))
    assert torch.isnan(out[0, 5, 3]).all() and torch.isnan(lse[0, 3, 5])
    keep = torch.ones_like(lse, dtype=torch.bool)
    keep[0, 3, 5] = False
    assert torch.equal(bits(lse[keep]), bits(ref_lse[keep]))
    # k of key 75 (kv head 1 = q heads 2, 3): rows 5.. see it (causal, shift 70); rows 0-4 do not
    out, lse = with_codes("k", (0, 75, 1, 0))
    assert torch.isnan(lse[0, 2:, 5:]).all() and torch.isnan(out[0, 5:, 2:]).all()
    assert torch.equal(bits(out[0, :5]), bits(ref_out[0, :5]))
    assert torch.equal(bits(out[0, :, :2]), bits(ref_out[0, :, :2]))
    # v of key 75, column 7: the rows that see it have column 7 NaN and the other columns as before
    out, lse = with_codes("v", (0, 75, 1, 7))
    assert torch.isnan(out[0, 5:, 2:, 7]).all() and not torch.isnan(lse).any()
    others = torch.ones(64, dtype=torch.bool)
    others[7] = False
    assert torch.equal(bits(out[..., others]), bits(ref_out[..., others])) and torch.equal(bits(lse), bits(ref_lse))
    # k of key 89, masked for every row but the last: no effect on rows 0-18
    out, lse = with_codes("k", (0, 89, 0, 3))
    assert torch.equal(bits(out[0, :19]), bits(ref_out[0, :19])) and torch.isnan(out[0, 19, :2]).all()
