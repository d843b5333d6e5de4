"""The padded-batch contract (tests/test_padded_batch.py) on the device path, as vLLM's full CUDA-graph
capture calls it: max_seqlen_q / max_seqlen_k given (no host sync), q rows past cu_seqlens_q[-1] never
written, padded requests with seqused_k = 0, table entries of a NaN-filled null block 0 never read. The
valid rows agree with the CPU implementation on the same inputs."""

import pytest
import torch
from cases import make_case as make_cpu_case
from gpu_helpers import DEV, WGMMA_LSE_TOL, WGMMA_MIN_AGREEMENT, agreement, is_wgmma, lse_close
from test_padded_batch import PAD_ROWS, _padded

import fp8attn


@pytest.mark.parametrize("q_lens,k_lens", [([1, 1, 1, 1], [700, 33, 0, 130]),      # decode
                                           ([3, 1, 40, 4], [20, 330, 0, 64])])     # mixed prefill + decode
@pytest.mark.parametrize("fp8_out", [False, True])
def test_padded_paged_batch_on_device(q_lens, k_lens, fp8_out):
    case = make_cpu_case(layout="paged", q_lens=q_lens, k_lens=k_lens, head_dim=128, fp8_out=fp8_out, seed=3)
    (qp, kc, vc), kw = _padded(case)
    T = qp.shape[0] - PAD_ROWS
    kw = {**kw, "max_seqlen_q": max(q_lens), "max_seqlen_k": max(k_lens), "return_softmax_lse": True, "kv_tile": 64}
    cpu_out, cpu_lse = fp8attn.forward(qp, kc, vc, **kw)
    dev = {n: (t.to(DEV) if isinstance(t, torch.Tensor) else t) for n, t in kw.items()}
    out = torch.empty(qp.shape, dtype=cpu_out.dtype, device=DEV)
    if out.dtype in (torch.bfloat16, torch.float16):
        out.fill_(float("nan"))
    else:
        out.view(torch.uint8).fill_(0x7F)
    name = fp8attn.kernel_name(qp.to(DEV), kc.to(DEV), vc.to(DEV), **dev)
    _, lse = fp8attn.forward(qp.to(DEV), kc.to(DEV), vc.to(DEV), out=out, **dev)
    torch.cuda.synchronize()
    pad = out[T:].cpu()
    assert (pad.view(torch.uint8) == 0x7F).all() if pad.dtype == torch.float8_e4m3fn else pad.float().isnan().all(), \
        f"{name}: padding rows were written"
    empty = slice(sum(q_lens[:2]), sum(q_lens[:3]))  # the request with seqused_k = 0
    assert (out[empty].cpu().float() == 0).all() and torch.isneginf(lse[:, empty].cpu()).all(), name
    frac, bad_nan = agreement(out[:T], cpu_out[:T])
    assert not bad_nan, f"{name}: NaN where the CPU has none (the null block or padding was read)"
    assert frac >= (WGMMA_MIN_AGREEMENT if is_wgmma(name) else 0.999), (name, frac)
    assert lse_close(lse[:, :T], cpu_lse[:, :T], WGMMA_LSE_TOL if is_wgmma(name) else 2e-3), name
