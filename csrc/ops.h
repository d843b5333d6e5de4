// The op signatures (in schema order, see torch_bindings.cpp) and the per-device entry points.
#pragma once
#include <optional>
#include <string>

#include <ATen/ATen.h>

#include "fwd_args.h"

namespace fp8attn {

// The schema arguments of fp8attn::forward, in order.
#define FP8ATTN_FORWARD_PARAMS                                                                         \
  const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, at::Tensor& out,                     \
      const std::optional<at::Tensor>& cu_seqlens_q, const std::optional<at::Tensor>& cu_seqlens_k,   \
      const std::optional<at::Tensor>& seqused_k, int64_t max_seqlen_q, int64_t max_seqlen_k,         \
      const std::optional<at::Tensor>& block_table, double softmax_scale, bool causal,                \
      int64_t window_left, int64_t window_right, double softcap,                                       \
      const std::optional<at::Tensor>& q_descale, const std::optional<at::Tensor>& k_descale,         \
      const std::optional<at::Tensor>& v_descale, const std::optional<at::Tensor>& p_scale,           \
      const std::optional<at::Tensor>& out_scale, bool return_softmax_lse, int64_t kv_tile

#define FP8ATTN_FORWARD_SIGNATURE(NAME) at::Tensor NAME(FP8ATTN_FORWARD_PARAMS)

// Packs the schema arguments (shared by every device's entry point).
FwdArgs pack_forward_args(FP8ATTN_FORWARD_PARAMS);

#define FP8ATTN_FORWARD_ARGS                                                                                      \
  q, k, v, out, cu_seqlens_q, cu_seqlens_k, seqused_k, max_seqlen_q, max_seqlen_k, block_table, softmax_scale, \
      causal, window_left, window_right, softcap, q_descale, k_descale, v_descale, p_scale, out_scale,          \
      return_softmax_lse, kv_tile

FP8ATTN_FORWARD_SIGNATURE(forward_cpu);
std::string forward_kernel_cpu(FP8ATTN_FORWARD_PARAMS);

void write_kv_cache_cpu(const at::Tensor& key, const at::Tensor& value, at::Tensor& key_cache, at::Tensor& value_cache,
                        const at::Tensor& slot_mapping, const std::optional<at::Tensor>& k_scale,
                        const std::optional<at::Tensor>& v_scale);

}  // namespace fp8attn
