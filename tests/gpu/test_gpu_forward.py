"""The GPU forward kernels against the CPU implementation (the oracle, same KV tile) and the fp64
reference, over the op contract. Skipped without a GPU build (see conftest.py)."""
import os

import pytest
import torch
from gpu_helpers import (
    DEV,
    GPU_KV_TILE,
    WGMMA_LSE_TOL,
    WGMMA_MIN_AGREEMENT,
    agreement,
    built_head_dims,
    call,
    case_on_device,
    is_wgmma,
    kernel_of,
    lse_close,
    make_case,
)

import fp8attn
from fp8attn.reference import ideal_attention
from fp8attn.shapes import HEAD_DIMS

FN, FNUZ = torch.float8_e4m3fn, torch.float8_e4m3fnuz
BF16, FP16 = torch.bfloat16, torch.float16

_DIMS = None


def dims():
    global _DIMS
    if _DIMS is None:
        _DIMS = built_head_dims() if torch.cuda.is_available() else []
    return _DIMS


def need_dim(d):
    if d not in dims():
        pytest.skip(f"head dim {d} not built (FP8ATTN_HEAD_DIMS)")


def assert_decode_kernel(args, kw):
    """The call runs a decode kernel, unless FP8ATTN_PIPELINE prefers another pipeline (the portable pass of
    scripts/gpu_check.sh: the same checks then hold the f16 pipeline's split calls)."""
    if os.environ.get("FP8ATTN_PIPELINE", "decode") == "decode":
        assert kernel_of(*args, device=DEV, **kw).pipeline.startswith("decode")


def _rel_err_vs_ideal(out, args, kw):
    """Relative L2 error of an output (dequantized) against fp64 attention of the same inputs."""
    rkw = {k_: v_ for k_, v_ in kw.items() if k_ not in ("window", "out_dtype", "out_scale", "p_scale")}
    o_ref, _ = ideal_attention(*args, window_size=kw["window"], **rkw)
    o = out.cpu().double()
    if kw.get("out_scale") is not None:
        o = o * float(kw["out_scale"])
    return float((o - o_ref).norm() / o_ref.norm().clamp_min(1e-30))


def check_vs_cpu(args, kw, min_frac=0.999, lse_tol=2e-3, kv_tile=GPU_KV_TILE):
    kernel = kernel_of(*args, device=DEV, kv_tile=kv_tile, **kw)
    gout, glse = call(*args, device=DEV, kv_tile=kv_tile, **kw)
    cout, clse = call(*args, device="cpu", kv_tile=kv_tile, **kw)
    torch.cuda.synchronize()
    frac, bad_nan = agreement(gout, cout)
    assert not bad_nan, f"{kernel}: NaN where the CPU has none (poisoned output not fully written?)"
    if is_wgmma(kernel):  # rounding noise of the FP8 tensor cores' sums (gpu_helpers.py), same fp64 error
        min_frac, lse_tol = min(min_frac, WGMMA_MIN_AGREEMENT), max(lse_tol, WGMMA_LSE_TOL)
        e_gpu, e_cpu = _rel_err_vs_ideal(gout, args, kw), _rel_err_vs_ideal(cout, args, kw)
        assert e_gpu <= 1.05 * e_cpu + 1e-3, f"{kernel}: error vs fp64 {e_gpu:.5f}, CPU {e_cpu:.5f}"
    assert frac >= min_frac, f"{kernel}: only {frac:.5f} of outputs within 1 FP8 ulp of the CPU"
    assert lse_close(glse, clse, tol=lse_tol), f"{kernel}: lse differs from the CPU"
    return gout, glse


# ---- the contract grid ------------------------------------------------------------------------

@pytest.mark.parametrize("D", HEAD_DIMS)
@pytest.mark.parametrize("layout", ["dense", "varlen", "paged"])
def test_head_dims_layouts(D, layout):
    need_dim(D)
    args, kw = make_case(layout=layout, D=D, seed=D)
    check_vs_cpu(args, kw)


MASKS = {
    "none": dict(),
    "causal": dict(causal=True),
    "window": dict(window=(40, 0)),
    "window_lr": dict(window=(17, 9)),
    "causal_softcap": dict(causal=True, softcap=7.0),
    "softcap": dict(softcap=3.0),
}


@pytest.mark.parametrize("mask", list(MASKS))
@pytest.mark.parametrize("shape", [(37, 203), (203, 37), (130, 130), (1, 517)])
@pytest.mark.parametrize("layout", ["dense", "varlen", "paged"])
def test_masks(mask, shape, layout):
    need_dim(128)
    Sq, Sk = shape
    args, kw = make_case(layout=layout, Sq=Sq, Sk=Sk, seed=Sq + Sk, **MASKS[mask])
    check_vs_cpu(args, kw)


@pytest.mark.parametrize("heads", [(4, 4), (8, 2), (8, 1), (32, 8)])
@pytest.mark.parametrize("per_head", [False, True])
def test_gqa_and_per_head_scales(heads, per_head):
    need_dim(128)
    H, Hkv = heads
    args, kw = make_case(H=H, Hkv=Hkv, per_head=per_head, causal=True, Sq=70, Sk=150, seed=H * 10 + Hkv)
    check_vs_cpu(args, kw)


@pytest.mark.parametrize("q_dtype", [FN, BF16, FP16])
@pytest.mark.parametrize("out_dtype", [BF16, FP16, FN])
def test_dtypes(q_dtype, out_dtype):
    need_dim(128)
    args, kw = make_case(q_dtype=q_dtype, out_dtype=out_dtype, per_head=True, seed=3)
    check_vs_cpu(args, kw)


@pytest.mark.parametrize("p_scale", [None, 1.0 / 448.0, 1.0 / 240.0])
def test_p_scale(p_scale):
    need_dim(128)
    args, kw = make_case(p_scale=p_scale, out_dtype=FN, seed=5)
    check_vs_cpu(args, kw)


@pytest.mark.parametrize("seed", range(12))
def test_random_combinations(seed):
    g = torch.Generator().manual_seed(1000 + seed)
    pick = lambda xs: xs[int(torch.randint(len(xs), (1,), generator=g))]  # noqa: E731
    D = pick([d for d in HEAD_DIMS if d in dims()] or [128])
    need_dim(D)
    H, Hkv = pick([(4, 4), (8, 2), (6, 1)])
    args, kw = make_case(layout=pick(["dense", "varlen", "paged"]), D=D, H=H, Hkv=Hkv,
                         Sq=int(torch.randint(1, 150, (1,), generator=g)),
                         Sk=int(torch.randint(1, 400, (1,), generator=g)),
                         q_dtype=pick([FN, BF16, FP16]), out_dtype=pick([BF16, FP16, FN]),
                         per_head=pick([False, True]), page=pick([16, 32, 48]), seed=seed,
                         **MASKS[pick(list(MASKS))])
    check_vs_cpu(args, kw)


def test_fnuz():
    need_dim(128)
    try:
        args, kw = make_case(fp8=FNUZ, q_dtype=BF16, out_dtype=FNUZ, causal=True, seed=9)
        call(*args, device=DEV, **kw)
    except (ValueError, RuntimeError) as e:
        pytest.skip(f"fnuz kernels not built: {e}")
    check_vs_cpu(args, kw)


def test_empty_and_masked_rows():
    need_dim(128)
    # window right < 0 relative to shift: early query rows see nothing -> 0 and lse = -inf
    args, kw = make_case(Sq=50, Sk=20, window=(0, 0), causal=True, seed=11)
    gout, glse = check_vs_cpu(args, kw)
    assert torch.isneginf(glse).any()
    assert not gout.float().isnan().any()


def test_zero_length_keys_varlen():
    """A sequence with no keys gives 0 and lse = -inf."""
    need_dim(128)
    args, kw = make_case(layout="varlen", seed=12)
    q, k, v = args
    cu_k = kw["cu_seqlens_k"]
    n0 = int(cu_k[1])
    kw["cu_seqlens_k"] = torch.cat([torch.zeros(2, dtype=torch.int32), cu_k[2:] - n0])
    gout, glse = check_vs_cpu((q, k[n0:], v[n0:]), kw)
    rows0 = int(kw["cu_seqlens_q"][1])
    assert torch.isneginf(glse[:, :rows0]).all() and (gout[:rows0].float() == 0).all()


# ---- properties -------------------------------------------------------------------------------

def test_matches_ideal_reference():
    need_dim(128)
    args, kw = make_case(q_dtype=BF16, out_dtype=BF16, causal=True, Sq=128, Sk=256, seed=21)
    gout, glse = call(*args, device=DEV, **kw)
    rkw = {k_: v_ for k_, v_ in kw.items() if k_ not in ("window", "out_dtype", "out_scale", "p_scale")}
    o_ref, lse_ref = ideal_attention(*args, window_size=kw["window"], **rkw)
    rel = (gout.double().cpu() - o_ref).norm() / o_ref.norm()
    assert rel < 0.05, f"relative error vs fp64 {rel:.4f}"
    fin = torch.isfinite(lse_ref)
    assert (glse.cpu().double()[fin] - lse_ref[fin]).abs().max() < 0.05


def test_bitwise_repeatable():
    need_dim(128)
    args, kw = make_case(layout="paged", causal=True, out_dtype=FN, seed=31)
    o1, l1 = call(*args, device=DEV, **kw)
    o2, l2 = call(*args, device=DEV, **kw)
    assert torch.equal(o1.view(torch.uint8), o2.view(torch.uint8)) and torch.equal(l1, l2)


def test_caller_out_strided():
    """A caller-provided out that is a strided view (a slice of a wider buffer) is written in place."""
    need_dim(128)
    args, kw = make_case(B=2, Sq=33, Sk=77, H=4, Hkv=2, seed=41)
    big = torch.full((2, 33, 6, 128), float("nan"), dtype=BF16, device=DEV)
    out = big[:, :, 1:5]
    call(*args, device=DEV, out=out, **kw)
    ref, _ = call(*args, device=DEV, **kw)
    assert torch.equal(out, ref)
    assert big[:, :, 0].isnan().all() and big[:, :, 5].isnan().all()


def test_cuda_graph_capture():
    need_dim(128)
    args, kw = make_case(layout="paged", causal=True, out_dtype=FN, q_dtype=BF16, seed=51)
    dev_args, dkw = case_on_device(args, kw)
    eager, else_ = call(*dev_args, device=DEV, **dkw)
    out = torch.empty_like(eager)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        call(*dev_args, device=DEV, out=out, **dkw)  # warm-up (lazy init) outside the graph
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    out.view(torch.uint8).zero_()
    with torch.cuda.graph(graph):
        _, glse = call(*dev_args, device=DEV, out=out, poison=False, **dkw)
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(out.view(torch.uint8), eager.view(torch.uint8))
    assert torch.equal(glse, else_)


@pytest.mark.parametrize("page", [1, 8, 16, 48, 64, 256])
@pytest.mark.parametrize("D", [64, 128, 256])
def test_decode_page_sizes(page, D):
    """The decode pipeline's copies: on sm_90 a page whose block size is a multiple of 16 (and D
    below 256) is read as TMA boxes of 16 tokens, other pages and a partial last page per row."""
    need_dim(D)
    for Sq in (1, 4):
        args, kw = make_case(layout="paged", B=2, Sq=Sq, Sk=1000 + 7 * Sq, H=32, Hkv=8, D=D, page=page,
                             causal=True, out_dtype=FN, seed=page + D + Sq)
        check_vs_cpu(args, kw)


@pytest.mark.parametrize("page", [8, 16, 24, 32, 128, 512])
@pytest.mark.parametrize("D", [128, 256])
@pytest.mark.parametrize("kv_tile", [64, 128])
def test_prefill_page_sizes(page, D, kv_tile):
    """The Hopper prefill producer's paged copies at pages smaller than a ring tile (8, 16, 32), not
    dividing it (24) and holding whole tiles (128, 512): TMA boxes of 16 keys where the block size is
    a multiple of 16 (16, 32, 128, 512), each row's cp.async otherwise (8, 24) and for the tail tiles.
    Varlen q over a shuffled, NaN-poisoned cache."""
    need_dim(D)
    for causal in (False, True):
        args, kw = make_case(layout="paged", B=3, Sq=190, Sk=1100, H=8, Hkv=2, D=D, page=page, causal=causal,
                             out_dtype=FN, seed=page + D + kv_tile + causal)
        check_vs_cpu(args, kw, kv_tile=kv_tile)


def test_split_kv_decode(monkeypatch):
    """Flash-decoding (split KV + combine). Each split quantizes P against its own running max, so
    the result is not the CPU's tile for tile; it must be as accurate (vs fp64) as the CPU's."""
    need_dim(128)
    monkeypatch.delenv("FP8ATTN_NUM_SPLITS", raising=False)
    for layout, Sq in (("paged", 1), ("paged", 4), ("dense", 16)):
        args, kw = make_case(layout=layout, B=2, Sq=Sq, Sk=3000, H=32, Hkv=8, causal=True, seed=61)
        gout, glse = call(*args, device=DEV, **kw)
        cout, clse = call(*args, device="cpu", **kw)
        assert not gout.float().isnan().any()
        e_gpu, e_cpu = _rel_err_vs_ideal(gout, args, kw), _rel_err_vs_ideal(cout, args, kw)
        assert e_gpu <= 1.25 * e_cpu + 1e-3, f"split-KV {layout} Sq={Sq}: err {e_gpu:.4f} vs CPU {e_cpu:.4f}"
        assert lse_close(glse, clse, tol=3e-2)  # l is a sum of per-split quantized p
        o2, _ = call(*args, device=DEV, **kw)
        assert torch.equal(gout, o2), "split-KV not bitwise repeatable"


@pytest.mark.parametrize("splits", [2, 5, 16, 64, 128])
@pytest.mark.parametrize("Sq", [1, 4])
@pytest.mark.parametrize("sinks", [False, True])
def test_decode_split_merge(monkeypatch, splits, Sq, sinks):
    """Split decode at 2 to 128 splits, 8- and 16-row kernels: varlen q over a paged cache, some q
    sequences empty, short k sequences (empty splits), FP8 out and lse; as accurate against fp64 as
    the CPU, and bitwise repeatable. With sinks the splits run without them and the combine kernel adds
    each row's sink once (the CPU holds it once)."""
    need_dim(128)
    monkeypatch.setenv("FP8ATTN_NUM_SPLITS", str(splits))
    args, kw = make_case(layout="paged", B=5, Sq=Sq, Sk=3000, H=32, Hkv=8, causal=True, out_dtype=FN,
                         sinks=sinks, seed=splits + Sq + 300 * sinks)
    assert_decode_kernel(args, kw)
    gout, glse = call(*args, device=DEV, **kw)
    cout, clse = call(*args, device="cpu", **kw)
    _, bad_nan = agreement(gout, cout)
    assert not bad_nan
    e_gpu, e_cpu = _rel_err_vs_ideal(gout, args, kw), _rel_err_vs_ideal(cout, args, kw)
    assert e_gpu <= 1.25 * e_cpu + 1e-3, f"{splits} splits, Sq={Sq}: err {e_gpu:.4f} vs CPU {e_cpu:.4f}"
    assert lse_close(glse, clse, tol=3e-2)
    o2, l2 = call(*args, device=DEV, **kw)
    assert torch.equal(gout.view(torch.uint8), o2.view(torch.uint8)) and torch.equal(glse, l2)


@pytest.mark.parametrize("splits", [1, 3, 16])
def test_decode_loose_max_seqlen_k(monkeypatch, splits):
    """max_seqlen_k is only a bound: a loose one (as CUDA-graph callers pass) over a block table only as
    wide as the sequences need changes nothing, bit for bit, at a fixed split count."""
    need_dim(128)
    monkeypatch.setenv("FP8ATTN_NUM_SPLITS", str(splits))
    for Sq in (1, 4):
        args, kw = make_case(layout="paged", B=4, Sq=Sq, Sk=1500, H=32, Hkv=8, causal=True, out_dtype=FN,
                             seed=90 + splits + Sq)
        assert_decode_kernel(args, kw)
        tight, tight_lse = call(*args, device=DEV, **kw)
        loose, loose_lse = call(*args, device=DEV, **dict(kw, max_seqlen_k=8 * kw["max_seqlen_k"]))
        assert torch.equal(tight.view(torch.uint8), loose.view(torch.uint8)) and torch.equal(tight_lse, loose_lse)
        cout, _ = call(*args, device="cpu", **kw)
        e_gpu, e_cpu = _rel_err_vs_ideal(loose, args, kw), _rel_err_vs_ideal(cout, args, kw)
        assert e_gpu <= 1.25 * e_cpu + 1e-3, f"{splits} splits, Sq={Sq}: err {e_gpu:.4f} vs CPU {e_cpu:.4f}"


def _kernels_of_call(args, kw) -> list[str]:
    """The names of the GPU kernels one call launches (torch.profiler's kernel records), after a warm-up call."""
    from torch.profiler import ProfilerActivity, profile

    dev_args, dkw = case_on_device(args, kw)
    out, _ = call(*dev_args, device=DEV, **dkw)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        call(*dev_args, device=DEV, out=out, poison=False, **dkw)
        torch.cuda.synchronize()
    return [e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA and "fp8attn" in e.name]


@pytest.mark.parametrize("splits", [1, 2, 64])
def test_decode_split_kernels(monkeypatch, splits):
    """A decode-shaped call launches one forward kernel, and one combine kernel when its KV range is split (the
    kernels the call launches, as the profiler records them; the decode kernel on the default pipelines)."""
    need_dim(128)
    monkeypatch.setenv("FP8ATTN_NUM_SPLITS", str(splits))
    args, kw = make_case(layout="paged", B=3, Sq=1, Sk=4500, H=32, Hkv=8, causal=True, out_dtype=FN, seed=17 + splits)
    names = _kernels_of_call(args, kw)
    assert sum("combine" not in n for n in names) == 1, names
    if kernel_of(*args, device=DEV, **kw).pipeline.startswith("decode"):
        assert any("fwd_kernel_decode" in n for n in names), names
    assert sum("fwd_combine_kernel" in n for n in names) == (splits > 1), names


@pytest.mark.parametrize("splits", [1, 8, 64])
def test_cuda_graph_split_decode(monkeypatch, splits):
    """Decode calls, unsplit and split (then merged by the combine kernel), of the 8- and 16-row kernels captured in
    CUDA graphs replay bit for bit as their eager calls, many times, alternating with each other and with eager
    calls."""
    need_dim(128)
    monkeypatch.setenv("FP8ATTN_NUM_SPLITS", str(splits))
    cases = []
    for i, (B, Sq) in enumerate(((3, 1), (2, 4))):
        args, kw = make_case(layout="paged", B=B, Sq=Sq, Sk=3000, H=32, Hkv=8, causal=True, out_dtype=FN,
                             seed=200 + i + splits)
        dev_args, dkw = case_on_device(args, kw)
        eager, eager_lse = call(*dev_args, device=DEV, **dkw)
        out = torch.empty_like(eager)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            _, lse = call(*dev_args, device=DEV, out=out, poison=False, **dkw)
        cases.append((dev_args, dkw, eager, eager_lse, graph, out, lse))
    for _ in range(3):
        for dev_args, dkw, eager, eager_lse, graph, out, lse in cases:
            out.view(torch.uint8).fill_(0x7F)
            lse.fill_(float("nan"))
            graph.replay()
            again, again_lse = call(*dev_args, device=DEV, **dkw)
            torch.cuda.synchronize()
            assert torch.equal(out.view(torch.uint8), eager.view(torch.uint8)) and torch.equal(lse, eager_lse)
            assert torch.equal(again.view(torch.uint8), eager.view(torch.uint8)) and torch.equal(again_lse, eager_lse)


def test_forced_splits_many(monkeypatch):
    need_dim(64)
    monkeypatch.setenv("FP8ATTN_NUM_SPLITS", "7")
    args, kw = make_case(layout="varlen", D=64, B=3, Sq=5, Sk=900, H=8, Hkv=2, window=(300, 0), seed=71)
    gout, glse = call(*args, device=DEV, **kw)
    cout, clse = call(*args, device="cpu", **kw)
    assert not gout.float().isnan().any()
    e_gpu, e_cpu = _rel_err_vs_ideal(gout, args, kw), _rel_err_vs_ideal(cout, args, kw)
    assert e_gpu <= 1.25 * e_cpu + 1e-3, f"err {e_gpu:.4f} vs CPU {e_cpu:.4f}"
    assert lse_close(glse, clse, tol=3e-2)


# ---- index overflow ---------------------------------------------------------------------------

def test_long_keys_64k():
    need_dim(64)
    args, kw = make_case(B=1, Sq=3, Sk=65536 + 77, H=2, Hkv=1, D=64, seed=81)
    check_vs_cpu(args, kw)


def test_many_cache_blocks():
    """A paged cache of 32768 blocks (block ids past 2^15, offsets past 2^31 bytes with D=256?)."""
    need_dim(128)
    args, kw = make_case(layout="paged", B=4, Sq=3, Sk=300, H=8, Hkv=8, D=128, page=16, num_blocks=32768, seed=91)
    # remap the used blocks to the top of the cache
    bt = kw["block_table"]
    hi = torch.arange(32768 - bt.numel(), 32768, dtype=torch.int32).view_as(bt)
    kc, vc = args[1], args[2]
    kc2, vc2 = kc.clone(), vc.clone()
    kc2[hi.flatten().long()] = kc[bt.flatten().long()]
    vc2[hi.flatten().long()] = vc[bt.flatten().long()]
    kw["block_table"] = hi
    check_vs_cpu((args[0], kc2, vc2), kw)


def test_large_row_offsets():
    """q/out offsets past 2^31 elements: B*Sq*H*D > 2^31 with 16-bit q."""
    need_dim(64)
    free = torch.cuda.mem_get_info()[0]
    if free < 24 * 2**30:
        pytest.skip("needs ~24 GiB of GPU memory")
    B, Sq, H, D = 1, 2**31 // (4 * 64) + 64, 4, 64  # rows*H*D just past 2^31
    q = torch.randn(B, Sq, H, D, device=DEV, dtype=BF16)
    k = torch.randn(1, 64, 1, D, device=DEV).to(FN)
    out = torch.empty(B, Sq, H, D, device=DEV, dtype=BF16)
    fp8attn.forward(q, k, k, out=out, softmax_scale=0.125)
    tail = slice(Sq - 3, Sq)
    cout, _ = call(q[:, tail].cpu(), k.cpu(), k.cpu(), device="cpu", softmax_scale=0.125)
    frac, bad = agreement(out[:, tail], cout)
    kernel = fp8attn.kernel_info(q, k, k, out=out, softmax_scale=0.125)
    assert not bad and frac >= (WGMMA_MIN_AGREEMENT if is_wgmma(kernel) else 0.999)


# ---- 128-key tiles (the Hopper wgmma pipeline; at D 256 two 64-key ring tiles per step) ----------

def need_kv128(D):
    need_dim(D)
    args, kw = make_case(D=D, seed=0)
    try:
        kernel_of(*args, device=DEV, kv_tile=128, **kw)
    except ValueError:
        pytest.skip("no 128-key kernel here (the Hopper wgmma pipeline: sm_90a build on compute capability 9.0)")


@pytest.mark.parametrize("D", [64, 128, 256])
@pytest.mark.parametrize("shape", [(150, 389), (203, 37), (1, 517), (300, 1000)])
@pytest.mark.parametrize("mask", list(MASKS))
@pytest.mark.parametrize("layout", ["dense", "varlen", "paged"])
def test_kv_tile_128(D, shape, mask, layout):
    """The CPU oracle at the same 128-key tiling (P quantized against the max of every 128 keys);
    decode shapes too (kv_tile 128 runs the wgmma pipeline for them)."""
    need_kv128(D)
    Sq, Sk = shape
    args, kw = make_case(layout=layout, D=D, Sq=Sq, Sk=Sk, H=8, Hkv=2, seed=D + Sq + Sk, **MASKS[mask])
    assert kernel_of(*args, device=DEV, kv_tile=128, **kw).kv_tile == 128
    check_vs_cpu(args, kw, kv_tile=128)


@pytest.mark.parametrize("D", [128, 256])
@pytest.mark.parametrize("causal", [False, True])
def test_kv_tile_128_items_per_block(D, causal):
    """More work items than blocks (the persistent blocks take several each): the next item's Q and
    KV tiles hand over behind the current one's, through one Q buffer at D 256."""
    need_kv128(D)
    args, kw = make_case(B=3, Sq=900, Sk=1100, H=16, Hkv=4, D=D, causal=causal, out_dtype=FN, seed=D + causal)
    check_vs_cpu(args, kw, kv_tile=128)


@pytest.mark.parametrize("q_dtype,out_dtype", [(BF16, FN), (FN, BF16), (FP16, FP16)])
def test_kv_tile_128_dtypes_gqa(q_dtype, out_dtype):
    need_kv128(128)
    args, kw = make_case(layout="paged", Sq=300, Sk=700, H=32, Hkv=8, q_dtype=q_dtype, out_dtype=out_dtype,
                         per_head=True, causal=True, page=48, seed=77)
    check_vs_cpu(args, kw, kv_tile=128)


def test_default_kv_tile():
    """kv_tile 0 is the kernel's default: 128 where the wgmma pipeline has it (64 for unmasked
    D 128; bitwise the same call as that kv_tile), else 64; decode shapes keep the 64-key decode
    kernel."""
    need_dim(128)
    args, kw = make_case(Sq=150, Sk=389, seed=5)
    kernel = kernel_of(*args, device=DEV, kv_tile=0, **kw)
    tile = kernel.kv_tile
    if is_wgmma(kernel):  # the wgmma pipeline: unmasked D 128 on its 64-key instance
        assert tile == 64, kernel
    o0, l0 = call(*args, device=DEV, kv_tile=0, **kw)
    ot, lt = call(*args, device=DEV, kv_tile=tile, **kw)
    assert torch.equal(o0.view(torch.uint8), ot.view(torch.uint8)) and torch.equal(l0, lt)
    dargs, dkw = make_case(layout="paged", Sq=1, Sk=517, seed=6)
    assert kernel_of(*dargs, device=DEV, kv_tile=0, **dkw).kv_tile == 64


def test_kernel_names_by_shape():
    """kernel_name names the kernel that runs, decode included: the device's pipelines in their order
    (csrc/kernels/generate.py TARGETS), or FP8ATTN_PIPELINE's where it serves the call."""
    need_dim(128)
    pref = os.environ.get("FP8ATTN_PIPELINE")
    if pref and pref not in ("f16", "fp8mma"):
        pytest.skip(f"FP8ATTN_PIPELINE={pref}: its kernels serve only some of these calls")
    cc = torch.cuda.get_device_capability()
    dec, dkw = make_case(layout="paged", Sq=1, Sk=517, H=32, Hkv=8, causal=True, seed=6)  # 4 packed rows
    dec16, d16kw = make_case(layout="paged", Sq=4, Sk=517, H=32, Hkv=8, causal=True, seed=7)  # 16
    pre, pkw = make_case(Sq=150, Sk=389, H=8, Hkv=2, seed=5)
    names = [kernel_of(*a, device=DEV, kv_tile=0, **kw).name for a, kw in ((dec, dkw), (dec16, d16kw), (pre, pkw))]
    if torch.version.hip:
        assert all(n.startswith("fwd_mfma_hd128_") for n in names), names
    elif pref:
        assert all(n.startswith(f"fwd_{pref}_") for n in names), names  # (they serve every call)
    elif cc == (8, 9):
        assert all(n.startswith("fwd_fp8mma_hd128_") for n in names), names
    else:
        assert names[2] in ("fwd_wgmma_hd128_e4m3fn_nomask_kv64", "fwd_f16_hd128_e4m3fn_nomask_kv64"), names
        dec = "decodewg" if names[2].startswith("fwd_wgmma") else "decode"  # (a build with sm_90a code: both wgmma)
        assert names[:2] == [f"fwd_{dec}8_hd128_e4m3fn_band_kv64", f"fwd_{dec}16_hd128_e4m3fn_band_kv64"], names


# ---- rejected configurations ------------------------------------------------------------------

def test_rejects_other_kv_tile():
    need_dim(128)
    args, kw = make_case(seed=1)
    with pytest.raises(ValueError, match="kv_tile"):
        call(*args, device=DEV, kv_tile=32, **kw)
    if 80 in dims():  # no 128-key kernel at D 80 (nor anywhere off Hopper)
        args, kw = make_case(D=80, seed=1)
        with pytest.raises(ValueError, match="kv_tile=128"):
            call(*args, device=DEV, kv_tile=128, **kw)


def test_write_kv_cache_matches_cpu():
    g = torch.Generator().manual_seed(5)
    T, Hkv, D, nb, bs = 37, 2, 128, 10, 16
    key = torch.randn(T, Hkv, D, generator=g).to(BF16) * 4
    val = torch.randn(T, Hkv, D, generator=g).to(BF16) * 4
    slots = torch.randperm(nb * bs, generator=g)[:T]
    slots[3] = -1
    ks, vs = torch.tensor([0.03]), torch.tensor([0.05])
    res = {}
    for dev in ("cpu", DEV):
        kc = torch.zeros(nb, bs, Hkv, D, dtype=FN, device=dev)
        vc = torch.zeros_like(kc)
        torch.ops.fp8attn.write_kv_cache(key.to(dev), val.to(dev), kc, vc, slots.to(dev), ks.to(dev), vs.to(dev))
        res[dev] = (kc.cpu().view(torch.uint8), vc.cpu().view(torch.uint8))
    assert torch.equal(res["cpu"][0], res[DEV][0]) and torch.equal(res["cpu"][1], res[DEV][1])


def test_write_kv_cache_skips_device_slots_past_the_cache():
    """A device slot_mapping is not validated on the host (no sync): a slot past the cache is skipped like a
    negative one, never written out of bounds (the cache is a view into a larger, NaN-guarded buffer)."""
    T, Hkv, D, nb, bs = 4, 2, 128, 3, 16
    key = torch.randn(T, Hkv, D).to(BF16)
    guard = torch.full((nb + 1, bs, Hkv, D), 0x7F, dtype=torch.uint8, device=DEV)  # 0x7f: e4m3fn NaN
    kc, vc = guard[:nb].view(FN), torch.zeros(nb, bs, Hkv, D, dtype=FN, device=DEV)
    slots = torch.tensor([0, nb * bs, nb * bs + 5, 1], device=DEV)
    torch.ops.fp8attn.write_kv_cache(key.to(DEV), key.to(DEV), kc, vc, slots, None, None)
    torch.cuda.synchronize()
    assert torch.equal(guard[nb], torch.full_like(guard[nb], 0x7F)), "a write landed past the cache"
    expect = key.to(FN).view(torch.uint8).to(DEV)
    assert torch.equal(guard[0, 0], expect[0]) and torch.equal(guard[0, 1], expect[3])


# ---- attention sinks (gpt-oss): one logit per q head, added after the KV loop, or once in the combine --------

SINK_SHAPES = {
    "dense": dict(Sq=37, Sk=203),
    "dense_causal_gqa": dict(Sq=130, Sk=130, H=8, Hkv=2, causal=True),
    "varlen_window": dict(layout="varlen", Sq=70, Sk=260, H=8, Hkv=2, window=(40, 0), q_dtype=BF16, out_dtype=FN),
    "paged_softcap": dict(layout="paged", Sq=150, Sk=389, H=8, Hkv=1, causal=True, softcap=7.0, page=32),
    "decode8": dict(layout="paged", Sq=1, Sk=1500, H=32, Hkv=8, causal=True, out_dtype=FN),
    "decode16": dict(layout="paged", Sq=4, Sk=1500, H=32, Hkv=8, causal=True, per_head=True),
    "decode_dense": dict(Sq=16, Sk=900, H=8, Hkv=8, causal=True, q_dtype=FP16, out_dtype=FP16),
}


@pytest.mark.parametrize("D", [64, 128, 256])
@pytest.mark.parametrize("shape", list(SINK_SHAPES))
def test_sinks_vs_cpu(shape, D):
    """With sinks each pipeline (this device's default, or FP8ATTN_PIPELINE's) agrees with the CPU oracle as
    without them (same tolerances; the wgmma ones also as close to fp64, sinks included), prefill and decode
    kernels, and the sinks change the output."""
    need_dim(D)
    args, kw = make_case(D=D, seed=D + len(shape), sinks=True, **SINK_SHAPES[shape])
    gout, _ = check_vs_cpu(args, kw)
    plain, _ = call(*args, device=DEV, **{k_: v_ for k_, v_ in kw.items() if k_ != "sinks"})
    assert not torch.equal(gout.view(torch.uint8), plain.view(torch.uint8))


def test_sinks_rows_without_keys(monkeypatch):
    """A row that sees no key (a window before its keys; a sequence with seqused_k = 0) gives 0 and lse = its
    sink, unsplit and split."""
    need_dim(128)
    args, kw = make_case(Sq=50, Sk=20, window=(0, 0), causal=True, sinks=True, seed=11)
    gout, glse = check_vs_cpu(args, kw)
    sinks = kw["sinks"].view(1, -1, 1)
    torch.testing.assert_close(glse.cpu()[:, :, :30], sinks.expand(2, -1, 30), rtol=1e-6, atol=1e-6)
    assert (gout[:, :30].float() == 0).all()
    for splits in ("1", "4"):
        monkeypatch.setenv("FP8ATTN_NUM_SPLITS", splits)
        args, kw = make_case(layout="paged", B=3, Sq=2, Sk=800, H=32, Hkv=8, causal=True, sinks=True, seed=12)
        kw["seqused_k"][0] = 0  # (its q length is Sq = 2)
        gout, glse = call(*args, device=DEV, **kw)
        torch.testing.assert_close(glse.cpu()[:, :2], kw["sinks"].view(-1, 1).expand(-1, 2), rtol=1e-6, atol=1e-6)
        assert (gout[:2].float() == 0).all()


@pytest.mark.parametrize("splits", ["1", "", "3"])
def test_outweighed_sinks_give_the_bits_without_sinks(monkeypatch, splits):
    """A sink far below every logit adds exp(sink - m) = 0 exactly: every kernel (prefill, decode, split and
    combined) gives the bits of the call without sinks, whose loop it runs."""
    need_dim(128)
    monkeypatch.setenv("FP8ATTN_NUM_SPLITS", splits)
    for shape in ("dense_causal_gqa", "paged_softcap", "decode8", "decode16"):
        args, kw = make_case(seed=5, **SINK_SHAPES[shape])
        out, lse = call(*args, device=DEV, **kw)
        out_s, lse_s = call(*args, device=DEV, sinks=torch.full((args[0].shape[-2],), -1e30), **kw)
        assert torch.equal(out.view(torch.uint8), out_s.view(torch.uint8)) and torch.equal(lse, lse_s), shape


def test_sinks_cuda_graph_capture():
    """Sinks are read on the device: a captured decode replays its eager call bit for bit, and a new value
    written into the same sinks tensor is what the next replay uses."""
    need_dim(128)
    args, kw = make_case(layout="paged", Sq=1, Sk=1200, H=32, Hkv=8, causal=True, out_dtype=FN, sinks=True, seed=52)
    dev_args, dkw = case_on_device(args, kw)
    eager, eager_lse = call(*dev_args, device=DEV, **dkw)
    out = torch.empty_like(eager)
    call(*dev_args, device=DEV, out=out, **dkw)  # warm-up outside the graph
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        _, lse = call(*dev_args, device=DEV, out=out, poison=False, **dkw)
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(out.view(torch.uint8), eager.view(torch.uint8)) and torch.equal(lse, eager_lse)
    dkw["sinks"].add_(3.0)
    graph.replay()
    again, again_lse = call(*dev_args, device=DEV, **dkw)
    torch.cuda.synchronize()
    assert torch.equal(out.view(torch.uint8), again.view(torch.uint8)) and torch.equal(lse, again_lse)
    assert not torch.equal(lse, eager_lse)


def test_sinks_on_another_device_are_refused():
    need_dim(128)
    q = torch.randn(1, 8, 4, 128, device=DEV).to(FN)
    with pytest.raises(ValueError, match="sinks must be on q's device"):
        fp8attn.forward(q, q, q, sinks=torch.zeros(4))
