// Division by a run-time divisor fixed for a launch, as a multiply-high and a shift (Granlund and
// Montgomery's round-up method): an integer division by a register compiles to ~25 instructions,
// and the per-work-item code of the kernels divides by the GQA group, the kv heads and the item
// counts once per item and warp. Exact for dividends in [0, 2^31).
#pragma once
#include <cstdint>

namespace fp8attn {

struct FastDiv {
  uint32_t mul = 1, shift = 0;  // the default divides by 1

  // Host: shift = ceil(log2 d), mul = floor(2^32 (2^shift - d) / d) + 1 (< 2^32); d >= 1.
  static FastDiv of(uint32_t d) {
    FastDiv f;
    f.shift = 0;
    while ((uint64_t{1} << f.shift) < d) ++f.shift;
    f.mul = static_cast<uint32_t>(((uint64_t{1} << 32) * ((uint64_t{1} << f.shift) - d)) / d + 1);
    return f;
  }
#if defined(__CUDACC__) || defined(__HIPCC__)
  // n / d for 0 <= n < 2^31 (umulhi(n, mul) <= n, so the sum does not overflow).
  __device__ __forceinline__ int32_t div(int32_t n) const {
    return static_cast<int32_t>((__umulhi(static_cast<uint32_t>(n), mul) + static_cast<uint32_t>(n)) >> shift);
  }
#endif
};

}  // namespace fp8attn
