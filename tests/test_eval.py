"""transformers integration (attn_implementation="fp8attn") and the end-to-end perplexity check."""

import math
import os
from pathlib import Path

import pytest
import torch

if os.environ.get("FP8ATTN_REQUIRE_TRANSFORMERS") or os.environ.get("FP8ATTN_REQUIRE_VLLM"):
    import transformers  # CI installs it: a missing package is a failure, not a skip
else:
    transformers = pytest.importorskip("transformers")

from fp8attn import calibrate as cal  # noqa: E402
from fp8attn import eval as fp8eval  # noqa: E402
from fp8attn.integrations import transformers as fp8hf  # noqa: E402
from fp8attn.quark import QuarkScales  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
MODEL = REPO / "models" / "stdlib-llama"


def tiny_llama(seed=0, dtype=torch.bfloat16, attn="sdpa", **over):
    torch.manual_seed(seed)
    kw = dict(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
              num_attention_heads=4, num_key_value_heads=2, head_dim=64, max_position_embeddings=128,
              bos_token_id=None, eos_token_id=None, pad_token_id=None, tie_word_embeddings=True)
    kw.update(over)
    model = transformers.LlamaForCausalLM(transformers.LlamaConfig(**kw)).to(dtype).eval()
    if attn == "fp8attn":
        fp8hf.register()
    model.set_attn_implementation(attn)
    return model


def ids(n, s, seed=1):
    return torch.randint(0, 256, (n, s), generator=torch.Generator().manual_seed(seed))


@pytest.fixture(scope="module")
def scales():
    model = tiny_llama(dtype=torch.float32)
    amax = cal.calibrate(model, [ids(4, 64, seed=5)], progress=False)
    return QuarkScales(layers=cal.amax_to_scales(amax))


def fp8_model(scales, **mode):
    model = tiny_llama(attn="fp8attn")
    fp8hf.attach_scales(model, scales, **mode)
    return model


def rel_err(a, b):
    return ((a.float() - b.float()).norm() / b.float().norm()).item()


@pytest.mark.parametrize("mode", [dict(quantize_p=False, fp8_output=False), dict(fp8_output=False), dict(),
                                  dict(use_checkpoint_p_scale=False)])
def test_logits_close_to_sdpa(scales, mode):
    x = ids(2, 48)
    ref = tiny_llama()(input_ids=x).logits
    out = fp8_model(scales, **mode)(input_ids=x).logits
    assert out.dtype == torch.bfloat16 and torch.isfinite(out).all()
    assert rel_err(out, ref) < 0.05


def test_p_and_o_quantization_change_the_result(scales):
    x = ids(1, 48)
    a = fp8_model(scales, quantize_p=False, fp8_output=False)(input_ids=x).logits
    b = fp8_model(scales, fp8_output=False)(input_ids=x).logits
    c = fp8_model(scales)(input_ids=x).logits
    assert not torch.equal(a, b) and not torch.equal(b, c)


@pytest.mark.parametrize("mode", [dict(), dict(quantize_p=False)])
def test_padding_matches_separate_sequences(scales, mode):
    """Padded batches go through the varlen layout: each row equals the sequence run alone."""
    model = fp8_model(scales, **mode)
    x = ids(2, 40)
    lens = [40, 23]
    mask = torch.tensor([[1] * 40, [1] * 23 + [0] * 17])  # right padding
    out = model(input_ids=x, attention_mask=mask).logits
    for i, n in enumerate(lens):
        alone = model(input_ids=x[i:i + 1, :n]).logits[0]
        torch.testing.assert_close(out[i, :n], alone, atol=2e-2, rtol=2e-2)


def test_generation_with_kv_cache(scales):
    """Decode steps (q_len 1 against the cached keys, causal aligned bottom-right) give the same
    next-token logits as a full forward over the whole prefix."""
    model = fp8_model(scales)
    x = ids(2, 20)
    gen = model.generate(input_ids=x, attention_mask=torch.ones_like(x), max_new_tokens=6, do_sample=False,
                         output_logits=True, return_dict_in_generate=True, pad_token_id=0)
    seq = gen.sequences
    assert seq.shape == (2, 26)
    full = model(input_ids=seq[:, :-1]).logits
    for t, step_logits in enumerate(gen.logits):
        torch.testing.assert_close(step_logits.float(), full[:, 19 + t].float(), atol=5e-2, rtol=5e-2)


def test_fnuz_scales_are_doubled_and_run(scales):
    x = ids(1, 32)
    fn = fp8_model(scales)(input_ids=x).logits
    model = tiny_llama(attn="fp8attn")
    used = fp8hf.attach_scales(model, scales, fp8_dtype=torch.float8_e4m3fnuz)
    assert used[0].k.item() == 2 * scales[0].k.item()
    assert model.model.layers[0].self_attn.fp8attn.fp8_dtype == torch.float8_e4m3fnuz
    fnuz = model(input_ids=x).logits
    assert rel_err(fnuz, fn) < 0.05


def test_absent_q_scale_is_one_as_in_vllm(scales):
    """Quark's FP8-KV and attention-only exports have no q scale: q is quantized with 1.0, as vLLM 0.32/0.33 do."""
    no_q = QuarkScales(layers={n: s.map(lambda t: t) for n, s in scales.layers.items()})
    for s in no_q.layers.values():
        s.q = None
    with_one = QuarkScales(layers={n: s.map(lambda t: t) for n, s in scales.layers.items()})
    for s in with_one.layers.values():
        s.q = torch.ones(1)
    x = ids(1, 24)
    model = fp8_model(no_q)
    assert model.model.layers[0].self_attn.fp8attn.scales.q.item() == 1.0
    assert no_q[0].q is None  # the scales read are reported as they were
    torch.testing.assert_close(model(input_ids=x).logits, fp8_model(with_one)(input_ids=x).logits, rtol=0, atol=0)


def test_errors(scales):
    model = tiny_llama(attn="fp8attn")
    with pytest.raises(RuntimeError, match="attach_scales"):
        model(input_ids=ids(1, 8))
    partial = QuarkScales(layers={n: s.map(lambda t: t) for n, s in scales.layers.items()})
    partial.layers["model.layers.1.self_attn"].o = None
    with pytest.raises(ValueError, match=r"model\.layers\.1\.self_attn\.o"):
        fp8hf.attach_scales(model, partial)
    assert not hasattr(model.model.layers[0].self_attn, "fp8attn")  # nothing half-attached
    fp8hf.attach_scales(model, partial, fp8_output=False)  # o is not needed without FP8 output
    partial.layers["model.layers.0.self_attn"].p = None
    with pytest.raises(ValueError, match=r"self_attn\.p.*pass fp8_output=False and use_checkpoint_p_scale=False"):
        fp8hf.attach_scales(model, partial)
    model = tiny_llama(attn="fp8attn", attention_dropout=0.1)
    fp8hf.attach_scales(model, scales)
    model.train()
    with pytest.raises(ValueError, match="dropout"):
        model(input_ids=ids(1, 8))


def test_attach_from_checkpoint_directory(scales, tmp_path):
    from fp8attn.quark import write_attention_scales

    model = tiny_llama(attn="fp8attn")
    model.save_pretrained(tmp_path)
    write_attention_scales(tmp_path / "fp8attn_scales.safetensors", scales)
    loaded = transformers.AutoModelForCausalLM.from_pretrained(str(tmp_path), attn_implementation="fp8attn",
                                                               dtype=torch.bfloat16)
    got = fp8hf.attach_scales(loaded, tmp_path)
    assert got.complete() and all(got[i].as_floats() == scales[i].as_floats() for i in range(2))
    x = ids(1, 16)
    out = loaded(input_ids=x).logits
    loaded.set_attn_implementation("sdpa")
    assert rel_err(out, loaded(input_ids=x).logits) < 0.05


def test_table_format():
    res = {"model": "m", "device": "CPU", "fp8_dtype": "float8_e4m3fn", "sequences": 2, "seq_len": 8, "tokens": 16,
           "uniform_ppl": 256.0, "torch": "x", "transformers": "y",
           "rows": [{"config": "sdpa-bf16", "description": "d", "ppl": 3.0, "bits_per_token": 1.58,
                     "rel_vs_bf16_pct": 0.0}]}
    t = fp8eval.format_table(res)
    assert "| sdpa-bf16 | d | 3.0000 | 1.5800 | +0.000% |" in t


def test_full_fp8_attention_within_1pct_of_bf16_on_the_embedded_model():
    """The issue's acceptance check: FP8 Q/K/V/P/O attention keeps held-out perplexity within +1%
    of the bf16 SDPA baseline on the model trained here (CPU)."""
    res = fp8eval.evaluate(MODEL, configs=["sdpa-bf16", "fp8-qkvpo"], max_seqs=32, progress=False)
    rows = {r["config"]: r for r in res["rows"]}
    assert res["tokens"] == 32 * 512
    assert rows["sdpa-bf16"]["ppl"] < 0.1 * res["uniform_ppl"]  # a trained model, far from uniform
    rel = rows["fp8-qkvpo"]["rel_vs_bf16_pct"]
    print(fp8eval.format_table(res))
    assert math.isfinite(rel) and rel <= 1.0, rel


def test_compare_prints_the_table(capsys):
    res = fp8eval.compare(MODEL, device="cpu", max_seqs=1)
    out = capsys.readouterr().out
    assert [r["config"] for r in res["rows"]] == ["sdpa-bf16", "fp8-qkv", "fp8-qkvp", "fp8-qkvpo"]
    assert "| fp8-qkvpo |" in out


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_fp32_and_fp16_models(scales, dtype):
    """fp16 q is quantized in the kernel; fp32 q is quantized before the call (the op takes 16-bit or FP8 q)."""
    x = ids(2, 32)
    ref = tiny_llama(dtype=torch.float32)(input_ids=x).logits
    for mode in (dict(), dict(fp8_output=False)):
        model = tiny_llama(attn="fp8attn", dtype=dtype)
        fp8hf.attach_scales(model, scales, **mode)
        out = model(input_ids=x).logits
        assert out.dtype == dtype and rel_err(out, ref) < 0.05


def test_cli_check_json_and_markdown(tmp_path, capsys):
    rc = fp8eval.main(["--max-seqs", "2", "--configs", "fp8-qkvp", "--check", "1.0",
                       "--json", str(tmp_path / "r.json"), "--md", str(tmp_path / "r.md")])
    out = capsys.readouterr().out
    assert rc == 0 and "fp8-qkvpo vs sdpa-bf16" in out and "OK" in out
    import json

    res = json.loads((tmp_path / "r.json").read_text())
    assert [r["config"] for r in res["rows"]] == ["fp8-qkvp", "sdpa-bf16", "fp8-qkvpo"]
    assert (tmp_path / "r.md").read_text().startswith("Held-out perplexity of `stdlib-llama`")
    with pytest.raises(ValueError, match="unknown"):
        fp8eval.evaluate(MODEL, configs=["nope"])
    with pytest.raises(FileNotFoundError, match="FP8ATTN_MODEL"):
        fp8eval.evaluate(tmp_path)


def test_train_script_split_is_disjoint_and_deterministic():
    import importlib.util

    spec = importlib.util.spec_from_file_location("train_stdlib_llama", REPO / "models" / "train_stdlib_llama.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    files = mod.stdlib_files()
    assert files and files == sorted(files)
    held = {rel for rel, _ in files if mod.is_heldout(rel)}
    assert 0 < len(held) < 0.1 * len(files)
    log = __import__("json").loads((MODEL / "train_log.json").read_text())
    if log["python"] == __import__("sys").version:  # the committed texts come from this very stdlib
        first_held = next(p for rel, p in files if rel in held)
        first_train = next(p for rel, p in files if rel not in held)
        assert (MODEL / "heldout.txt").read_bytes()[:2000] == first_held.read_bytes()[:2000]
        assert (MODEL / "calib.txt").read_bytes()[:2000] == first_train.read_bytes()[:2000]
    assert mod.lr_at(0, 550, 3e-3, 100) == pytest.approx(3e-5)
    assert mod.lr_at(549, 550, 3e-3, 100) == pytest.approx(3e-4, rel=1e-3)
