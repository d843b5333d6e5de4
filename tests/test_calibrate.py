"""Calibration of FP8 attention scales (fp8attn.calibrate) on Hugging Face causal LMs."""

import json
import os
from pathlib import Path

import pytest
import torch

if os.environ.get("FP8ATTN_REQUIRE_TRANSFORMERS") or os.environ.get("FP8ATTN_REQUIRE_VLLM"):
    import transformers  # CI installs it: a missing package is a failure, not a skip
else:
    transformers = pytest.importorskip("transformers")

from fp8attn import calibrate as cal  # noqa: E402
from fp8attn.quark import read_attention_scales  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
MODEL = REPO / "models" / "stdlib-llama"


def tiny_llama(seed=0, dtype=torch.float32):
    torch.manual_seed(seed)
    cfg = transformers.LlamaConfig(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                                   max_position_embeddings=128, bos_token_id=None, eos_token_id=None,
                                   pad_token_id=None, tie_word_embeddings=True)
    model = transformers.LlamaForCausalLM(cfg).to(dtype).eval()
    model.set_attn_implementation("sdpa")
    return model


def ids(n, s, seed=1):
    return torch.randint(0, 256, (n, s), generator=torch.Generator().manual_seed(seed))


def test_records_every_layer_and_leaves_the_model_as_it_was():
    model = tiny_llama()
    x = ids(3, 40)
    ref = model(input_ids=x).logits
    v_amax = {}
    hooks = [model.model.layers[i].self_attn.v_proj.register_forward_hook(
        lambda m, a, out, i=i: v_amax.__setitem__(i, max(v_amax.get(i, 0.0), out.abs().amax().item())))
        for i in range(2)]
    amax = cal.calibrate(model, [x[:2], x[2:]], progress=False)
    for h in hooks:
        h.remove()
    assert list(amax) == ["model.layers.0.self_attn", "model.layers.1.self_attn"]
    for i, a in enumerate(amax.values()):
        assert set(a) == set("qkvpo") and all(val > 0 for val in a.values())
        assert a["p"] == 1.0  # unnormalized probabilities exp(S - rowmax)
        assert a["v"] == pytest.approx(v_amax[i], rel=1e-6)  # v has no RoPE: the projection output
        assert a["o"] <= a["v"] * (1 + 1e-6)  # a convex combination of value rows
    assert model.config._attn_implementation == "sdpa"
    assert not hasattr(model.model.layers[0].self_attn, "_fp8attn_amax")
    # the recording attention computes the same attention
    torch.testing.assert_close(model(input_ids=x).logits, ref)


def test_recording_attention_matches_sdpa():
    model = tiny_llama()
    x = ids(2, 33)
    ref = model(input_ids=x).logits
    cal._register()
    model.set_attn_implementation(cal.CALIB_NAME)
    torch.testing.assert_close(model(input_ids=x).logits, ref, atol=1e-5, rtol=1e-5)


def test_deterministic():
    model = tiny_llama()
    x = ids(4, 32)
    a = cal.calibrate(model, [x[:2], x[2:]], progress=False)
    b = cal.calibrate(model, [x[:2], x[2:]], progress=False)
    assert a == b


def test_padding_is_excluded():
    model = tiny_llama()
    x = ids(2, 24)
    lens = [24, 15]
    separate = [cal.calibrate(model, [x[i:i + 1, :n]], progress=False) for i, n in enumerate(lens)]
    # right padding with huge-norm garbage tokens after the end of sequence 1
    xp = x.clone()
    xp[1, 15:] = 7
    mask = torch.tensor([[1] * 24, [1] * 15 + [0] * 9])
    padded = cal.calibrate(model, [{"input_ids": xp, "attention_mask": mask}], progress=False)
    for layer in padded:
        for w in "qkvo":
            want = max(s[layer][w] for s in separate)
            assert padded[layer][w] == pytest.approx(want, rel=1e-5), (layer, w)


def test_amax_to_scales():
    s = cal.amax_to_scales({"m.layers.0.self_attn": {"q": 448.0, "k": 4.48, "v": 1.0, "p": 1.0, "o": 0.0}})
    s0 = s["m.layers.0.self_attn"]
    assert s0.q.item() == 1.0 and s0.k.item() == pytest.approx(0.01) and s0.p.item() == pytest.approx(1 / 448)
    assert s0.o.item() > 0  # never a zero scale


def test_cli_writes_quark_named_scales(tmp_path, capsys):
    model = tiny_llama()
    model.save_pretrained(tmp_path / "m")
    text = tmp_path / "t.txt"
    text.write_bytes(bytes(range(256)) * 4)
    assert cal.main([str(tmp_path / "m"), "--text", str(text), "--seq-len", "64", "--batch", "4",
                     "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "wrote 10 scales for 2 layers (1024 tokens)" in out
    s = read_attention_scales(tmp_path / "m" / cal.SCALES_FILE)
    assert s.complete() and s.missing == []
    assert s[0].p.item() == pytest.approx(1 / 448)
    # reading the model directory finds the scales beside the weights
    assert read_attention_scales(tmp_path / "m").complete()
    from safetensors import safe_open

    with safe_open(str(tmp_path / "m" / cal.SCALES_FILE), framework="pt") as f:
        info = json.loads(f.metadata()["fp8attn.calibration"])
    assert info["tokens"] == 1024 and info["fp8_convention"] == "float8_e4m3fn"
    # the same run gives the same file contents
    assert cal.main([str(tmp_path / "m"), "--text", str(text), "--seq-len", "64", "--out",
                     str(tmp_path / "again.safetensors"), "--no-progress"]) == 0
    again = read_attention_scales(tmp_path / "again.safetensors")
    assert all(again[i].as_floats() == s[i].as_floats() for i in range(2))


def test_cli_errors(tmp_path):
    model = tiny_llama()
    model.save_pretrained(tmp_path / "m")
    with pytest.raises(SystemExit):
        cal.main([str(tmp_path / "m"), "--text", str(tmp_path / "missing.txt")])
    (tmp_path / "short.txt").write_bytes(b"abc")
    with pytest.raises(ValueError, match="fewer than one window"):
        cal.main([str(tmp_path / "m"), "--text", str(tmp_path / "short.txt"), "--no-progress"])


def test_committed_scales_are_reproduced_within_1pct():
    """Re-running the calibration recorded in the committed scale file gives the same scales (±1%)."""
    from safetensors import safe_open

    with safe_open(str(MODEL / "fp8attn_scales.safetensors"), framework="pt") as f:
        info = json.loads(f.metadata()["fp8attn.calibration"])
    committed = read_attention_scales(MODEL / "fp8attn_scales.safetensors")
    model = transformers.AutoModelForCausalLM.from_pretrained(str(MODEL), dtype=getattr(torch, info["dtype"]),
                                                              local_files_only=True)
    texts = [(MODEL / t).read_bytes() for t in info["texts"]]
    x = cal.load_corpus(texts, lambda b: list(b), info["seq_len"], None)
    assert x.numel() == info["tokens"]
    amax = cal.calibrate(model, [x[i:i + 8] for i in range(0, x.shape[0], 8)], progress=False)
    fresh = cal.amax_to_scales(amax)
    for name, s in committed.layers.items():
        for w in "qkvpo":
            assert getattr(fresh[name], w).item() == pytest.approx(getattr(s, w).item(), rel=0.01), (name, w)


def test_cli_uses_the_model_tokenizer(tmp_path, capsys):
    """A model directory with a tokenizer is tokenized with it (local files only), not read as bytes."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    words = ["[UNK]"] + [f"w{i}" for i in range(63)]
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    transformers.PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]").save_pretrained(tmp_path / "m")
    tiny_llama().save_pretrained(tmp_path / "m")
    (tmp_path / "t.txt").write_text(" ".join(f"w{i % 63}" for i in range(200)))
    assert cal.main([str(tmp_path / "m"), "--text", str(tmp_path / "t.txt"), "--seq-len", "50",
                     "--no-progress"]) == 0
    assert "(200 tokens)" in capsys.readouterr().out  # 200 words, not ~800 bytes
    with pytest.raises(ValueError, match="not 256"):
        cal._encoder(tmp_path / "m", 64, force_bytes=True)  # --bytes on a model whose vocabulary is not bytes


def test_cli_does_not_write_a_second_scale_file_into_a_quark_export(tmp_path, capsys):
    """A Quark export keeps its scales in model.safetensors: calibrating it into the same directory would give
    two values for the same names (read_attention_scales refuses the directory, vLLM would load both files).
    The CLI refuses before loading the model, the directory stays readable, and --out elsewhere works."""
    from safetensors.torch import load_file, save_file

    from fp8attn.quark import quark_scale_name

    model = tiny_llama()
    model.save_pretrained(tmp_path / "quark")
    weights = tmp_path / "quark" / "model.safetensors"
    tensors = load_file(str(weights))
    for i in range(2):
        for w, value in (("k", 0.02), ("v", 0.02), ("p", 1 / 448)):
            tensors[quark_scale_name(f"model.layers.{i}.self_attn", w)] = torch.tensor(value, dtype=torch.bfloat16)
    save_file(tensors, str(weights), metadata={"format": "pt"})
    text = tmp_path / "t.txt"
    text.write_bytes(bytes(range(256)) * 4)
    args = ["--text", str(text), "--seq-len", "64", "--no-progress"]
    for out in ([], ["--out", str(tmp_path / "quark" / "mine.safetensors")]):
        with pytest.raises(SystemExit):
            cal.main([str(tmp_path / "quark"), *args, *out])
        assert "already holds attention scales" in capsys.readouterr().err
    assert sorted(p.name for p in (tmp_path / "quark").glob("*.safetensors")) == ["model.safetensors"]
    assert read_attention_scales(tmp_path / "quark")[1].k.item() == torch.tensor(0.02, dtype=torch.bfloat16).item()
    assert cal.main([str(tmp_path / "quark"), *args, "--out", str(tmp_path / "elsewhere.safetensors")]) == 0
    assert read_attention_scales(tmp_path / "elsewhere.safetensors").complete()
