// The Epilogue of the forward pass: O = acc * (v_descale / l), the output cast (FP8 with
// 1/out_scale and saturation, or bf16/fp16), and lse = m*ln2 + ln(l * p_scale) (natural log).
// Rows with no visible key (m = -inf) give 0 and lse = -inf. With split-KV the same values are
// written, in fp32, to the split workspace and the combine kernel finishes them.
#pragma once
#include <cmath>
#include <cstdint>

#include "../numeric/half.h"
#include "../params.h"
#include "../variant.h"

namespace fp8attn {

template <Fp8Kind K>
struct OutputTransform {
  ElemType type;
  float inv_out_scale;

  FP8ATTN_HD static OutputTransform make(const FwdParams& p) { return make(p, p.out_scale ? *p.out_scale : 1.f); }
  // With *p.out_scale already loaded (1 when null).
  FP8ATTN_HD static OutputTransform make(const FwdParams& p, float out_scale) {
    OutputTransform o;
    o.type = p.out_type;
    o.inv_out_scale = 1.f / out_scale;
    return o;
  }
  FP8ATTN_HD void store(void* out, int64_t off, float x) const {
    switch (type) {
      case ElemType::BF16: store_as<ElemType::BF16>(out, off, x); break;
      case ElemType::FP16: store_as<ElemType::FP16>(out, off, x); break;
      default: store_as<ElemType::FP8>(out, off, x);
    }
  }
  // The same for a type known at compile time (loops over many elements branch once, outside).
  template <ElemType T>
  FP8ATTN_HD void store_as(void* out, int64_t off, float x) const {
    if constexpr (T == ElemType::BF16) {
      static_cast<uint16_t*>(out)[off] = bf16_encode(x);
    } else if constexpr (T == ElemType::FP16) {
      static_cast<uint16_t*>(out)[off] = fp16_encode(x);
    } else {
      static_cast<uint8_t*>(out)[off] = fp8_encode<K>(x * inv_out_scale);
    }
  }
};

// Element offset of query row `qrow`, head h of batch b in out (out has its own strides).
FP8ATTN_HD int64_t out_offset(const FwdParams& p, int32_t b, int32_t qrow, int32_t h) {
  const int64_t base = p.cu_seqlens_q ? static_cast<int64_t>(p.cu_seqlens_q[b]) * p.o_row_stride
                                      : static_cast<int64_t>(b) * p.o_batch_stride;
  return base + static_cast<int64_t>(qrow) * p.o_row_stride + static_cast<int64_t>(h) * p.o_head_stride;
}

// Flattened row (B*Sq dense, T varlen) used to index the split-KV workspace.
FP8ATTN_HD int64_t flat_row(const FwdParams& p, int32_t b, int32_t qrow) {
  return (p.cu_seqlens_q ? static_cast<int64_t>(p.cu_seqlens_q[b]) : static_cast<int64_t>(b) * p.seqlen_q) + qrow;
}
FP8ATTN_HD int64_t flat_rows(const FwdParams& p) {
  return p.cu_seqlens_q ? static_cast<int64_t>(p.total_q) : static_cast<int64_t>(p.batch) * p.seqlen_q;
}

}  // namespace fp8attn
