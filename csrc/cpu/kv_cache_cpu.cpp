// CPU write of new K/V rows into a paged cache at their slots (quantizing 16-bit into FP8).
#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include "cpu/isa.h"
#include "kernels/scales.h"
#include "kv_cache_args.h"
#include "ops.h"

namespace fp8attn {
namespace {

// Each row of each token at its slot, quantized by the selected instruction set's encoder (the scalar
// fp8_encode's bits on every one).
void quantize_rows(const at::Tensor& src, const at::Tensor& cache, const int64_t* slots, float inv_scale,
                   Fp8Kind kind) {
  const int64_t T = src.size(0), H = src.size(1), D = src.size(2), bs = cache.size(1);
  const bool bf16 = src.scalar_type() == at::kBFloat16;
  const auto* in = static_cast<const uint16_t*>(src.data_ptr());
  auto* out = static_cast<uint8_t*>(cache.data_ptr());
  const auto encode = cpu::kernel_of(cpu::selected_isa()).encode;
  at::parallel_for(0, T, 16, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      if (slots[t] < 0) continue;
      uint8_t* dst_row = out + (slots[t] / bs) * cache.stride(0) + (slots[t] % bs) * cache.stride(1);
      for (int64_t h = 0; h < H; ++h)
        encode(in + t * src.stride(0) + h * src.stride(1), bf16, inv_scale, kind, dst_row + h * cache.stride(2),
               static_cast<int32_t>(D));
    }
  });
}

void write_one(const at::Tensor& src, const at::Tensor& cache, const at::Tensor& slots,
               const std::optional<at::Tensor>& scale) {
  const int64_t* sp = slots.data_ptr<int64_t>();
  if (src.scalar_type() == cache.scalar_type()) {
    // Same dtype: a copy of each row (per-head rows may be strided in both).
    const int64_t bs = cache.size(1);
    for (int64_t t = 0; t < src.size(0); ++t) {
      if (sp[t] < 0) continue;
      cache[sp[t] / bs][sp[t] % bs].copy_(src[t]);
    }
    return;
  }
  const float inv = inv_scale_of(scale ? scale->data_ptr<float>() : nullptr);
  quantize_rows(src, cache, sp, inv, fp8_kind_of(cache.scalar_type(), "key_cache"));
}

}  // namespace

void write_kv_cache_cpu(const at::Tensor& key, const at::Tensor& value, at::Tensor& key_cache, at::Tensor& value_cache,
                        const at::Tensor& slot_mapping, const std::optional<at::Tensor>& k_scale,
                        const std::optional<at::Tensor>& v_scale) {
  check_write_kv_cache(key, value, key_cache, value_cache, slot_mapping, k_scale, v_scale);
  const bool as_is = slot_mapping.scalar_type() == at::kLong && slot_mapping.stride(0) == 1;
  const at::Tensor slots = as_is ? slot_mapping : slot_mapping.slice(0, 0, key.size(0)).to(at::kLong).contiguous();
  write_one(key, key_cache, slots, k_scale);
  write_one(value, value_cache, slots, v_scale);
}

}  // namespace fp8attn
