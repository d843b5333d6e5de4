// Division by a run-time divisor fixed for a launch, as a multiply-high and a shift (Granlund and
// Montgomery's round-up method): an integer division by a register compiles to ~25 instructions,
// and the per-work-item code of the kernels divides by the GQA group, the kv heads and the item
// counts once per item and warp. Exact for dividends in [0, 2^31).
#pragma once
#include <cstdint>

#include "common.h"

namespace fp8attn {

struct FastDiv {
  uint32_t mul = 1, shift = 0;  // the default divides by 1
  // The divisor itself: the launch's grid sizes (kernel.h, WorkGrid) are read back from their
  // divisors, so the host's computation is the only one.
  uint32_t d = 1;

  // Host: shift = ceil(log2 d), mul = floor(2^32 (2^shift - d) / d) + 1 (< 2^32); d >= 1.
  static FastDiv of(uint32_t d) {
    FastDiv f;
    f.d = d;
    f.shift = 0;
    while ((uint64_t{1} << f.shift) < d) ++f.shift;
    f.mul = static_cast<uint32_t>(((uint64_t{1} << 32) * ((uint64_t{1} << f.shift) - d)) / d + 1);
    return f;
  }
  // n / d for 0 <= n < 2^31 (umulhi(n, mul) <= n, so the sum does not overflow).
  FP8ATTN_HD int32_t div(int32_t n) const {
    const uint32_t u = static_cast<uint32_t>(n);
#if FP8ATTN_DEVICE_PASS
    const uint32_t hi = __umulhi(u, mul);
#else
    const uint32_t hi = static_cast<uint32_t>((static_cast<uint64_t>(u) * mul) >> 32);
#endif
    return static_cast<int32_t>((hi + u) >> shift);
  }
};

}  // namespace fp8attn
