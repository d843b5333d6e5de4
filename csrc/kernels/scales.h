// The scales of a call, read from FwdParams the one way every implementation reads them (docs/design.md
// §1, "Scales"): a null descale is 1, a null p_scale the FP8 kind's default (shapes.h), and out_scale
// (null: 16-bit output, else FP8 output) is applied as its float32 reciprocal, as p_scale (PQuantize) and a
// 16-bit q's descale are.
#pragma once
#include <cstdint>

#include "common.h"
#include "params.h"
#include "shapes.h"

namespace fp8attn {

// The P scale of a call of FP8 kind K without p_scale (a scalar constant, so device code may read it).
template <Fp8Kind K>
constexpr float kDefaultPScaleOf = kDefaultPScale[static_cast<int32_t>(K)];

// Head `head`'s entry of a descale (head_stride 0: per tensor); null: 1.
FP8ATTN_HD float descale_at(const float* s, int32_t head_stride, int32_t head) {
  return s ? s[head * head_stride] : 1.f;
}
FP8ATTN_HD float q_descale_of(const FwdParams& p, int32_t head) {
  return descale_at(p.q_descale, p.q_descale_head_stride, head);
}
FP8ATTN_HD float k_descale_of(const FwdParams& p, int32_t kv_head) {
  return descale_at(p.k_descale, p.k_descale_head_stride, kv_head);
}
FP8ATTN_HD float v_descale_of(const FwdParams& p, int32_t kv_head) {
  return descale_at(p.v_descale, p.v_descale_head_stride, kv_head);
}

// What a 16-bit q row of head `head` is multiplied by before its FP8 conversion (Q1).
FP8ATTN_HD float inv_q_descale_of(const FwdParams& p, int32_t head) { return 1.f / q_descale_of(p, head); }

template <Fp8Kind K>
FP8ATTN_HD float p_scale_of(const FwdParams& p) {
  return p.p_scale_ptr ? *p.p_scale_ptr : kDefaultPScaleOf<K>;
}

// What a value is multiplied by to be divided by a scale (quantized: sat(x / scale)); null: 1.
FP8ATTN_HD float inv_scale_of(const float* scale) { return scale ? 1.f / *scale : 1.f; }

// What O is multiplied by before its FP8 conversion (1 for a 16-bit output, which ignores it).
FP8ATTN_HD float inv_out_scale_of(const FwdParams& p) { return inv_scale_of(p.out_scale); }

}  // namespace fp8attn
