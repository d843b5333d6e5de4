// The FP8 attention variant as small functors (FlashInfer style), shared by every implementation
// so that CPU and GPU apply exactly the same arithmetic at each quantization point.
#pragma once
#include <cmath>

#include "common.h"
#include "numeric/fp8.h"

namespace fp8attn {

constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

FP8ATTN_HD float fast_tanh(float x) {
#if FP8ATTN_DEVICE_PASS
  return tanhf(x);
#else
  return std::tanh(x);
#endif
}

// Raw q8·k8 dot product (fp32) -> logit in log2 units: S·log2(e), with the optional softcap.
struct LogitsTransform {
  float scale;         // softmax_scale * q_descale * k_descale          (no softcap)
  float scale_log2;    // scale * log2(e)                                  (no softcap)
  float inv_softcap;   // scale / softcap                                  (softcap)
  float softcap_log2;  // softcap * log2(e)                                (softcap)
  bool has_softcap;

  FP8ATTN_HD static LogitsTransform make(float softmax_scale, float qk_descale, float softcap) {
    LogitsTransform t;
    t.scale = softmax_scale * qk_descale;
    t.scale_log2 = t.scale * kLog2e;
    t.has_softcap = softcap > 0.f;
    t.inv_softcap = t.has_softcap ? t.scale / softcap : 0.f;
    t.softcap_log2 = softcap * kLog2e;
    return t;
  }

  FP8ATTN_HD float operator()(float dot) const {
    return has_softcap ? softcap_log2 * fast_tanh(dot * inv_softcap) : dot * scale_log2;
  }
};

// p in [0, 1] -> its FP8 code as a float value: sat(p / p_scale), the value P·V multiplies.
template <Fp8Kind K>
struct PQuantize {
  float inv_p_scale;
  FP8ATTN_HD float operator()(float p) const { return fp8_decode<K>(fp8_encode<K>(p * inv_p_scale)); }
};

}  // namespace fp8attn
