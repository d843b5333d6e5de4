"""A Quark export (attention-only, its "-cpu" copy) with layer 1's prob_output_scale edited, served by FP8ATTN:
a zero, negative, NaN, infinite or too large scale stops the engine at start (while vLLM loads the weights,
before it would turn the first three into 1.0), with an error naming the layer and the checkpoint tensor;
through the OpenAI server too, which exits before it answers /health. A removed one is served, with a
warning naming the layer and the scale used instead. (The unedited exports are served by
test_quark_exports.py, with neither.)
"""

from __future__ import annotations

import math
import shutil
from pathlib import Path

import pytest
import torch
from engines import ENGINE, FP8ATTN, PROMPTS, Server, fp8attn_processes, kv_cache_bytes, run_engines

from fp8attn import default_p_scale

LAYER = "model.layers.1.self_attn.attn"
TENSOR = "model.layers.1.self_attn.prob_output_scale"
REFUSED = f"FP8ATTN cannot serve attention layer {LAYER}: the checkpoint tensor {TENSOR} (vLLM's {LAYER}.prob_scale)"
# each one an engine that stops while loading its weights; inf goes through the OpenAI server
BAD = {"zero": 0.0, "negative": -0.002, "nan": math.nan, "too-large": 4096.0}


def edited_export(exports: Path, out: Path, value: float | None) -> Path:
    """attention-only-cpu with TENSOR set to value (None: removed); nothing else changed."""
    from safetensors.torch import load_file, save_file

    shutil.copytree(exports / "attention-only-cpu", out)
    path = out / "model.safetensors"
    tensors = load_file(str(path))
    if value is None:
        del tensors[TENSOR]
    else:
        tensors[TENSOR] = torch.tensor(value, dtype=tensors[TENSOR].dtype)  # 0-dim bf16, as Quark writes it
    save_file(tensors, str(path), metadata={"format": "pt"})
    return out


@pytest.fixture(scope="module")
def engines(exports, tmp_path_factory):
    work = tmp_path_factory.mktemp("edited-scales")
    specs = []
    for name, value in [*BAD.items(), ("removed", None)]:
        model = edited_export(exports, work / name, value)
        specs.append({"name": name, "env": FP8ATTN, "may_fail": value is not None,
                      "llm": dict(ENGINE, model=str(model), kv_cache_dtype="fp8", attention_backend="CUSTOM",
                                  enforce_eager=True, kv_cache_memory_bytes=32 * kv_cache_bytes(model)),
                      "tasks": [{"kind": "greedy", "prompts": PROMPTS[:2], "max_tokens": 8}]})
    return run_engines(specs, work)


@pytest.mark.parametrize("name", BAD)
def test_bad_prob_scale_stops_the_engine_at_start(engines, name):
    assert "error" in engines[name], engines[name]
    log = engines.engine_log(name)
    assert REFUSED in log and "Fix the checkpoint" in log, log[-6000:]
    assert fp8attn_processes(log) == []  # no forward ran


def test_removed_prob_scale_is_served_with_a_warning(engines):
    log = engines.engine_log("removed")
    assert "FP8ATTN cannot serve" not in log
    (warning,) = [line for line in log.splitlines() if "FP8ATTN: the checkpoint has no" in line]
    assert "no prob_scale for 1 attention layer(s), which its other 3 layer(s) have" in warning
    assert f"{TENSOR} (vLLM's {LAYER}.prob_scale) absent" in warning
    assert f"{LAYER} p_scale = {default_p_scale(torch.float8_e4m3fn)} (FP8ATTN's default P scale)" in warning
    assert fp8attn_processes(log) == ["Worker"]
    assert [len(g) for g in engines["removed"]["greedy"]] == [8, 8]


def test_openai_server_exits_at_start_on_an_infinite_prob_scale(exports, tmp_path):
    """Before this was checked at load, the server reported healthy, answered the first request with HTTP 500
    (the op's error naming no layer) and exited."""
    server = Server(edited_export(exports, tmp_path / "inf", math.inf), tmp_path)
    try:
        with pytest.raises(AssertionError, match="the server exited"):
            server.wait_ready()
    finally:
        server.stop()
    log = server.log()
    assert REFUSED in log and "= inf is refused: p_scale must be positive and finite" in log, log[-6000:]
