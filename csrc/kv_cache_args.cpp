#include "kv_cache_args.h"

#include <cmath>

#include "fwd_args.h"

namespace fp8attn {

namespace {
void check_cache_scale(const std::optional<at::Tensor>& s, const at::Tensor& key, const char* name) {
  if (!s) return;
  TORCH_CHECK_TYPE(s->scalar_type() == at::kFloat, name, " must be float32, got ", s->scalar_type());
  TORCH_CHECK_VALUE(s->numel() == 1, name, " must have 1 element, got shape ", s->sizes());
  TORCH_CHECK_VALUE(s->device() == key.device(), name, " must be on key's device");
  if (s->device().is_cpu()) {
    const float x = s->data_ptr<float>()[0];
    TORCH_CHECK_VALUE(std::isfinite(x) && x > 0.f, name, " must be positive and finite, got ", x);
  }
}
}  // namespace

void check_write_kv_cache(const at::Tensor& key, const at::Tensor& value, const at::Tensor& key_cache,
                          const at::Tensor& value_cache, const at::Tensor& slot_mapping,
                          const std::optional<at::Tensor>& k_scale, const std::optional<at::Tensor>& v_scale) {
  TORCH_CHECK_VALUE(key.dim() == 3, "key must be [T, Hkv, D], got shape ", key.sizes());
  TORCH_CHECK_VALUE(value.sizes() == key.sizes(), "value must have key's shape ", key.sizes(), ", got ", value.sizes());
  TORCH_CHECK_TYPE(value.scalar_type() == key.scalar_type(), "value must have key's dtype");
  TORCH_CHECK_VALUE(key_cache.dim() == 4, "key_cache must be [num_blocks, block_size, Hkv, D], got shape ",
                    key_cache.sizes());
  TORCH_CHECK_VALUE(value_cache.sizes() == key_cache.sizes(), "value_cache must have key_cache's shape");
  TORCH_CHECK_TYPE(value_cache.scalar_type() == key_cache.scalar_type(), "value_cache must have key_cache's dtype");
  TORCH_CHECK_VALUE(key_cache.size(2) == key.size(1) && key_cache.size(3) == key.size(2), "key_cache heads/head dim ",
                    key_cache.sizes(), " do not match key ", key.sizes());
  const auto kt = key.scalar_type(), ct = key_cache.scalar_type();
  TORCH_CHECK_TYPE(kt == ct || (is_fp8(ct) && (kt == at::kBFloat16 || kt == at::kHalf)),
                   "key must have the cache's dtype, or be 16-bit for an FP8 cache; got key ", kt, ", cache ", ct);
  TORCH_CHECK_TYPE(slot_mapping.scalar_type() == at::kLong || slot_mapping.scalar_type() == at::kInt,
                   "slot_mapping must be int64 or int32, got ", slot_mapping.scalar_type());
  TORCH_CHECK_VALUE(slot_mapping.dim() == 1 && slot_mapping.size(0) >= key.size(0),
                    "slot_mapping must be 1-d with at least T = ", key.size(0), " elements, got shape ",
                    slot_mapping.sizes());
  for (const at::Tensor* t : {&value, &key_cache, &value_cache, &slot_mapping})
    TORCH_CHECK_VALUE(t->device() == key.device(), "all tensors must be on key's device (", key.device(), ")");
  TORCH_CHECK_VALUE(key.stride(-1) == 1 && value.stride(-1) == 1, "key/value must be contiguous in the head dim");
  TORCH_CHECK_VALUE(key_cache.stride(-1) == 1 && value_cache.stride(-1) == 1,
                    "key_cache/value_cache must be contiguous in the head dim");
  check_cache_scale(k_scale, key, "k_scale");
  check_cache_scale(v_scale, key, "v_scale");
  if (slot_mapping.device().is_cpu() && key.size(0) > 0) {
    const int64_t capacity = key_cache.size(0) * key_cache.size(1);
    const at::Tensor s = slot_mapping.slice(0, 0, key.size(0)).to(at::kLong);
    const int64_t mx = s.max().item<int64_t>();
    TORCH_CHECK_VALUE(mx < capacity, "slot_mapping entry ", mx, " is out of range for a cache of ", capacity, " slots");
  }
}

}  // namespace fp8attn
