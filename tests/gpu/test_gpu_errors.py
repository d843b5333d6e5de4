"""CUDA calls that the C++ side rejects raise ValueError naming the argument, in full builds and in
builds filtered by FP8ATTN_HEAD_DIMS alike. Each call runs in a child process, so that a crash (the
SIGSEGV a statically linked libstdc++ gave: docs/errors.md) fails its test instead of the suite."""
import os
import subprocess
import sys
import textwrap
from pathlib import Path

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


ZERO_SIZES = textwrap.dedent("""
    import torch, fp8attn
    from fuzz_worker import base_call, empty
    from test_fuzz import EMPTY

    def run(call, device):
        c = {n: x.to(device) if isinstance(x, torch.Tensor) else x for n, x in call.items()}
        try:
            out, lse = fp8attn.forward(c.pop("q"), c.pop("k"), c.pop("v"), **c)
            torch.cuda.synchronize()
            return out.cpu(), lse.cpu()
        except ValueError as e:
            return str(e)

    for layout, dims in EMPTY.items():
        for dim in dims:
            for q in ("fp8", "bfloat16"):
                call = empty(base_call({"layout": layout, "seed": 3, "fp8": "e4m3fn", "q": q, "fp8_out": False}),
                             dim)
                call.pop("out", None)
                for bounds in ([{}] if layout == "dense" else [{}, dict(max_seqlen_q=64, max_seqlen_k=64)]):
                    cpu, gpu = run({**call, **bounds}, "cpu"), run({**call, **bounds}, "cuda")
                    same = (cpu == gpu if isinstance(cpu, str) else not isinstance(gpu, str)
                            and all(torch.equal(a, b) for a, b in zip(cpu, gpu)))
                    filtered = isinstance(gpu, str) and "no kernel for head_dim" in gpu
                    print(layout, dim, q, sorted(bounds), "same" if same else "filtered" if filtered else
                          f"DIFFERENT: cpu {cpu if isinstance(cpu, str) else 'result'}, "
                          f"gpu {gpu if isinstance(gpu, str) else 'result'}", flush=True)
    print("DONE")
""")


def test_zero_sizes_as_on_the_cpu():
    """The fuzzer's empty class (each size 0 of each layout, also on the no-sync path) on CUDA: the CPU's
    result (empty, or 0 with lse -inf where no key exists) or its named refusal; never a crash."""
    tests = Path(__file__).resolve().parents[1]  # the fuzzer's helpers, and fp8attn as pytest imports it
    path = os.pathsep.join([str(tests), str(tests.parent), *filter(None, [os.environ.get("PYTHONPATH")])])
    r = subprocess.run([sys.executable, "-c", ZERO_SIZES], capture_output=True, text=True, timeout=600,
                       env={**os.environ, "PYTHONPATH": path})
    assert r.returncode == 0 and "DONE" in r.stdout, f"exit {r.returncode}\n{r.stdout[-3000:]}\n{r.stderr[-2000:]}"
    assert "DIFFERENT" not in r.stdout, r.stdout
