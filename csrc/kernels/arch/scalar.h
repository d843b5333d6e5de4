// Scalar atoms that every implementation shares (host code, nvcc and hip clang alike): the one
// place their per-platform spellings are chosen.
//   max_nan(a, b)  the larger of a and b, NaN when either is NaN (the running max of the NaN rule:
//                  fmaxf / std::max drop a NaN). NVIDIA: max.NaN.f32 (one FMNMX.NAN, sm_80+).
#pragma once

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

}  // namespace fp8attn
