"""Every bad input raises ValueError / TypeError naming the argument (never a crash or garbage)."""

from __future__ import annotations

import pytest
import torch
from cases import kv_args, make_case

import fp8attn

F8 = torch.float8_e4m3fn


def _args(layout: str, q_lens: list[int], k_lens: list[int], over: dict) -> dict:
    """A valid call of the layout (as keyword arguments), with `over` replacing some of them."""
    case = make_case(layout=layout, q_lens=q_lens, k_lens=k_lens, heads=4, kv_heads=2, head_dim=64, seed=1)
    (q, k, v), kw = case.call_args()
    return {**dict(q=q, k=k, v=v, **kw), **over}


def dense(**over):
    return _args("dense", [8] * 2, [16] * 2, over)


def paged(**over):
    return _args("paged", [3, 5], [20, 40], over)


def varlen(**over):
    return _args("varlen", [3, 5], [20, 40], over)


def call(args):
    q, k, v = args.pop("q"), args.pop("k"), args.pop("v")
    return fp8attn.forward(q, k, v, **args)


CASES = [
    # dtypes
    ("k", TypeError, lambda: dense(k=dense()["k"].float())),
    ("v", TypeError, lambda: dense(v=dense()["v"].view(torch.uint8).view(torch.float8_e4m3fnuz))),
    ("q", TypeError, lambda: dense(q=dense()["q"].float())),
    ("q", TypeError, lambda: dense(q=dense()["q"].view(torch.uint8).view(torch.float8_e4m3fnuz))),
    ("out_dtype", TypeError, lambda: dense(out_scale=None, out_dtype=torch.float32)),
    ("out_dtype", TypeError, lambda: dense(out_dtype=torch.bfloat16)),  # out_scale given
    ("out", TypeError, lambda: dense(out=torch.empty(2, 8, 4, 64, dtype=torch.bfloat16))),
    ("q_descale", TypeError, lambda: dense(q_descale=torch.tensor([1.0], dtype=torch.float64))),
    ("cu_seqlens_q", TypeError, lambda: varlen(cu_seqlens_q=varlen()["cu_seqlens_q"].long())),
    ("block_table", TypeError, lambda: paged(block_table=paged()["block_table"].long())),
    ("q", TypeError, lambda: dense(q=[1, 2, 3])),
    # ranks and shapes
    ("q must be", ValueError, lambda: dense(q=dense()["q"][0, 0])),
    ("k must be", ValueError, lambda: dense(k=dense()["k"][0, 0])),
    ("v must have k's shape", ValueError, lambda: dense(v=dense()["v"][:, :8])),
    (
        "head dim",
        ValueError,
        lambda: dense(
            q=dense()["q"][..., :48].contiguous(),
            k=dense()["k"][..., :48].contiguous(),
            v=dense()["v"][..., :48].contiguous(),
        ),
    ),
    (
        "k head dim",
        ValueError,
        lambda: dense(k=torch.zeros(2, 16, 2, 128, dtype=F8), v=torch.zeros(2, 16, 2, 128, dtype=F8)),
    ),
    (
        "multiple of the number of k/v heads",
        ValueError,
        lambda: dense(
            k=torch.ones(2, 16, 3, 64).to(F8), v=torch.ones(2, 16, 3, 64).to(F8), k_descale=None, v_descale=None
        ),
    ),
    ("k batch size", ValueError, lambda: dense(k=dense()["k"][:1], v=dense()["v"][:1])),
    ("out must have q's shape", ValueError, lambda: dense(out=torch.empty(2, 8, 4, 32, dtype=F8))),
    (
        "last \\(head\\) dimension",
        ValueError,
        lambda: dense(q=dense()["q"].transpose(-1, -2).contiguous().transpose(-1, -2)),
    ),
    ("cu_seqlens_q is required", ValueError, lambda: varlen(cu_seqlens_q=None)),
    ("cu_seqlens_q is only valid", ValueError, lambda: dense(cu_seqlens_q=torch.tensor([0, 8, 16], dtype=torch.int32))),
    ("cu_seqlens_k is required", ValueError, lambda: varlen(cu_seqlens_k=None)),
    ("needs seqused_k or cu_seqlens_k", ValueError, lambda: paged(seqused_k=None)),
    ("seqused_k must have", ValueError, lambda: paged(seqused_k=torch.tensor([20], dtype=torch.int32))),
    ("block_table must have", ValueError, lambda: paged(block_table=paged()["block_table"][:1])),
    ("cu_seqlens_q must have 1 dimension", ValueError, lambda: varlen(cu_seqlens_q=varlen()["cu_seqlens_q"][None])),
    # index values
    (
        "cu_seqlens_q must be non-decreasing",
        ValueError,
        lambda: varlen(cu_seqlens_q=torch.tensor([0, 6, 5], dtype=torch.int32)),
    ),
    ("cu_seqlens_q\\[0\\]", ValueError, lambda: varlen(cu_seqlens_q=torch.tensor([1, 3, 8], dtype=torch.int32))),
    (
        "cu_seqlens_q\\[-1\\] = 9 must not exceed the number of rows 8",
        ValueError,
        lambda: varlen(cu_seqlens_q=torch.tensor([0, 3, 9], dtype=torch.int32)),
    ),
    (
        "cu_seqlens_k\\[-1\\] = 61 must not exceed the number of rows 60",
        ValueError,
        lambda: varlen(cu_seqlens_k=torch.tensor([0, 20, 61], dtype=torch.int32)),
    ),
    (
        "block_table is too narrow: sequence 1 uses 10000 keys \\(seqused_k\\), 625 blocks of 16, but block_table "
        "has 4 columns",
        ValueError,
        lambda: paged(seqused_k=torch.tensor([20, 10_000], dtype=torch.int32)),
    ),
    (
        "block_table is too narrow: sequence 1 uses 40 keys",
        ValueError,
        lambda: paged(block_table=paged()["block_table"][:, :2].contiguous()),
    ),
    (
        "seqused_k\\[1\\] = 41 must not exceed the 40 keys of sequence 1 \\(cu_seqlens_k\\)",
        ValueError,
        lambda: varlen(seqused_k=torch.tensor([20, 41], dtype=torch.int32)),
    ),
    ("seqused_k\\[0\\]", ValueError, lambda: paged(seqused_k=torch.tensor([-1, 4], dtype=torch.int32))),
    ("block_table\\[1, 0\\]", ValueError, lambda: _bad_table(-1)),
    ("is out of range", ValueError, lambda: _bad_table(10_000)),
    # scales
    ("q_descale must have 1 element", ValueError, lambda: dense(q_descale=torch.ones(3))),
    ("k_descale must have 1 element", ValueError, lambda: dense(k_descale=torch.ones(4))),
    ("p_scale must have 1 element", ValueError, lambda: dense(p_scale=torch.ones(2))),
    ("out_scale must be positive", ValueError, lambda: dense(out_scale=torch.tensor([0.0]))),
    ("v_descale must be positive and finite", ValueError, lambda: dense(v_descale=torch.tensor([float("inf")]))),
    ("p_scale must be positive and finite", ValueError, lambda: dense(p_scale=torch.tensor([float("nan")]))),
    ("k_descale must be positive", ValueError, lambda: dense(k_descale=torch.tensor([-1.0]))),
    # attention sinks: float32 [H], contiguous, finite (and finite in log2 units)
    ("sinks must be a float32 tensor, got BFloat16", TypeError,
     lambda: dense(sinks=torch.zeros(4, dtype=torch.bfloat16))),
    ("sinks must have shape \\[H\\] = \\[4\\] .*got shape \\[2\\]", ValueError, lambda: dense(sinks=torch.zeros(2))),
    ("sinks must have shape", ValueError, lambda: dense(sinks=torch.zeros(1, 4))),
    ("sinks must have shape", ValueError, lambda: dense(sinks=torch.tensor(0.0))),
    ("sinks must be contiguous", ValueError, lambda: dense(sinks=torch.zeros(8)[::2])),
    ("sinks must be finite, got nan \\(head 2\\)", ValueError,
     lambda: dense(sinks=torch.tensor([0, 1, float("nan"), 0]))),
    ("sinks must be finite, got -inf", ValueError, lambda: dense(sinks=torch.tensor([0, float("-inf"), 0, 0]))),
    ("sinks\\[3\\] = .* overflows float32 in the kernels' log2 units", ValueError,
     lambda: dense(sinks=torch.tensor([0, 0, 0, 3e38]))),
    # scalars
    ("softmax_scale", ValueError, lambda: dense(softmax_scale=float("nan"))),
    ("softmax_scale", ValueError, lambda: dense(softmax_scale=-1.0)),
    ("softcap", ValueError, lambda: dense(softcap=-2.0)),
    ("window_size", ValueError, lambda: dense(window_size=(-5, 0))),
    ("window_size", ValueError, lambda: dense(window_size=3)),
    # (device mismatches need a second device: tests/gpu covers them)
]


def _bad_table(value: int):
    args = paged()
    table = args["block_table"].clone()
    table[1, 0] = value
    args["block_table"] = table
    return args


@pytest.mark.parametrize("match,exc,make", CASES, ids=[f"{i}-{c[0][:30]}" for i, c in enumerate(CASES)])
def test_bad_input_raises(match, exc, make):
    with pytest.raises(exc, match=match):
        call(make())


def test_valid_inputs_pass():
    for make in (dense, paged, varlen):
        call(make())


# ---- zero sizes (tests/test_fuzz.py's empty class: each size of each layout)

def _cut(args: dict, axis: int, *names: str) -> dict:
    return {**args, **{n: args[n].narrow(axis, 0, 0) for n in names}}


def test_no_query_heads_gives_the_empty_result():
    """H = 0 beside Hkv = 2 (a GQA group of 0: once a division by zero, SIGFPE)."""
    for make in (dense, varlen, paged):
        args = _cut(make(), -2, "q")
        out, lse = call({**args, "return_softmax_lse": True})
        assert out.shape == args["q"].shape and lse.numel() == 0 and lse.shape[-2 if make is dense else 0] == 0


def test_no_keys_gives_zero_and_minus_inf():
    out, lse = call({**_cut(dense(), 1, "k", "v"), "return_softmax_lse": True})
    assert out.shape == (2, 8, 4, 64) and torch.all(out.float() == 0) and torch.all(lse == -torch.inf)


@pytest.mark.parametrize("match,make", [
    ("k must have at least one head", lambda: _cut(dense(), -2, "k", "v")),
    ("k, a paged cache, must have at least one block", lambda: _cut(paged(), 0, "k", "v")),
    ("k block_size", lambda: _cut(paged(), 1, "k", "v")),
    ("head dim \\(q.shape\\[-1\\]\\) 0", lambda: _cut(dense(), -1, "q", "k", "v")),
])
def test_zero_sizes_refused_by_name(match, make):
    with pytest.raises(ValueError, match=match):
        call(make())


# ---- every class of bad input of issue 24, each refused by name

def _meta(x: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(x, device="meta")


@pytest.mark.parametrize("name", ["q", "k", "v", "out", "cu_seqlens_q", "cu_seqlens_k", "q_descale", "k_descale",
                                  "v_descale", "p_scale", "out_scale", "sinks"])
def test_meta_tensor_among_cpu_tensors(name):
    """A meta tensor among real ones: the dispatcher picks the fake implementation, which refuses it."""
    args = varlen(p_scale=torch.tensor([1 / 256]), sinks=torch.zeros(4))
    if name == "out":
        args["out"] = torch.empty(args["q"].shape, dtype=args["k"].dtype, device="meta")
    else:
        args[name] = _meta(args[name])
    ref = "q" if name != "q" else "k"
    with pytest.raises(ValueError, match=f"{ref if name == 'q' else name} must be on q's device \\(cpu\\), got meta"
                       if name != "q" else "must be on q's device \\(meta\\), got cpu"):
        call(args)


@pytest.mark.parametrize("name", ["block_table", "seqused_k"])
def test_meta_index_tensor_paged(name):
    args = paged()
    args[name] = _meta(args[name])
    with pytest.raises(ValueError, match=f"{name} must be on q's device \\(cpu\\), got meta"):
        call(args)


def test_all_meta_call_gives_shapes():
    """Every tensor on meta is a legitimate shape query: the fake implementation answers it."""
    args = {k: (_meta(v) if isinstance(v, torch.Tensor) else v) for k, v in varlen().items()}
    out, lse = call({**args, "return_softmax_lse": True})
    assert out.device.type == "meta" and lse.shape == (4, 8)
    with pytest.raises(ValueError, match="q is on meta: no kernel runs there"):
        q, k, v = args.pop("q"), args.pop("k"), args.pop("v")
        fp8attn.kernel_name(q, k, v, **args)


def test_fake_tensors_still_trace():
    """Under torch.compile(fullgraph=True) every argument is a FakeTensor of one device: the fake's device
    check passes (paged call: every optional tensor present)."""
    args = paged(p_scale=torch.tensor([1 / 256]), sinks=torch.linspace(-3, 3, 4))
    q, k, v = args.pop("q"), args.pop("k"), args.pop("v")

    def f(q, k, v):
        return fp8attn.forward(q, k, v, return_softmax_lse=True, **args)

    out, lse = torch.compile(f, fullgraph=True, backend="aot_eager")(q, k, v)
    ref, ref_lse = f(q, k, v)
    assert torch.equal(out.view(torch.uint8), ref.view(torch.uint8))
    torch.testing.assert_close(lse, ref_lse)


@pytest.mark.parametrize("name", ["value", "key_cache", "value_cache", "slot_mapping", "k_scale"])
def test_write_kv_cache_meta_tensor(name):
    a = kv_args()
    a[name] = _meta(a[name])
    with pytest.raises(ValueError, match=f"{name} must be on key's device \\(cpu\\), got meta"):
        fp8attn.write_kv_cache(**a)


INT_CASES = [
    # Python ints that do not fit the C++ field (int32 fields; int64 schema)
    ("window_size entries must be in \\[-1, 2147483647\\].*\\(4294967296, -1\\)", ValueError,
     dict(window_size=(2**32, -1))),
    ("window_size\\[1\\] = 18446744073709551616 does not fit in int64", ValueError, dict(window_size=(-1, 2**64))),
    ("kv_tile must be in \\[0, 128\\].*got 4294967299", ValueError, dict(kv_tile=2**32 + 3)),
    ("kv_tile must be in \\[0, 128\\].*got 2097152", ValueError, dict(kv_tile=2**21)),
    ("kv_tile must be in \\[0, 128\\].*got -1", ValueError, dict(kv_tile=-1)),
    ("kv_tile = 18446744073709551616 does not fit in int64", ValueError, dict(kv_tile=2**64)),
    ("max_seqlen_k must be in \\[0, 2147483647\\], got 2147483648", ValueError, dict(max_seqlen_k=2**31)),
    ("max_seqlen_q = 1180591620717411303424 does not fit in int64", ValueError, dict(max_seqlen_q=2**70)),
    # floats finite as doubles but not as float32, or not positive there
    ("softmax_scale must be positive and finite as a float32, got 1e\\+39", ValueError, dict(softmax_scale=1e39)),
    ("softmax_scale must be positive and finite as a float32, got 1e-50", ValueError, dict(softmax_scale=1e-50)),
    ("softcap must be 0 \\(off\\) or positive and finite as a float32, got 1e\\+39", ValueError, dict(softcap=1e39)),
    ("softcap must be 0 \\(off\\) or positive and finite as a float32, got 1e-50", ValueError, dict(softcap=1e-50)),
    ("softcap must be 0", ValueError, dict(softcap=float("inf"))),
    # logits that overflow float32 although every factor is finite
    ("softmax_scale \\(1e\\+36\\) x q_descale .* overflows float32", ValueError, dict(softmax_scale=1e36)),
    ("/ softcap overflows float32", ValueError, dict(softcap=1e-45)),
    # strings and other types: the message names the argument
    ("softmax_scale must be a float, got str", TypeError, dict(softmax_scale="0.1")),
    ("softcap must be a float, got NoneType", TypeError, dict(softcap=None)),
    ("kv_tile must be an int, got str", TypeError, dict(kv_tile="64")),
    ("kv_tile must be an int, got float", TypeError, dict(kv_tile=64.0)),
    ("kv_tile must be an int, got bool", TypeError, dict(kv_tile=True)),
    ("max_seqlen_q must be an int, got str", TypeError, dict(max_seqlen_q="8")),
    ("window_size\\[0\\] must be an int, got str", TypeError, dict(window_size=("a", 1))),
    ("causal must be a bool, got str", TypeError, dict(causal="yes")),
    ("return_softmax_lse must be a bool, got int", TypeError, dict(return_softmax_lse=1)),
    ("out_dtype must be a torch.dtype or None, got str", TypeError, dict(out_scale=None, out_dtype="bfloat16")),
    ("q_descale must be a torch.Tensor or None, got float", TypeError, dict(q_descale=0.5)),
    ("sinks must be a torch.Tensor or None, got list", TypeError, dict(sinks=[0.0] * 4)),
]


@pytest.mark.parametrize("match,exc,over", INT_CASES, ids=[f"{i}-{c[0][:30]}" for i, c in enumerate(INT_CASES)])
def test_scalar_arguments(match, exc, over):
    with pytest.raises(exc, match=match):
        call(varlen(**over))


def _op_args(**over):
    """torch.ops.fp8attn.forward's arguments for a valid dense call, by name."""
    a = dense()
    q = a.pop("q")
    kw = dict(q=q, k=a.pop("k"), v=a.pop("v"), out=torch.empty(q.shape, dtype=torch.float8_e4m3fn), cu_seqlens_q=None,
              cu_seqlens_k=None, seqused_k=None, max_seqlen_q=0, max_seqlen_k=0, block_table=None,
              softmax_scale=0.125, causal=False, window_left=-1, window_right=-1, softcap=0.0,
              q_descale=a["q_descale"], k_descale=a["k_descale"], v_descale=a["v_descale"], p_scale=None,
              out_scale=a["out_scale"], return_softmax_lse=False, kv_tile=0)
    kw.update(over)
    return kw


@pytest.mark.parametrize("over,match", [
    (dict(window_left=2**32), "window_size entries must be in \\[-1, 2147483647\\]"),
    (dict(window_right=-2**40), "window_size entries"),
    (dict(kv_tile=2**31 - 1), "kv_tile must be in \\[0, 128\\]"),
    (dict(max_seqlen_q=2**33), "max_seqlen_q must be in"),
    (dict(softmax_scale=1e39), "softmax_scale must be positive and finite as a float32"),
])
def test_op_int_and_float_fields(over, match):
    """The registered op itself (no Python wrapper) checks the C++ fields' ranges."""
    with pytest.raises(ValueError, match=match):
        torch.ops.fp8attn.forward(**_op_args(**over))


def test_error_message_carries_its_numbers():
    """A statically linked second libstdc++ made integers vanish from messages (issue 24): the head-dim
    error must contain the offending number and the supported list."""
    a = dense()
    with pytest.raises(ValueError) as e:
        call(dense(q=a["q"][..., :48].contiguous(), k=a["k"][..., :48].contiguous(), v=a["v"][..., :48].contiguous()))
    assert "head dim (q.shape[-1]) 48 is not supported; supported: 64, 80, 96, 112, 128, 192, 256" in str(e.value)


# ---- outputs that overlap themselves or an input

def _bf16_call(q_shape=(2, 8, 4, 64)):
    a = dense(out_scale=None)
    a["q"] = torch.randn(*q_shape, dtype=torch.bfloat16)
    return a


def _out_over_k():
    """FP8 out and k as partly overlapping views of one buffer."""
    a = dense()
    buf = torch.empty(a["q"].numel() + a["k"].numel(), dtype=torch.uint8).view(torch.float8_e4m3fn)
    k = buf[a["q"].numel() // 2:][: a["k"].numel()].view(a["k"].shape)
    k.copy_(a["k"])
    return {**a, "k": k, "out": buf[: a["q"].numel()].view(a["q"].shape)}


def _out_over_sinks():
    """bf16 out and float32 sinks as views of one buffer."""
    a = dense(out_scale=None)
    buf = torch.empty(a["q"].numel() * 2, dtype=torch.uint8)
    return {**a, "out": buf.view(torch.bfloat16).view(a["q"].shape), "sinks": buf[16:32].view(torch.float32)}


OVERLAP_CASES = [
    ("out must not share memory with sinks", _out_over_sinks),
    ("out must not overlap itself", lambda: {**(a := dense()), "out": torch.empty(1, 1, 4, 64, dtype=F8).expand(
        a["q"].shape)}),
    ("out must not share memory with q", lambda: {**(a := _bf16_call()), "out": a["q"]}),
    ("out must not share memory with q", lambda: {**(a := _bf16_call((2, 4, 4, 64))), "out": a["q"].transpose(1, 2)}),
    ("out must not share memory with k", _out_over_k),
]


@pytest.mark.parametrize("match,make", OVERLAP_CASES, ids=[f"{i}-{c[0]}" for i, c in enumerate(OVERLAP_CASES)])
def test_out_overlap(match, make):
    with pytest.raises(ValueError, match=match):
        call(make())


def _cache16():
    kc = torch.zeros(4, 16, 2, 64, dtype=torch.bfloat16)
    return dict(key_cache=kc, value_cache=torch.zeros_like(kc), k_scale=None, v_scale=None)


@pytest.mark.parametrize("match,over", [
    ("key_cache must not overlap itself", lambda: dict(
        key_cache=torch.zeros(1, 16, 2, 64, dtype=torch.float8_e4m3fn).expand(4, 16, 2, 64))),
    ("value_cache must not overlap itself", lambda: dict(
        value_cache=torch.zeros(4, 1, 2, 64, dtype=torch.float8_e4m3fn).expand(4, 16, 2, 64))),
    ("key_cache must not share memory with value_cache", lambda: dict(
        value_cache=(kc := torch.zeros(4, 16, 2, 64, dtype=torch.float8_e4m3fn)), key_cache=kc)),
    ("key_cache must not share memory with key", lambda: {**(c := _cache16()), "key": c["key_cache"][0, :3],
                                                          "value": torch.randn(3, 2, 64, dtype=torch.bfloat16)}),
])
def test_write_kv_cache_overlap(match, over):
    with pytest.raises(ValueError, match=match):
        fp8attn.write_kv_cache(**kv_args(**over()))


# ---- scales that make the math degenerate (bounds: docs/numerics.md, "Scale bounds")

@pytest.mark.parametrize("fp8,bound", [(torch.float8_e4m3fn, 1024.0), (torch.float8_e4m3fnuz, 2048.0)])
def test_p_scale_bound(fp8, bound):
    """p_scale < 2 / (the FP8 type's smallest subnormal): at the bound P = 1 quantizes to code 0 (l = 0)."""
    args = dense()
    to = lambda x: x.view(torch.uint8).view(fp8)  # noqa: E731
    args.update(q=to(args["q"]), k=to(args["k"]), v=to(args["v"]), out_scale=None)
    with pytest.raises(ValueError, match=f"p_scale = {bound:g} quantizes P = 1 to the FP8 code 0.*below {bound:g}"):
        call({**args, "p_scale": torch.tensor([bound])})
    out = call({**args, "p_scale": torch.tensor([bound * 0.999])})
    assert torch.isfinite(out.float()).all()


@pytest.mark.parametrize("match,over", [
    ("out_scale = .* has no finite float32 reciprocal", lambda: dict(out_scale=torch.tensor([1e-40]))),
    ("p_scale = .* has no finite float32 reciprocal", lambda: dict(p_scale=torch.tensor([1e-40]))),
    ("q_descale = .* has no finite float32 reciprocal", lambda: dict(q=dense()["q"].bfloat16(),
                                                                         q_descale=torch.tensor([1e-40]))),
    ("v_descale = 1e\\+37 makes dequantized values", lambda: dict(v_descale=torch.tensor([1e37]))),
    ("k_descale = 1e\\+37 makes dequantized values", lambda: dict(k_descale=torch.tensor([1.0, 1e37]))),
    ("x q_descale \\(1e\\+25\\) x k_descale .* overflows float32 \\(head 0\\)",
     lambda: dict(q_descale=torch.tensor([1e25]), k_descale=torch.tensor([1e10]))),
])
def test_degenerate_scales(match, over):
    with pytest.raises(ValueError, match=match):
        call(dense(**over()))


def test_finite_sinks_at_the_bound_pass():
    """The largest sinks whose log2-unit value is finite in float32 are valid: their term dominates every row."""
    big = torch.finfo(torch.float32).max / 1.4426950408889634 * 0.999
    out = call(dense(out_scale=None, sinks=torch.tensor([-big, big, 0.0, -1e30])))
    assert torch.isfinite(out.float()).all() and (out[:, :, 1] == 0).all()


def test_fp8_q_descale_is_not_inverted():
    """An FP8 q is not divided by q_descale: a tiny one is legitimate there."""
    out = call(dense(q_descale=torch.tensor([1e-40])))
    assert torch.isfinite(out.float()).all()


def test_write_kv_cache_scale_reciprocal():
    with pytest.raises(ValueError, match="k_scale = .* has no finite float32 reciprocal"):
        fp8attn.write_kv_cache(**kv_args(k_scale=torch.tensor([1e-40])))


def test_kv_tile_scratch_sized_by_keys():
    """The widest tile over 8 keys: the CPU scratch holds min(kv_tile, keys) rows, the result is the one-tile one."""
    case = make_case(q_lens=[4], k_lens=[8], heads=4, kv_heads=2, head_dim=64, seed=2)
    (q, k, v), kw = case.call_args()
    a = fp8attn.forward(q, k, v, kv_tile=128, **kw)
    b = fp8attn.forward(q, k, v, kv_tile=8, **kw)
    assert torch.equal(a.view(torch.uint8), b.view(torch.uint8))
