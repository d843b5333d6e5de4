"""Shared helpers of the GPU tests: input builders for the three layouts, the op called on a
device at a fixed KV tile, and the agreement metric (FP8 ulps)."""
from __future__ import annotations

import math

import torch

import fp8attn
from fp8attn.ops import KernelInfo, op_args
from fp8attn.shapes import DEFAULT_KV_TILE, HEAD_DIMS
from fp8attn.testing import NAN_CODE, paged_kv, ulp_agreement

GPU_KV_TILE = DEFAULT_KV_TILE  # every GPU pipeline has it (csrc/kernels/generate.py)
DEV = "cuda"


def _runs(d: int, fp8) -> bool:
    """Whether this build has a GPU kernel of head dim `d` and FP8 kind `fp8` (a tiny call)."""
    q = torch.zeros(1, 1, 1, d, device=DEV, dtype=fp8)
    try:
        fp8attn.forward(q, q, q, softmax_scale=1.0)
        return True
    except (ValueError, RuntimeError):
        return False


def built_fp8_kind(fp8) -> bool:
    """Whether this build has GPU kernels of FP8 kind `fp8` (FP8ATTN_FP8_KINDS), probed at D 128."""
    return _runs(128, fp8)


def built_head_dims():
    """Head dims with a GPU instance in this build (probe each with a tiny call)."""
    return [d for d in HEAD_DIMS if _runs(d, torch.float8_e4m3fn)]


def fp8_rand(shape, dtype, gen, scale=1.0):
    x = torch.randn(shape, generator=gen) * scale
    return x.clamp(-200, 200).to(dtype)


def make_case(*, layout="dense", B=2, Sq=37, Sk=203, H=4, Hkv=2, D=128, q_dtype=torch.float8_e4m3fn,
              fp8=torch.float8_e4m3fn, out_dtype=torch.bfloat16, causal=False, window=(-1, -1), softcap=0.0,
              per_head=False, page=16, seed=0, num_blocks=None, p_scale=None, sinks=False):
    """Random inputs (on the CPU) for one call; returns (args, kwargs) of `call`. sinks: one attention-sink
    logit per q head, spread over [-6, 12]: from well below the rows' lse (about ln Sk here: the logits are
    small) to well above it."""
    g = torch.Generator().manual_seed(seed)
    if q_dtype in (torch.bfloat16, torch.float16):
        q = (torch.randn((B, Sq, H, D), generator=g) * 3).to(q_dtype)
    else:
        q = fp8_rand((B, Sq, H, D), q_dtype, g, 2.0)
    k = fp8_rand((B, Sk, Hkv, D), fp8, g, 2.0)
    v = fp8_rand((B, Sk, Hkv, D), fp8, g, 2.0)
    nh_q, nh_k = (H, Hkv) if per_head else (1, 1)
    kw = dict(q_descale=torch.rand(nh_q, generator=g) * 0.05 + 0.02,
              k_descale=torch.rand(nh_k, generator=g) * 0.05 + 0.02,
              v_descale=torch.rand(nh_k, generator=g) * 0.5 + 0.25,
              softmax_scale=1.0 / math.sqrt(D), causal=causal, window=window, softcap=softcap)
    if p_scale is not None:
        kw["p_scale"] = torch.tensor([p_scale])
    if out_dtype in (torch.float8_e4m3fn, torch.float8_e4m3fnuz):
        kw["out_scale"] = torch.tensor([0.02])
    kw["out_dtype"] = out_dtype
    if sinks:  # (their own generator: the other inputs are those of the case without sinks)
        kw["sinks"] = torch.linspace(-6.0, 12.0, H)[torch.randperm(H, generator=torch.Generator().manual_seed(seed))]
    if layout == "dense":
        return (q, k, v), kw
    # varlen q / k: ragged lengths (some zero), packed
    lq = torch.randint(0, Sq + 1, (B,), generator=g)
    lk = torch.randint(1, Sk + 1, (B,), generator=g)
    lq[0] = Sq
    lk[0] = Sk
    cu_q = torch.cat([torch.zeros(1, dtype=torch.int32), lq.cumsum(0).to(torch.int32)])
    qv = torch.cat([q[b, :lq[b]] for b in range(B)])
    kw.update(cu_seqlens_q=cu_q, max_seqlen_q=int(lq.max()))
    if layout == "varlen":
        cu_k = torch.cat([torch.zeros(1, dtype=torch.int32), lk.cumsum(0).to(torch.int32)])
        kw.update(cu_seqlens_k=cu_k, max_seqlen_k=int(lk.max()))
        return (qv, torch.cat([k[b, :lk[b]] for b in range(B)]), torch.cat([v[b, :lk[b]] for b in range(B)])), kw
    # paged: shuffled blocks, unused slots poisoned with NaN codes
    assert layout == "paged"
    nb_per = (Sk + page - 1) // page
    lens = lk.tolist()
    (kc, vc), table = paged_kv([torch.cat([x[b, :n] for b, n in enumerate(lens)]) for x in (k, v)], lens, page,
                               num_blocks=num_blocks or B * nb_per + 3, poison=True, generator=g, cols=nb_per)
    kw.update(block_table=table, seqused_k=lk.to(torch.int32), max_seqlen_k=int(lk.max()))
    return (qv, kc, vc), kw


def _op_args(q, k, v, out, device, kv_tile, kw):
    """torch.ops.fp8attn.forward's arguments (fp8attn.ops.op_args) for a make_case call on `device` (its tensors
    moved there) into `out`, with the lse."""
    kw = {n: x.to(device) if isinstance(x, torch.Tensor) else x for n, x in kw.items() if n != "out_dtype"}
    kw["window_size"] = kw.pop("window", (-1, -1))
    return op_args(q.to(device), k.to(device), v.to(device), out=out, kv_tile=kv_tile, return_softmax_lse=True,
                   out_dtype=out.dtype if kw.get("out_scale") is None else None, **kw)


def _out_dtype(q, k, kw):
    """The output dtype of a make_case call (its out_dtype stands for k's FP8 type when out_scale is given)."""
    fp8_out = kw.get("out_scale") is not None
    return fp8attn.resolve_out_dtype(q, k, kw.get("out_scale"), None if fp8_out else kw.get("out_dtype"))


def case_on_device(args, kw):
    """A make_case case with its tensors moved to the GPU once (graph capture and profiled calls must not copy)."""
    return ([a.to(DEV) for a in args],
            {k_: (v_.to(DEV) if isinstance(v_, torch.Tensor) else v_) for k_, v_ in kw.items()})


def call(q, k, v, *, device, kv_tile=GPU_KV_TILE, out=None, poison=True, **kw):
    """torch.ops.fp8attn.forward on `device` with every tensor moved there; returns (out, lse)."""
    out_dtype = _out_dtype(q, k, kw)
    if out is None:
        out = torch.empty(q.shape, dtype=out_dtype, device=device)
        if poison:
            if out_dtype in (torch.bfloat16, torch.float16):
                out.fill_(float("nan"))
            else:
                out.view(torch.uint8).fill_(NAN_CODE[k.dtype])
    lse = torch.ops.fp8attn.forward(**_op_args(q, k, v, out, device, kv_tile, kw))
    return out, lse


def kernel_of(q, k, v, *, device, kv_tile=GPU_KV_TILE, **kw) -> KernelInfo:
    """The kernel `call` runs for these arguments: its name, pipeline and KV tile (torch.ops.fp8attn.forward_kernel)."""
    out = torch.empty(q.shape, dtype=_out_dtype(q, k, kw), device=device)
    return KernelInfo(*torch.ops.fp8attn.forward_kernel(**_op_args(q, k, v, out, device, kv_tile, kw)))


# The Hopper wgmma pipeline sums FP8 products on the tensor cores with less than fp32 precision (the
# hardware's FP8 MMA accumulation), so it agrees with the CPU oracle (exact fp32 sums) only to
# rounding noise: measured 98.3-99.7 % of outputs within 1 FP8 ulp, lse within ~2e-2 on short rows,
# at the same error against fp64 as the portable pipelines (docs/gpu-kernels.md). Its tests use
# these bounds and add the fp64 comparison.
WGMMA_MIN_AGREEMENT = 0.975
WGMMA_LSE_TOL = 4e-2


def is_wgmma(kernel: KernelInfo) -> bool:
    """Whether the kernel sums FP8 products on Hopper's wgmma (the prefill and the decodewg pipelines)."""
    return kernel.pipeline in ("wgmma", "decodewg")


def agreement(gpu_out, cpu_out):
    """Fraction of elements within 1 FP8 ulp (and whether any NaN appeared where the CPU has none)."""
    g, c = gpu_out.cpu(), cpu_out.cpu()
    gn, cn = g.float().isnan(), c.float().isnan()
    return ulp_agreement(g, c), bool((gn & ~cn).any())


def lse_close(gpu_lse, cpu_lse, tol=2e-3):
    g, c = gpu_lse.cpu(), cpu_lse.cpu()
    inf_same = bool(torch.equal(torch.isneginf(g), torch.isneginf(c)))
    fin = torch.isfinite(c)
    close = bool(((g[fin] - c[fin]).abs() <= tol).double().mean() >= 0.999) if fin.any() else True
    return inf_same and close
