"""Reading (and writing) the attention scales of Quark FP8 checkpoints (fp8attn.quark)."""

import json

import pytest
import torch

pytest.importorskip("safetensors")
from safetensors.torch import save_file  # noqa: E402

from fp8attn.quark import (  # noqa: E402
    AttentionScales,
    QuarkScales,
    quark_scale_name,
    read_attention_scales,
    write_attention_scales,
)

# what amd-quark 0.13 exports per layer (docs/vllm.md, "Quark checkpoints"): 0-dim scales in the
# model dtype, FP8 e4m3fn weights with weight_scale / input_scale
VALUES = {"q": 0.0123, "k": 0.0456, "v": 0.0456, "p": 1 / 448, "o": 0.0078}


def quark_layer(i, dtype=torch.bfloat16, which="qkvpo", prefix="model.layers"):
    t = {}
    m = f"{prefix}.{i}.self_attn"
    for proj, (o, n) in {"q": (64, 32), "k": (16, 32), "v": (16, 32), "o": (32, 64)}.items():
        t[f"{m}.{proj}_proj.weight"] = torch.randn(o, n).to(torch.float8_e4m3fn)
        t[f"{m}.{proj}_proj.weight_scale"] = torch.tensor(0.01, dtype=dtype)
        if proj != "o":  # o_proj.input_scale is the attention output's scale: only with "o" in `which`
            t[f"{m}.{proj}_proj.input_scale"] = torch.tensor(0.02, dtype=dtype)
    for w in which:
        t[quark_scale_name(m, w)] = torch.tensor(VALUES[w] * (i + 1), dtype=dtype)
    t[f"{prefix}.{i}.mlp.down_proj.weight"] = torch.randn(32, 8).to(torch.float8_e4m3fn)
    return t


def expected(i, w, dtype=torch.bfloat16):
    return torch.tensor(VALUES[w] * (i + 1), dtype=dtype).float().item()


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_reads_quark_names_and_dtypes(tmp_path, dtype):
    tensors = {**quark_layer(0, dtype), **quark_layer(1, dtype)}
    tensors["model.embed_tokens.weight"] = torch.randn(10, 32, dtype=dtype)
    save_file(tensors, str(tmp_path / "model.safetensors"))
    s = read_attention_scales(tmp_path)
    assert isinstance(s, QuarkScales) and len(s) == 2 and s.missing == []
    assert s.complete()
    assert list(s.layers) == ["model.layers.0.self_attn", "model.layers.1.self_attn"]
    for i in range(2):
        for w in "qkvpo":
            t = getattr(s[i], w)
            assert t.dtype == torch.float32 and t.shape == (1,)
            assert t.item() == expected(i, w, dtype)
    assert s[1] is s["model.layers.1.self_attn"]
    assert s.fp8_dtype == torch.float8_e4m3fn


def test_fnuz_doubles_every_scale(tmp_path):
    save_file(quark_layer(0), str(tmp_path / "m.safetensors"))
    fn = read_attention_scales(tmp_path / "m.safetensors")
    fnuz = read_attention_scales(tmp_path / "m.safetensors", fp8_dtype=torch.float8_e4m3fnuz)
    assert fnuz.fp8_dtype == torch.float8_e4m3fnuz
    for w in "qkvpo":
        assert getattr(fnuz[0], w).item() == 2 * getattr(fn[0], w).item()
    assert fn.to_fnuz()[0].as_floats() == fnuz[0].as_floats()
    assert fnuz.to_fnuz() is fnuz  # not doubled twice
    with pytest.raises(ValueError, match="e4m3fn-convention"):
        write_attention_scales(tmp_path / "x.safetensors", fnuz)


def test_absent_scales_are_reported_not_invented(tmp_path):
    # an "FP8-KV" checkpoint: k/v scales only; layer 2 has no attention scale at all
    tensors = {**quark_layer(0, which="kv"), **quark_layer(1, which="kv"), **quark_layer(2, which="")}
    save_file(tensors, str(tmp_path / "model.safetensors"))
    (tmp_path / "config.json").write_text(json.dumps({"num_hidden_layers": 3}))
    s = read_attention_scales(tmp_path)
    assert len(s) == 3 and not s.complete() and s.complete("kv") is False
    assert s[0].missing() == ["q", "p", "o"] and s[2].missing() == ["q", "k", "v", "p", "o"]
    assert s[0].q is None and s[0].p is None and s[0].k.item() == expected(0, "k")
    assert "model.layers.0.self_attn.q_proj.output_scale" in s.missing
    assert "model.layers.0.self_attn.prob_output_scale" in s.missing
    assert "model.layers.2.self_attn.k_proj.output_scale" in s.missing
    assert "model.layers.1.self_attn.k_proj.output_scale" not in s.missing
    assert len(s.missing) == 3 + 3 + 5
    assert "absent" in s.summary()


def test_config_num_layers_counts_layers_without_tensors(tmp_path):
    save_file(quark_layer(0), str(tmp_path / "model.safetensors"))
    (tmp_path / "config.json").write_text(json.dumps({"text_config": {"num_hidden_layers": 2}}))
    s = read_attention_scales(tmp_path)
    assert len(s) == 2 and s[1].missing() == list("qkvpo")


def test_sharded_checkpoint_and_extra_scale_file(tmp_path):
    save_file(quark_layer(0, which="kv"), str(tmp_path / "model-00001-of-00002.safetensors"))
    save_file(quark_layer(1, which="kv"), str(tmp_path / "model-00002-of-00002.safetensors"))
    # a calibration written beside the model adds q, p, o
    write_attention_scales(tmp_path / "fp8attn_scales.safetensors",
                           {f"model.layers.{i}.self_attn": {"q": 0.5, "p": 1 / 448, "o": 0.25, "k": None}
                            for i in range(2)})
    s = read_attention_scales(tmp_path)
    assert s.missing == [] and len(s.source) == 3
    assert s[1].q.item() == 0.5 and s[1].k.item() == expected(1, "k")


def test_conflicting_values_are_an_error(tmp_path):
    save_file(quark_layer(0), str(tmp_path / "a.safetensors"))
    write_attention_scales(tmp_path / "b.safetensors", {"model.layers.0.self_attn": {"q": 1.0}})
    with pytest.raises(ValueError, match=r"q_proj\.output_scale: different values"):
        read_attention_scales(tmp_path)


@pytest.mark.parametrize("bad, match", [
    (torch.tensor(-0.1), "positive and finite"),
    (torch.tensor(float("nan")), "positive and finite"),
    (torch.tensor(0.0), "positive and finite"),
    (torch.tensor([0.1, 0.2]), "1 element"),
    (torch.tensor(3, dtype=torch.int32), "floating-point"),
])
def test_bad_scale_names_the_tensor(tmp_path, bad, match):
    t = quark_layer(0)
    t["model.layers.0.self_attn.prob_output_scale"] = bad
    save_file(t, str(tmp_path / "m.safetensors"))
    with pytest.raises((ValueError, TypeError), match=r"model\.layers\.0\.self_attn\.prob_output_scale: .*" + match):
        read_attention_scales(tmp_path / "m.safetensors")


def test_bad_arguments(tmp_path):
    with pytest.raises(FileNotFoundError, match="path"):
        read_attention_scales(tmp_path / "nope")
    with pytest.raises(FileNotFoundError, match="no \\*.safetensors"):
        read_attention_scales(tmp_path)
    save_file({"lm_head.weight": torch.zeros(2, 2)}, str(tmp_path / "m.safetensors"))
    with pytest.raises(ValueError, match="no '\\*.<layer>.self_attn"):
        read_attention_scales(tmp_path)
    with pytest.raises(TypeError, match="fp8_dtype"):
        read_attention_scales(tmp_path, fp8_dtype=torch.bfloat16)
    with pytest.raises(KeyError, match="unknown scale"):
        write_attention_scales(tmp_path / "w.safetensors", {"model.layers.0.self_attn": {"x": 1.0}})
    with pytest.raises(ValueError, match="positive"):
        write_attention_scales(tmp_path / "w.safetensors", {"model.layers.0.self_attn": {"q": -1.0}})


def test_other_stacks_are_ignored_and_prefix_kept(tmp_path):
    # a multimodal checkpoint: vision-tower attention has no Quark scales
    t = {**quark_layer(0, prefix="model.language_model.layers"),
         **quark_layer(1, prefix="model.language_model.layers"),
         **quark_layer(0, which="", prefix="model.vision_tower.encoder.layers"),
         **quark_layer(1, which="", prefix="model.vision_tower.encoder.layers"),
         **quark_layer(2, which="", prefix="model.vision_tower.encoder.layers")}
    save_file(t, str(tmp_path / "m.safetensors"))
    s = read_attention_scales(tmp_path / "m.safetensors")
    assert list(s.layers) == ["model.language_model.layers.0.self_attn", "model.language_model.layers.1.self_attn"]
    assert s.complete()


def test_write_read_roundtrip_in_quark_format(tmp_path):
    scales = {f"model.layers.{i}.self_attn": AttentionScales(
        **{w: torch.tensor([VALUES[w] * (i + 1)]) for w in "qkvpo"}) for i in range(3)}
    names = write_attention_scales(tmp_path / "s.safetensors", scales, dtype=torch.bfloat16,
                                   metadata={"note": "test"})
    assert len(names) == 15 and "model.layers.2.self_attn.o_proj.input_scale" in names
    from safetensors import safe_open

    with safe_open(str(tmp_path / "s.safetensors"), framework="pt") as f:
        t = f.get_tensor("model.layers.0.self_attn.prob_output_scale")
        assert t.dtype == torch.bfloat16 and t.shape == ()  # as Quark writes them
        assert f.metadata()["note"] == "test"
    s = read_attention_scales(tmp_path / "s.safetensors")
    for i in range(3):
        for w in "qkvpo":
            assert getattr(s[i], w).item() == pytest.approx(VALUES[w] * (i + 1), rel=4e-3)
    # float32 keeps them exactly
    write_attention_scales(tmp_path / "f.safetensors", s)
    s2 = read_attention_scales(tmp_path / "f.safetensors")
    assert s2[2].as_floats() == s[2].as_floats()
