// Argument checks for fp8attn::write_kv_cache, shared by the CPU and GPU entry points.
#pragma once
#include <optional>

#include <ATen/ATen.h>

namespace fp8attn {

// Validates key/value [T, Hkv, D], caches [num_blocks, block_size, Hkv, D] and slot_mapping [T]
// (values too when slot_mapping is on the host). Throws naming the argument.
void check_write_kv_cache(const at::Tensor& key, const at::Tensor& value, const at::Tensor& key_cache,
                          const at::Tensor& value_cache, const at::Tensor& slot_mapping,
                          const std::optional<at::Tensor>& k_scale, const std::optional<at::Tensor>& v_scale);

}  // namespace fp8attn
