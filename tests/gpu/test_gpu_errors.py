"""CUDA calls that the C++ side rejects raise ValueError naming the argument, in full builds and in
builds filtered by FP8ATTN_HEAD_DIMS alike. Each call runs in a child process, so that a crash (the
SIGSEGV a statically linked libstdc++ gave: docs/errors.md) fails its test instead of the suite."""
import subprocess
import sys
import textwrap

import pytest

from fp8attn.shapes import HEAD_DIMS

CALL = textwrap.dedent("""
    import torch, fp8attn
    d, kv_tile = {d}, {kv_tile}
    x = torch.randn(1, 64, 4, d, device="cuda").to(torch.float8_e4m3fn)
    try:
        print("NAME", fp8attn.kernel_name(x, x, x, kv_tile=kv_tile))
        fp8attn.forward(x, x, x, kv_tile=kv_tile)
        torch.cuda.synchronize()
        print("RAN")
    except ValueError as e:
        print("ValueError", e)
""")


def _child(d: int, kv_tile: int = 0) -> str:
    r = subprocess.run([sys.executable, "-c", CALL.format(d=d, kv_tile=kv_tile)], capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, f"head_dim={d} kv_tile={kv_tile}: exit {r.returncode}\n{r.stderr[-2000:]}"
    return r.stdout


@pytest.mark.parametrize("d", HEAD_DIMS)
def test_every_head_dim_runs_or_names_it(d):
    """A supported head dim either runs (its kernel is built) or raises naming head_dim (a filtered build)."""
    out = _child(d)
    assert "RAN" in out or ("ValueError" in out and f"head_dim={d}" in out), out


@pytest.mark.parametrize("d", [32, 48, 160])
def test_unsupported_head_dim(d):
    out = _child(d)
    assert "ValueError" in out and "head dim" in out and str(d) in out, out


@pytest.mark.parametrize("kv_tile", [32, 96])
def test_unsupported_kv_tile(kv_tile):
    out = _child(128, kv_tile)
    assert "ValueError" in out and "kv_tile" in out, out
