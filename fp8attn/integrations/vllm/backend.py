"""vLLM V1 attention backend running fp8attn: FP8 Q·Kᵀ, the checkpoint's probability scale, FP8 output.

Written against vLLM 0.33.0's ``vllm.v1.attention.backend`` interfaces (read off that release):

- The per-layer KV cache is one tensor of logical shape ``[num_blocks, num_kv_heads, block_size,
  2 * head_size]`` (K and V side by side in the last axis) whose physical strides follow the run's
  ``KVCacheLayout``; ``kv_cache.transpose(1, 2).split(head_size, -1)`` gives the K and V caches as
  ``[num_blocks, block_size, num_kv_heads, head_size]`` views, contiguous in the head dim only. The op
  takes those strided views as they are, so every layout works and nothing is copied. FP8 caches are
  allocated as uint8 and viewed as the platform's FP8 type (e4m3fn, or e4m3fnuz on MI300).
- ``forward`` writes the step's new K/V into the cache first (``forward_includes_kv_cache_update = True``:
  one custom op per layer and step, not vLLM's separate ``unified_kv_cache_update`` as well), quantized with
  the layer's ``_k_scale`` / ``_v_scale`` by ``torch.ops.fp8attn.write_kv_cache``, at the metadata's
  ``slot_mapping``.
- It then runs the whole mixed batch (prefills, chunked-prefill continuations, decodes) as one call of
  ``torch.ops.fp8attn.forward`` on the paged cache: varlen q (``query_start_loc``), ``seqused_k``
  (``seq_lens``), ``block_table``, causal aligned bottom-right. All scales are the layer's tensors, read
  where vLLM keeps them at every call (a weight reload or a captured graph sees the current values);
  max_seqlen_q / max_seqlen_k are given, so the op never synchronises with the host.
- Attention sinks (gpt-oss): vLLM hands the impl the layer's ``sinks`` Parameter (one value per local q
  head, in the model's dtype, filled at weight load; -inf for a head the loader pads). ``forward`` passes
  them to the op as float32, -inf raised to a finite logit whose term is exactly 0: one elementwise kernel
  per call on the device, so a reload into the Parameter is seen as the scales' are.

The same interfaces are in vLLM 0.32 (``vllm>=0.32,<0.34``). vLLM selects the backend through its ``CUSTOM``
slot, which fp8attn's plugin (:mod:`fp8attn_vllm`) registers; ``get_name()`` is therefore ``"CUSTOM"``.
"""

from __future__ import annotations

import copy
import logging
import weakref
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

from fp8attn.integrations.vllm import checkpoint_scales
from fp8attn.quant import default_p_scale, quantize
from fp8attn.shapes import HEAD_DIMS
from fp8attn_vllm import BACKEND_NAME

if TYPE_CHECKING:
    from vllm.config import VllmConfig
    from vllm.config.cache import CacheDType
    from vllm.v1.kv_cache_interface import AttentionSpec, KVCacheSpec

# Under vLLM's "vllm" logger, so that vLLM's handler prints it (with the process prefix) at its level.
logger = logging.getLogger("vllm.fp8attn")

# Head dims the fp8attn kernels are instantiated for (generated with csrc/kernels/shapes.h).
SUPPORTED_HEAD_SIZES: tuple[int, ...] = HEAD_DIMS
# vLLM cache dtypes this backend reads: per-tensor-scaled FP8 e4m3 only. The kernels take FP8 K/V.
SUPPORTED_KV_CACHE_DTYPES: tuple[str, ...] = ("fp8", "fp8_e4m3")
FP8_KV_CACHE_DTYPES = frozenset(SUPPORTED_KV_CACHE_DTYPES)
# The op's stand-in for a sink of -inf (vLLM's padded heads): finite, as the op takes sinks, and so far below
# any logit that its term exp(sink - m) is 0 in float32 (and fp64).
SINK_FLOOR = -1e30


class FP8AttnBackend(AttentionBackend):
    """FP8 attention with P quantization and fused FP8 output, on vLLM's paged FP8 KV cache."""

    supported_dtypes: ClassVar[list[torch.dtype]] = [torch.float16, torch.bfloat16]
    supported_kv_cache_dtypes: ClassVar[list[CacheDType]] = list(SUPPORTED_KV_CACHE_DTYPES)  # type: ignore[assignment]

    # forward writes the step's K/V itself: vLLM then calls no unified_kv_cache_update op per layer.
    forward_includes_kv_cache_update: bool = True

    @staticmethod
    def get_name() -> str:
        # vLLM's layers look their backend up as AttentionBackendEnum[get_name()]: the slot it runs in.
        return "CUSTOM"

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
    def supports_sink(cls) -> bool:
        # gpt-oss's per-head sinks: one logit per q head in the softmax's denominator (the op's `sinks`).
        return True

    @classmethod
    def supports_attn_type(cls, attn_type: str) -> bool:
        # Decoder self-attention over the paged cache only: no encoder, encoder-only or cross attention.
        return attn_type == AttentionType.DECODER

    @classmethod
    def supports_per_head_quant_scales(cls) -> bool:
        # q scales of Hkv entries (one per KV head group, as vLLM loads them) are expanded to the op's H.
        return True

    @classmethod
    def supports_compute_capability(cls, capability: DeviceCapability | None) -> bool:
        if capability is None:  # vLLM's CPU platform; FP8ATTN runs there only through fp8attn_vllm's opt-in
            return False
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
    causal: bool = True  # False: every key of the sequence is visible (a window is then symmetric)


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
        if not isinstance(m.causal, bool):
            raise NotImplementedError(
                "FP8ATTN takes one causal flag per batch, not per-request causal flags (a tensor); "
                "its selection refuses the configurations that produce them (use_non_causal)")
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
    """Runs torch.ops.fp8attn.write_kv_cache and torch.ops.fp8attn.forward for one attention layer."""

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
        if sinks is not None and tuple(sinks.shape) != (num_heads,):
            raise ValueError(f"sinks must have one value per q head of the layer ({num_heads}), got shape "
                             f"{tuple(sinks.shape)}")

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
        self.sinks = sinks
        self._sink_floor: torch.Tensor | None = None  # SINK_FLOOR as float32 [1] on the sinks' device
        self.fp8_dtype = current_platform.fp8_dtype()
        # vLLM quantizes q with the layer's _q_scale before forward (a static per-tensor QuantFP8 that
        # torch.compile fuses into RoPE); forward also accepts a 16-bit q and quantizes it in-kernel.
        self.supports_quant_query_input = True
        self._default_p_scale = default_p_scale(self.fp8_dtype)
        # The layer's checkpoint scales as vLLM loads them, checked then and after its processing (before it
        # replaces a bad value): see checkpoint_scales.
        self.loaded_scales: dict[str, torch.Tensor] = {}
        self.layer_ref: weakref.ref | None = None
        checkpoint_scales.watch(self)

    def process_weights_after_loading(self, act_dtype: torch.dtype) -> None:
        """Refuse, naming the layer and the checkpoint tensor, scales the op would refuse at the first request."""
        checkpoint_scales.check_processed(self)

    def fused_output_quant_supported(self, quant_key: QuantKey) -> bool:
        # Static per-tensor FP8 (o_proj's input scale): the kernel's epilogue writes sat(O / out_scale).
        return quant_key == kFp8StaticTensorSym

    def _prob_scale(self, layer: AttentionLayer) -> torch.Tensor | None:
        """The P-quantization scale: the layer's _prob_scale, or fp8attn's default where it was not loaded.

        vLLM leaves _prob_scale at exactly 1.0 when the checkpoint has no prob_output_scale (a calibrated
        one is about 1/448). P ∈ [0, 1] quantized with a scale of 1.0 would lose every p below 2⁻⁹, so 1.0
        is replaced by the kernel's default: on a GPU on the device (no host sync); a CPU tensor is read
        directly (None: the op's default). Computed from the layer's tensor at every call, never cached: an
        in-place reload (``.data.copy_``, which keeps the version counter) and a captured graph's replay both
        read the value the layer holds now.
        """
        src = layer._prob_scale
        if src.is_cpu:
            return None if float(src) == 1.0 else src
        return torch.where(src == 1.0, self._default_p_scale, src).reshape(1)

    def _op_sinks(self) -> torch.Tensor | None:
        """The layer's sinks as the op takes them: float32 (from the model's dtype), -inf (a padded head) as
        SINK_FLOOR. One elementwise kernel (max with a float32 [1] tensor promotes), no host sync; computed
        at every call, as the scales are, so an in-place reload of the Parameter is seen."""
        sinks = self.sinks
        if sinks is None:
            return None
        floor = self._sink_floor
        if floor is None or floor.device != sinks.device:
            floor = self._sink_floor = torch.full((1,), SINK_FLOOR, dtype=torch.float32, device=sinks.device)
        return torch.maximum(sinks, floor)

    def _q_scale(self, layer: AttentionLayer) -> torch.Tensor:
        """The layer's q scale for the op: per tensor as it is, or per head (vLLM's per-head q scale has one
        entry per KV head, for its group of query heads) expanded to the op's H entries."""
        q_scale = layer._q_scale
        if q_scale.numel() == self.num_kv_heads and self.num_queries_per_kv > 1:
            return q_scale.reshape(-1).repeat_interleave(self.num_queries_per_kv)
        return q_scale

    def _kv_caches(self, kv_cache: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        # [num_blocks, Hkv, block_size, 2D] (any physical layout) -> two [num_blocks, block_size, Hkv, D] views.
        key_cache, value_cache = kv_cache.transpose(1, 2).split(self.head_size, dim=-1)
        if key_cache.dtype != self.fp8_dtype:
            key_cache = key_cache.view(self.fp8_dtype)
            value_cache = value_cache.view(self.fp8_dtype)
        return key_cache, value_cache

    def _write_kv_cache(
        self,
        layer: AttentionLayer,
        key: torch.Tensor,
        value: torch.Tensor,
        key_cache: torch.Tensor,
        value_cache: torch.Tensor,
        slot_mapping: torch.Tensor,
    ) -> None:
        """Write the step's new K/V rows into the cache at slot_mapping, quantized with k_scale / v_scale."""
        # key/value may be padded beyond the scheduled tokens; slot_mapping is not.
        n = slot_mapping.shape[0]
        key, value = key[:n], value[:n]
        k_scale, v_scale = layer._k_scale, layer._v_scale
        if k_scale.numel() > 1 or v_scale.numel() > 1:
            # Per-head scales ([Hkv]): quantized here, the op writes FP8 rows as they are.
            key = quantize(key, k_scale.reshape(1, -1, 1), self.fp8_dtype)
            value = quantize(value, v_scale.reshape(1, -1, 1), self.fp8_dtype)
            k_scale = v_scale = None
        torch.ops.fp8attn.write_kv_cache(key, value, key_cache, value_cache, slot_mapping, k_scale, v_scale)

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
        """Write the step's new K/V into the paged FP8 cache, then attention of the batch's query tokens over it.

        query: [T, H, D], FP8 (quantized by vLLM with _q_scale) or 16-bit (quantized in-kernel);
        key, value: [T, Hkv, D] 16-bit, None where the layer shares another layer's cache (nothing written);
        output: [T, H, D], 16-bit, or FP8 when output_scale is given (vLLM's attention+quant fusion).
        """
        if output_block_scale is not None:
            raise NotImplementedError("FP8ATTN does not support block-scaled (NVFP4) output quantization")
        if attn_metadata is None:
            # Profiling run, before serving: the output scale the attn+quant fusion passes is checked here.
            if output_scale is not None:
                checkpoint_scales.check_output_scale(self, layer, output_scale)
            return output.fill_(0)
        _announce(layer, query, output, kv_cache)

        n = attn_metadata.num_actual_tokens
        causal = attn_metadata.causal
        window_left, window_right = self.sliding_window
        if not causal and window_left >= 0 and window_right == 0:
            window_right = window_left  # a non-causal window looks both ways (as vLLM's FlashAttention does)
        key_cache, value_cache = self._kv_caches(kv_cache)
        if key is not None and value is not None and self.kv_sharing_target_layer_name is None:
            self._write_kv_cache(layer, key, value, key_cache, value_cache, attn_metadata.slot_mapping)
        torch.ops.fp8attn.forward(
            query[:n],
            key_cache,
            value_cache,
            output[:n],
            cu_seqlens_q=attn_metadata.query_start_loc,
            cu_seqlens_k=None,
            seqused_k=attn_metadata.seq_lens,
            max_seqlen_q=attn_metadata.max_query_len,
            max_seqlen_k=attn_metadata.max_seq_len,
            block_table=attn_metadata.block_table,
            softmax_scale=self.scale,
            causal=causal,
            window_left=window_left,
            window_right=window_right,
            softcap=self.logits_soft_cap,
            q_descale=self._q_scale(layer),
            k_descale=layer._k_scale,
            v_descale=layer._v_scale,
            p_scale=self._prob_scale(layer),
            out_scale=output_scale,
            return_softmax_lse=False,
            kv_tile=0,
            sinks=self._op_sinks(),
        )
        return output


_announced = False


def _announce(layer: AttentionLayer, query: torch.Tensor, output: torch.Tensor, kv_cache: torch.Tensor) -> None:
    """Log the first forward of this process: the line that shows FP8ATTN (not another backend) ran."""
    global _announced
    if _announced:
        return
    _announced = True
    logger.info("%s forward running (fp8attn on %s): layer %s, query %s, output %s, KV cache %s",
                BACKEND_NAME, query.device.type, getattr(layer, "layer_name", "?"),
                str(query.dtype).removeprefix("torch."), str(output.dtype).removeprefix("torch."),
                tuple(kv_cache.shape))
