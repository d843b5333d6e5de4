"""GPU test fixtures. Every test here needs a GPU build of fp8attn and a visible CUDA/HIP device;
otherwise the whole directory is skipped with the reason."""
import os

import pytest
import torch


def _gpu_reason():
    if not torch.cuda.is_available():
        return "no CUDA/HIP device visible to torch"
    try:
        import fp8attn  # noqa: F401
    except Exception as e:  # pragma: no cover
        return f"fp8attn does not import: {e}"
    if not torch._C._dispatch_has_kernel_for_dispatch_key("fp8attn::forward", "CUDA"):
        return "fp8attn was built without GPU kernels"
    return None


_REASON = _gpu_reason()
if _REASON is None:
    # The CPU oracle runs on every core of a GPU machine (the parent conftest limits CI to 2).
    torch.set_num_threads(os.cpu_count() or 1)


def pytest_collection_modifyitems(config, items):
    if _REASON is None:
        return
    here = os.path.dirname(__file__)
    skip = pytest.mark.skip(reason=_REASON)
    for item in items:
        if str(item.fspath).startswith(here):
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def _no_split(monkeypatch):
    """Compare with the CPU tile for tile: one KV split unless a test asks for the heuristic; the CPU side is
    the oracle's bits (the best vector kernel, not AMX's tile products: docs/cpu.md)."""
    monkeypatch.setenv("FP8ATTN_NUM_SPLITS", "1")
    if _REASON is None and "FP8ATTN_CPU_ISA" not in os.environ:
        monkeypatch.setenv("FP8ATTN_CPU_ISA", next(i for i in torch.ops.fp8attn.cpu_isas() if i != "amx"))
    yield
