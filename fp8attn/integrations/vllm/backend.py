"""vLLM V1 attention backend running fp8attn: FP8 Q·Kᵀ, the checkpoint's probability scale, FP8 output.

Written against vLLM 0.33.0's ``vllm.v1.attention.backend`` interfaces (read off that release):

- The per-layer KV cache is one tensor of logical shape ``[num_blocks, num_kv_heads, block_size,
  2 * head_size]`` (K and V side by side in the last axis) whose physical strides follow the run's
  ``KVCacheLayout``; ``kv_cache.transpose(1, 2).split(head_size, -1)`` gives the K and V caches as
  ``[num_blocks, block_size, num_kv_heads, head_size]`` views, contiguous in the head dim only. The op
  takes those strided views as they are, so every layout works and nothing is copied. FP8 caches are
  allocated as uint8 and viewed as the platform's FP8 type (e4m3fn, or e4m3fnuz on MI300).
- New K/V are written by ``do_kv_cache_update`` (``forward_includes_kv_cache_update = False``), quantized
  with the layer's ``_k_scale`` / ``_v_scale`` by ``torch.ops.fp8attn.write_kv_cache``.
- ``forward`` runs the whole mixed batch (prefills, chunked-prefill continuations, decodes) as one call of
  ``torch.ops.fp8attn.forward`` on the paged cache: varlen q (``query_start_loc``), ``seqused_k``
  (``seq_lens``), ``block_table``, causal aligned bottom-right. All scales are the layer's device tensors;
  max_seqlen_q / max_seqlen_k are given, so the op never synchronises with the host.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

import torch
from vllm.model_executor.layers.quantization.utils.quant_utils import QuantKey, kFp8StaticTensorSym
from vllm.platforms import current_platform
from vllm.platforms.interface import DeviceCapability
from vllm.v1.attention.backend import (
    AttentionBackend,
    AttentionCGSupport,
    AttentionImpl,
    AttentionLayer,
    AttentionMetadata,
    AttentionMetadataBuilder,
    AttentionType,
    CommonAttentionMetadata,
    MultipleOf,
)

from . import BACKEND_NAME

if TYPE_CHECKING:
    from vllm.config import VllmConfig
    from vllm.config.cache import CacheDType
    from vllm.v1.kv_cache_interface import AttentionSpec, KVCacheSpec

# Head dims the fp8attn kernels are instantiated for (csrc/fwd_args.cpp kHeadDims).
SUPPORTED_HEAD_SIZES: tuple[int, ...] = (64, 80, 96, 112, 128, 192, 256)
# vLLM cache dtypes this backend reads: per-tensor-scaled FP8 e4m3 only. The kernels take FP8 K/V.
SUPPORTED_KV_CACHE_DTYPES: tuple[str, ...] = ("fp8", "fp8_e4m3")
FP8_KV_CACHE_DTYPES = frozenset(SUPPORTED_KV_CACHE_DTYPES)


def _load_ops() -> None:
    """Register torch.ops.fp8attn.* (importing fp8attn loads its extension and the ops' fake impls)."""
    import fp8attn  # noqa: F401


def _default_p_scale(fp8_dtype: torch.dtype) -> float:
    """The P-quantization scale fp8attn uses when a checkpoint has none (see design §1)."""
    try:
        from fp8attn.quant import default_p_scale

        return float(default_p_scale(fp8_dtype))
    except ImportError:  # pragma: no cover - the package always ships quant.py
        return 2.0**-8


class FP8AttnBackend(AttentionBackend):
    """FP8 attention with P quantization and fused FP8 output, on vLLM's paged FP8 KV cache."""

    supported_dtypes: ClassVar[list[torch.dtype]] = [torch.float16, torch.bfloat16]
    supported_kv_cache_dtypes: ClassVar[list[CacheDType]] = list(SUPPORTED_KV_CACHE_DTYPES)  # type: ignore[assignment]

    # The KV cache is written by do_kv_cache_update (vLLM's unified_kv_cache_update op), not by forward.
    forward_includes_kv_cache_update: bool = False

    @staticmethod
    def get_name() -> str:
        return BACKEND_NAME

    @staticmethod
    def get_impl_cls() -> type[FP8AttnImpl]:
        return FP8AttnImpl

    @staticmethod
    def get_builder_cls() -> type[FP8AttnMetadataBuilder]:
        return FP8AttnMetadataBuilder

    @staticmethod
    def get_supported_kernel_block_sizes(kv_cache_spec: KVCacheSpec | None = None) -> list[int | MultipleOf]:
        return [MultipleOf(16)]

    @classmethod
    def get_supported_head_sizes(cls) -> list[int]:
        return list(SUPPORTED_HEAD_SIZES)

    @classmethod
    def supports_sliding_window(cls) -> bool:
        return True

    @classmethod
    def supports_attn_type(cls, attn_type: str) -> bool:
        # Decoder self-attention over the paged cache only: no encoder, encoder-only or cross attention.
        return attn_type == AttentionType.DECODER

    @classmethod
    def supports_compute_capability(cls, capability: DeviceCapability) -> bool:
        if current_platform.is_rocm():
            # gfx942 (MI300, e4m3fnuz) and gfx950 (MI350, e4m3fn): the FP8 MFMA targets.
            return capability in (DeviceCapability(9, 4), DeviceCapability(9, 5))
        # NVIDIA: FP8 tensor cores from Ada (sm_89) on; Hopper (sm_90) is the main target.
        return capability >= DeviceCapability(8, 9)

    @classmethod
    def supports_combination(
        cls,
        head_size: int,
        dtype: torch.dtype,
        kv_cache_dtype: CacheDType | None,
        block_size: int | None,
        use_mla: bool,
        has_sink: bool,
        use_sparse: bool,
        use_mm_prefix: bool,
        device_capability: DeviceCapability,
    ) -> str | None:
        # The generic reasons ("head_size not supported", ...) come from validate_configuration; these
        # say what to change.
        reasons = []
        if kv_cache_dtype is not None and kv_cache_dtype not in FP8_KV_CACHE_DTYPES:
            reasons.append(
                f"FP8ATTN reads an FP8 (e4m3, per-tensor scaled) KV cache: run with --kv-cache-dtype fp8 "
                f"(got {kv_cache_dtype!r})"
            )
        if head_size not in SUPPORTED_HEAD_SIZES:
            reasons.append(f"FP8ATTN supports head sizes {list(SUPPORTED_HEAD_SIZES)}, got {head_size}")
        return "; ".join(reasons) if reasons else None


@dataclass
class FP8AttnMetadata(AttentionMetadata):
    """Per-batch metadata: the op's paged varlen arguments, as vLLM's common metadata holds them."""

    num_actual_tokens: int  # query tokens in the batch, excluding padding
    max_query_len: int
    query_start_loc: torch.Tensor  # int32 [num_reqs + 1] -> cu_seqlens_q
    max_seq_len: int
    seq_lens: torch.Tensor  # int32 [num_reqs], context + new tokens -> seqused_k
    block_table: torch.Tensor  # int32 [num_reqs, max_blocks]
    slot_mapping: torch.Tensor  # int64 [num_actual_tokens]
    causal: bool | torch.Tensor = True


class FP8AttnMetadataBuilder(AttentionMetadataBuilder[FP8AttnMetadata]):
    # The op never synchronises with the host when max_seqlen_q / max_seqlen_k are given, and reads every
    # length from device tensors, so a captured call replays correctly as long as the captured bounds hold:
    # vLLM captures with max_seq_len = max_model_len (a bound on every key length), but the max query length
    # of a mixed batch it replays can exceed the captured one, and a kernel may size its grid by
    # max_seqlen_q. So full graphs for uniform (decode / spec-decode verify) batches, whose query length is
    # fixed; mixed batches run piecewise or eagerly. ALWAYS is safe once the GPU kernels size their grids by
    # the token count instead.
    _cudagraph_support: ClassVar[AttentionCGSupport] = AttentionCGSupport.UNIFORM_BATCH
    supports_update_block_table: bool = True

    def __init__(
        self,
        kv_cache_spec: AttentionSpec,
        layer_names: list[str],
        vllm_config: VllmConfig,
        device: torch.device,
    ):
        super().__init__(kv_cache_spec, layer_names, vllm_config, device)
        self.block_size = kv_cache_spec.block_size

    def build(
        self,
        common_prefix_len: int,
        common_attn_metadata: CommonAttentionMetadata,
        fast_build: bool = False,
    ) -> FP8AttnMetadata:
        m = common_attn_metadata
        return FP8AttnMetadata(
            num_actual_tokens=m.num_actual_tokens,
            max_query_len=m.max_query_len,
            query_start_loc=m.query_start_loc,
            max_seq_len=m.max_seq_len,
            seq_lens=m.seq_lens,
            block_table=m.block_table_tensor,
            slot_mapping=m.slot_mapping,
            causal=m.causal,
        )

    def build_for_cudagraph_capture(self, common_attn_metadata: CommonAttentionMetadata) -> FP8AttnMetadata:
        metadata = self.build(0, common_attn_metadata)
        # Capture with short sequences (the captured launch reads the lengths from the device on replay);
        # as vLLM's Triton backend does, so capture does not attend over max_model_len keys.
        metadata.seq_lens.fill_(1)
        return metadata

    def update_block_table(
        self, metadata: FP8AttnMetadata, blk_table: torch.Tensor, slot_mapping: torch.Tensor
    ) -> FP8AttnMetadata:
        new_metadata = copy.copy(metadata)
        new_metadata.block_table = blk_table
        new_metadata.slot_mapping = slot_mapping
        return new_metadata


class FP8AttnImpl(AttentionImpl[FP8AttnMetadata]):
    """Runs torch.ops.fp8attn.forward / write_kv_cache for one attention layer."""

    def __init__(
        self,
        num_heads: int,
        head_size: int,
        scale: float,
        num_kv_heads: int | None = None,
        alibi_slopes: list[float] | None = None,
        sliding_window: int | None = None,
        kv_cache_dtype: str = "auto",
        logits_soft_cap: float | None = None,
        attn_type: str = AttentionType.DECODER,
        kv_sharing_target_layer_name: str | None = None,
        sinks: torch.Tensor | None = None,
    ) -> None:
        if alibi_slopes is not None:
            raise NotImplementedError("FP8ATTN does not support ALiBi")
        if sinks is not None:
            raise NotImplementedError("FP8ATTN does not support attention sinks")
        if attn_type != AttentionType.DECODER:
            raise NotImplementedError(
                f"FP8ATTN supports decoder self-attention only, not attention type {attn_type!r}"
            )
        if kv_cache_dtype not in FP8_KV_CACHE_DTYPES:
            raise NotImplementedError(
                f"FP8ATTN reads an FP8 KV cache: run with --kv-cache-dtype fp8 (got {kv_cache_dtype!r})"
            )
        if head_size not in SUPPORTED_HEAD_SIZES:
            raise NotImplementedError(
                f"FP8ATTN supports head sizes {list(SUPPORTED_HEAD_SIZES)}, got {head_size}"
            )
        num_kv_heads = num_heads if num_kv_heads is None else num_kv_heads
        if num_heads % num_kv_heads != 0:
            raise ValueError(f"num_heads ({num_heads}) must be a multiple of num_kv_heads ({num_kv_heads})")

        self.num_heads = num_heads
        self.head_size = head_size
        self.scale = float(scale)
        self.num_kv_heads = num_kv_heads
        self.num_queries_per_kv = num_heads // num_kv_heads
        self.alibi_slopes = None
        # vLLM's sliding_window counts the current token: keys in (q - window, q] are visible.
        self.sliding_window = (-1, -1) if sliding_window is None else (sliding_window - 1, 0)
        self.kv_cache_dtype = kv_cache_dtype
        self.logits_soft_cap = float(logits_soft_cap or 0.0)
        self.attn_type = attn_type
        self.kv_sharing_target_layer_name = kv_sharing_target_layer_name
        self.sinks = None
        self.fp8_dtype = current_platform.fp8_dtype()
        # vLLM quantizes q with the layer's _q_scale before forward (a static per-tensor QuantFP8 that
        # torch.compile fuses into RoPE); forward also accepts a 16-bit q and quantizes it in-kernel.
        self.supports_quant_query_input = True
        self._default_p_scale = _default_p_scale(self.fp8_dtype)
        self._p_scale_key: tuple[int, int] | None = None
        self._p_scale: torch.Tensor | None = None
        _load_ops()

    def fused_output_quant_supported(self, quant_key: QuantKey) -> bool:
        # Static per-tensor FP8 (o_proj's input scale): the kernel's epilogue writes sat(O / out_scale).
        return quant_key == kFp8StaticTensorSym

    def _prob_scale(self, layer: AttentionLayer) -> torch.Tensor:
        """The P-quantization scale: the layer's _prob_scale, or fp8attn's default where it was not loaded.

        vLLM leaves _prob_scale at exactly 1.0 when the checkpoint has no prob_output_scale (a calibrated
        one is about 1/448). P ∈ [0, 1] quantized with a scale of 1.0 would lose every p below 2⁻⁹, so 1.0
        is replaced by the kernel's default, on the device (no host sync). The result is cached until the
        layer's tensor is written again (its version counter changes).
        """
        src = layer._prob_scale
        key = (src.data_ptr(), src._version)
        if key != self._p_scale_key or self._p_scale is None:
            s = src.detach().reshape(1).to(torch.float32)
            self._p_scale = torch.where(s == 1.0, torch.full_like(s, self._default_p_scale), s)
            self._p_scale_key = key
        return self._p_scale

    def _kv_caches(self, kv_cache: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        # [num_blocks, Hkv, block_size, 2D] (any physical layout) -> two [num_blocks, block_size, Hkv, D] views.
        key_cache, value_cache = kv_cache.transpose(1, 2).split(self.head_size, dim=-1)
        if key_cache.dtype != self.fp8_dtype:
            key_cache = key_cache.view(self.fp8_dtype)
            value_cache = value_cache.view(self.fp8_dtype)
        return key_cache, value_cache

    def do_kv_cache_update(
        self,
        layer: AttentionLayer,
        key: torch.Tensor,
        value: torch.Tensor,
        kv_cache: torch.Tensor,
        slot_mapping: torch.Tensor,
    ) -> None:
        """Write the step's new K/V rows into the cache at slot_mapping, quantized with k_scale / v_scale."""
        if kv_cache.numel() == 0:  # no cache bound yet (profiling)
            return
        key_cache, value_cache = self._kv_caches(kv_cache)
        # key/value may be padded beyond the scheduled tokens; slot_mapping is not.
        n = slot_mapping.shape[0]
        torch.ops.fp8attn.write_kv_cache(
            key[:n], value[:n], key_cache, value_cache, slot_mapping, layer._k_scale, layer._v_scale
        )

    def forward(
        self,
        layer: AttentionLayer,
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        kv_cache: torch.Tensor,
        attn_metadata: FP8AttnMetadata,
        output: torch.Tensor,
        output_scale: torch.Tensor | None = None,
        output_block_scale: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Attention of the batch's query tokens over the paged FP8 cache (new K/V already written).

        query: [T, H, D], FP8 (quantized by vLLM with _q_scale) or 16-bit (quantized in-kernel);
        output: [T, H, D], 16-bit, or FP8 when output_scale is given (vLLM's attention+quant fusion).
        """
        if output_block_scale is not None:
            raise NotImplementedError("FP8ATTN does not support block-scaled (NVFP4) output quantization")
        if attn_metadata is None:
            # Profiling run.
            return output.fill_(0)
        if attn_metadata.causal is not True:
            raise NotImplementedError("FP8ATTN supports causal decoder attention only")

        n = attn_metadata.num_actual_tokens
        key_cache, value_cache = self._kv_caches(kv_cache)
        torch.ops.fp8attn.forward(
            query[:n],
            key_cache,
            value_cache,
            output[:n],
            attn_metadata.query_start_loc,
            None,
            attn_metadata.seq_lens,
            attn_metadata.max_query_len,
            attn_metadata.max_seq_len,
            attn_metadata.block_table,
            self.scale,
            True,
            self.sliding_window[0],
            self.sliding_window[1],
            self.logits_soft_cap,
            layer._q_scale,
            layer._k_scale,
            layer._v_scale,
            self._prob_scale(layer),
            output_scale,
            False,
            0,
        )
        return output
