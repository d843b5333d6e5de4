// The AVX-512 BF16 kernel: kernel_simd.h with each dot-product step one vdpbf16ps on FP8 values
// widened to bf16 (exact: an e4m3 value has 3 mantissa bits, a product of two is exact in fp32, and
// vdpbf16ps is two fp32 FMAs, the odd element first, as the scalar oracle sums). FP8 -> bf16 by two
// 128-entry byte lookups (pack_vbmi.h).
#include <cstdint>
#include <cstring>

#include "cpu/pack_vbmi.h"

namespace fp8attn::cpu {
namespace {

// A dot step is one vdpbf16ps on bf16 pair vectors; both operands stay bf16 pairs.
struct Bf16Pairs : Bf16Pack {
  using B = E;
  using V2 = __m512bh;
  using V2B = __m512bh;
  static V2 load_pv(const E* p) { return (V2)_mm512_loadu_si512(p); }
  static V2 bcast_pair(const E* p) {
    int32_t u;
    std::memcpy(&u, p, 4);
    return (V2)_mm512_set1_epi32(u);
  }
  static V2 bcast_lane(const E* pv, int lane) { return bcast_pair(pv + 2 * lane); }
  static V2B bcast_b(const B* p) { return bcast_pair(p); }
  static void store_b(B* dst, F x) { store_e(dst, x); }
  static F dot2(F acc, V2 a, V2 b) { return _mm512_dpbf16_ps(acc, a, b); }
};

using Kernel16 = SimdKernel<RowsKernel<Avx512Ops, Bf16Pairs, 8, 8>, KeysKernel<Avx512Ops, Bf16Pairs, 4, 4, 4>, 16>;

}  // namespace

Kernel avx512bf16_kernel() { return Kernel16::kernel(); }

}  // namespace fp8attn::cpu
