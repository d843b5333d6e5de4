// The Problem of the forward pipeline (ck_tile style): only the compile-time facts of one
// instantiation. Everything else (q / out element types, softcap, GQA ratio, layout, split count)
// is a run-time property of FwdParams, handled in the prologue / epilogue / addressing where it
// costs nothing inside the KV loop.
#pragma once
#include <cstdint>

#include "../params.h"

namespace fp8attn {

// Compile-time mask kind: kNone never evaluates a mask (only the k_len edge of the last tile);
// kBand covers causal, sliding window (left, right) and their combination.
enum class MaskKind : int32_t { kNone = 0, kBand = 1 };

template <int kHeadDim_, Fp8Kind kFp8_, MaskKind kMask_>
struct FwdProblem {
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr Fp8Kind kFp8 = kFp8_;
  static constexpr MaskKind kMask = kMask_;
  static constexpr bool kHasMask = kMask_ != MaskKind::kNone;
  static_assert(kHeadDim % 16 == 0 && kHeadDim >= 32 && kHeadDim <= 256, "head dim: multiple of 16 in [32, 256]");
};

}  // namespace fp8attn
