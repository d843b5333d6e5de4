#include "kv_cache_args.h"

#include <algorithm>
#include <vector>

#include "arg_checks.h"
#include "overlap.h"

namespace fp8attn {

namespace {
void check_cache_scale(const std::optional<at::Tensor>& s, const char* name) {
  if (!s) return;
  TORCH_CHECK_TYPE(s->scalar_type() == at::kFloat, name, " must be float32, got ", s->scalar_type());
  TORCH_CHECK_VALUE(s->numel() == 1, name, " must have 1 element, got shape ", s->sizes());
  if (s->device().is_cpu()) {  // a 16-bit row is quantized as x * (1 / scale)
    const float x = s->data_ptr<float>()[0];
    check_scale_value(x, name);
    check_scale_reciprocal(x, name);
  }
}
}  // namespace

void check_write_kv_cache(const at::Tensor& key, const at::Tensor& value, const at::Tensor& key_cache,
                          const at::Tensor& value_cache, const at::Tensor& slot_mapping,
                          const std::optional<at::Tensor>& k_scale, const std::optional<at::Tensor>& v_scale) {
  std::vector<NamedTensor> tensors = {{"key", &key},
                                {"value", &value},
                                {"key_cache", &key_cache},
                                {"value_cache", &value_cache},
                                {"slot_mapping", &slot_mapping}};
  if (k_scale) tensors.emplace_back("k_scale", &*k_scale);
  if (v_scale) tensors.emplace_back("v_scale", &*v_scale);
  check_one_device(tensors);
  TORCH_CHECK_VALUE(key.dim() == 3, "key must be [T, Hkv, D], got shape ", key.sizes());
  TORCH_CHECK_VALUE(value.sizes() == key.sizes(), "value must have key's shape ", key.sizes(), ", got ", value.sizes());
  TORCH_CHECK_TYPE(value.scalar_type() == key.scalar_type(), "value must have key's dtype (", key.scalar_type(),
                   "), got ", value.scalar_type());
  TORCH_CHECK_VALUE(key_cache.dim() == 4, "key_cache must be [num_blocks, block_size, Hkv, D], got shape ",
                    key_cache.sizes());
  TORCH_CHECK_VALUE(value_cache.sizes() == key_cache.sizes(), "value_cache must have key_cache's shape ",
                    key_cache.sizes(), ", got ", value_cache.sizes());
  TORCH_CHECK_TYPE(value_cache.scalar_type() == key_cache.scalar_type(), "value_cache must have key_cache's dtype (",
                   key_cache.scalar_type(), "), got ", value_cache.scalar_type());
  TORCH_CHECK_VALUE(key_cache.size(2) == key.size(1) && key_cache.size(3) == key.size(2), "key_cache heads/head dim ",
                    key_cache.sizes(), " do not match key ", key.sizes());
  TORCH_CHECK_VALUE(key_cache.size(1) > 0, "key_cache block_size (key_cache.shape[1]) must be positive");
  const auto kt = key.scalar_type(), ct = key_cache.scalar_type();
  TORCH_CHECK_TYPE(kt == ct || (is_fp8(ct) && (kt == at::kBFloat16 || kt == at::kHalf)),
                   "key must have the cache's dtype, or be 16-bit for an FP8 cache; got key ", kt, ", cache ", ct);
  TORCH_CHECK_TYPE(slot_mapping.scalar_type() == at::kLong || slot_mapping.scalar_type() == at::kInt,
                   "slot_mapping must be int64 or int32, got ", slot_mapping.scalar_type());
  TORCH_CHECK_VALUE(slot_mapping.dim() == 1 && slot_mapping.size(0) >= key.size(0),
                    "slot_mapping must be 1-d with at least T = ", key.size(0), " elements, got shape ",
                    slot_mapping.sizes());
  TORCH_CHECK_VALUE(key.stride(-1) == 1 && value.stride(-1) == 1, "key/value must be contiguous in the head dim");
  TORCH_CHECK_VALUE(key_cache.stride(-1) == 1 && value_cache.stride(-1) == 1,
                    "key_cache/value_cache must be contiguous in the head dim");
  // The caches are written: neither may overlap itself, the other, or an input.
  check_no_overlap(key_cache, "key_cache", tensors);
  check_no_overlap(value_cache, "value_cache", tensors);
  check_cache_scale(k_scale, "k_scale");
  check_cache_scale(v_scale, "v_scale");
  // Negative slots (vLLM's padding, -1) are skipped; the others must lie in the cache.
  if (slot_mapping.device().is_cpu() && key.size(0) > 0) {
    const int64_t capacity = key_cache.size(0) * key_cache.size(1), stride = slot_mapping.stride(0);
    int64_t mx = -1;
    if (slot_mapping.scalar_type() == at::kLong) {
      const int64_t* p = slot_mapping.data_ptr<int64_t>();
      for (int64_t t = 0; t < key.size(0); ++t) mx = std::max(mx, p[t * stride]);
    } else {
      const int32_t* p = slot_mapping.data_ptr<int32_t>();
      for (int64_t t = 0; t < key.size(0); ++t) mx = std::max<int64_t>(mx, p[t * stride]);
    }
    TORCH_CHECK_VALUE(mx < capacity, "slot_mapping entry ", mx, " is out of range for a cache of ", capacity, " slots");
  }
}

}  // namespace fp8attn
