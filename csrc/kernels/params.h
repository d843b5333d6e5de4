// The whole contract between the host (torch binding) and every implementation of the forward
// pass: CPU, CUDA and HIP. No torch types: raw pointers, int64 strides in elements.
#pragma once
#include <cstdint>

#include "fast_div.h"
#include "numeric/fp8_kind.h"
#include "shapes.h"

namespace fp8attn {

// Element type of q and of out.
enum class ElemType : int32_t { FP8 = 0, BF16 = 1, FP16 = 2 };

struct FwdParams {
  // ---- tensors. q: [B, Sq, H, D] dense or [T, H, D] varlen. k/v: [B, Sk, Hkv, D] dense,
  // [Tk, Hkv, D] varlen, or [num_blocks, block_size, Hkv, D] paged. out like q. lse fp32.
  const void* q = nullptr;
  const void* k = nullptr;
  const void* v = nullptr;
  void* out = nullptr;
  float* lse = nullptr;  // null: not requested

  int64_t q_batch_stride = 0, q_row_stride = 0, q_head_stride = 0;
  int64_t k_batch_stride = 0, k_row_stride = 0, k_head_stride = 0;  // batch stride = block stride when paged
  int64_t v_batch_stride = 0, v_row_stride = 0, v_head_stride = 0;
  int64_t o_batch_stride = 0, o_row_stride = 0, o_head_stride = 0;
  // lse is [B, H, Sq] (dense q) or [H, T] (varlen q).
  int64_t lse_batch_stride = 0, lse_head_stride = 0, lse_row_stride = 1;

  // ---- sequence layout. Per batch b: q rows start at cu_seqlens_q[b] (varlen) or b*Sq (dense).
  const int32_t* cu_seqlens_q = nullptr;  // [B+1] or null (dense q)
  const int32_t* cu_seqlens_k = nullptr;  // [B+1] or null
  const int32_t* seqused_k = nullptr;     // [B] or null: number of keys used per batch
  const int32_t* block_table = nullptr;   // [B, max_blocks] or null (not paged)
  int64_t block_table_batch_stride = 0;
  int32_t block_table_cols = 0;  // entries per row (0: unknown; the decode kernels then read only what they use)
  int32_t page_block_size = 0;  // tokens per cache block when paged
  int32_t num_cache_blocks = 0;  // blocks in the cache, for bounds

  int32_t batch = 0;
  int32_t seqlen_q = 0;  // dense: Sq; varlen: max_seqlen_q
  int32_t seqlen_k = 0;  // dense: Sk; varlen/paged: max_seqlen_k
  int32_t total_q = 0;   // varlen: T
  int32_t total_k = 0;   // varlen K / V: their rows (0: unknown; bounds of the Hopper prefill tensor maps)
  int32_t num_heads = 0;
  int32_t num_heads_k = 0;
  int32_t head_dim = 0;

  // ---- scales: device pointers to float32; null means 1.0. Per-head when the stride is 1
  // (index = head), per-tensor when 0. All are dequantization scales: real = fp8 * scale.
  const float* q_descale = nullptr;
  const float* k_descale = nullptr;
  const float* v_descale = nullptr;
  int32_t q_descale_head_stride = 0, k_descale_head_stride = 0, v_descale_head_stride = 0;
  const float* p_scale_ptr = nullptr;  // 1 element; null: the FP8 kind's default (kernels/scales.h)
  // Attention sinks: [num_heads] float32 logits (natural units, in the scale of the final logits), one
  // more softmax term per q head that adds to the denominator only; null: none (softmax.h, add_sink).
  // (Here, where a float and its padding were: the later fields keep their offsets, the kernels their code.)
  const float* sinks = nullptr;
  const float* out_scale = nullptr;  // 1 element; non-null means FP8 output

  float softmax_scale = 1.f;
  float softcap = 0.f;  // <= 0: off
  // Visible keys of query row i (bottom-right aligned, shift = k_len - q_len):
  // [i + shift - window_left, i + shift + window_right]; -1 means unbounded. Causal is right = 0.
  int32_t window_left = -1;
  int32_t window_right = -1;
  bool is_causal = false;

  Fp8Kind fp8_kind = Fp8Kind::E4M3FN;
  ElemType q_type = ElemType::FP8;
  ElemType out_type = ElemType::BF16;

  // ---- implementation knobs. KV tile length (the online-softmax step, which fixes where P is
  // quantized); 0 lets the implementation choose.
  int32_t kv_tile = 0;
  // Split-KV (flash-decoding) workspace, filled by the launcher: num_splits > 1 uses it.
  int32_t num_splits = 1;
  float* o_accum = nullptr;    // [num_splits, B*Sq or T, H, D]
  float* lse_accum = nullptr;  // [num_splits, B*Sq or T, H]
  int32_t num_sm = 0;
  // Hopper: TMA tensor maps (CUtensorMap, opaque here), encoded by the launcher when the layout
  // allows (kv_tma = 0: not encoded): decode, the paged K and V cache, one page of one kv head per
  // box (pipeline_decode.h); prefill, dense / varlen K and V tiles, or a paged cache's 16-key boxes,
  // in the wgmma operand swizzle (pipeline_wgmma.h).
  int32_t kv_tma = 0;
  // Hopper prefill: a counter for dynamic work-item scheduling (kernel_wgmma.h, ItemSource), zeroed
  // by the launcher; null: the static order.
  int32_t* item_counter = nullptr;
  // GPU kernels: the divisors of the per-work-item code (group = H / Hkv, Hkv, the m blocks and the
  // (batch, kv head) count of the grid, its x extent), filled by the launcher (fwd/kernel.h,
  // with_divisors: the m blocks depend on the kernel's block rows); the kernels read those sizes
  // back from them (FastDiv::d).
  FastDiv div_group, div_heads_k, div_m_blocks, div_bh, div_items, div_page;  // div_page: page_block_size (paged)
  alignas(64) unsigned char k_tmap[128] = {};
  alignas(64) unsigned char v_tmap[128] = {};
};

}  // namespace fp8attn
