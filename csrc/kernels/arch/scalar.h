// Scalar atoms that every implementation shares (host code, nvcc and hip clang alike): the one
// place their per-platform spellings are chosen.
//   max_nan(a, b)  the larger of a and b, NaN when either is NaN (the running max of the NaN rule:
//                  fmaxf / std::max drop a NaN). NVIDIA: max.NaN.f32 (one FMNMX.NAN, sm_80+).
//   round_even(x), fast_tanh(x), Exp2Precise   rint / tanh / exp2 of the device's or the host's library
#pragma once
#include <cmath>

#include "../common.h"

namespace fp8attn {

FP8ATTN_HD float max_nan(float a, float b) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  float r;
  asm("max.NaN.f32 %0, %1, %2;\n" : "=f"(r) : "f"(a), "f"(b));
  return r;
#else
  return (b > a || b != b) ? b : a;  // a NaN a is kept: b > NaN is false
#endif
}

// Round-to-nearest-even of a non-negative float that fits an int (default FP rounding mode).
FP8ATTN_HD float round_even(float x) {
#if FP8ATTN_DEVICE_PASS
  return rintf(x);
#else
  return std::nearbyint(x);
#endif
}

FP8ATTN_HD float fast_tanh(float x) {
#if FP8ATTN_DEVICE_PASS
  return tanhf(x);
#else
  return std::tanh(x);
#endif
}

// exp2 as the CPU implementation and the portable pipeline compute it (the NVIDIA pipelines pass
// their MUFU form to the online softmax, nv::Exp2Approx).
struct Exp2Precise {
  FP8ATTN_HD float operator()(float x) const {
#if FP8ATTN_DEVICE_PASS
    return exp2f(x);
#else
    return std::exp2(x);
#endif
  }
};

}  // namespace fp8attn
