// The FP8 attention variant as small functors (FlashInfer style), shared by every implementation
// so that CPU and GPU apply exactly the same arithmetic at each quantization point.
#pragma once
#include <cmath>

#include "arch/scalar.h"
#include "common.h"
#include "numeric/fp8.h"

namespace fp8attn {

constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

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

// P quantization, the one spelling every implementation uses: p in [0, 1] -> the FP8 code of
// sat(p / p_scale) (NaN stays NaN) and the value P.V multiplies. Cvt: the conversion instructions
// (the arch atoms' Fp8Cvt on a GPU, the software encoder here), bit-identical to fp8_encode.
template <Fp8Kind K, class Cvt = Fp8SoftCvt<K>>
struct PQuantize {
  float inv_p_scale;
  // For a call's p_scale: p is multiplied by its float32 reciprocal (as fp8attn.quant.quantize does).
  FP8ATTN_HD static PQuantize of_scale(float p_scale) { return {1.f / p_scale}; }
  // The value of one p's code (the CPU implementation).
  FP8ATTN_HD float operator()(float p) const { return fp8_decode<K>(fp8_encode<K>(p * inv_p_scale)); }
  // Four p -> their codes packed little-endian (byte i = p[i]); v[i] = the codes' values.
  FP8ATTN_HD uint32_t quantize4(const float p[4], float v[4]) const {
    const float x[4] = {p[0] * inv_p_scale, p[1] * inv_p_scale, p[2] * inv_p_scale, p[3] * inv_p_scale};
    return Cvt::encode4(x, v);
  }
  // The same for x = p / p_scale already (a pipeline that folds 1 / p_scale into the exponent:
  // exp2(y + log2(1 / p_scale)) = exp2(y) / p_scale).
  FP8ATTN_HD uint32_t quantize4_scaled(const float x[4]) const { return Cvt::encode4(x); }
  // Two p -> the f16x2 of their codes' values (lo = p0): the A / B operand of an f16 P.V.
  FP8ATTN_HD uint32_t quantize2_f16(float p0, float p1) const {
    return Cvt::encode2_f16(p0 * inv_p_scale, p1 * inv_p_scale);
  }
};

}  // namespace fp8attn
