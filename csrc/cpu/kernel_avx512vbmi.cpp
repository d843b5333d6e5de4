// The AVX-512 VBMI kernel: kernel_simd.h with every dot-product step as two fp32 FMAs, the odd element
// first (the scalar oracle's order). The decode kernel keeps its packed K^T and V as bf16 pairs
// (pack_vbmi.h's byte lookups) widened by a shift and a mask where a step loads them, q and P in fp32; the
// rows kernel runs on fp32 pairs as the AVX-512 kernel does. For CPUs where vdpbf16ps occupies both
// vector ports for two cycles and an FMA one port for one (Intel's): the same sums, about twice the rate.
#include "cpu/pack_vbmi.h"

namespace fp8attn::cpu {
namespace {

// bf16 pair vectors (the packed operand) against fp32 pairs (the broadcast operand: q, P).
struct Bf16Fma : Bf16Pack {
  using B = float;
  struct V2 {
    F even, odd;
  };
  using V2B = V2;
  static V2 load_pv(const E* p) {
    const __m512i x = _mm512_loadu_si512(p);
    return {_mm512_castsi512_ps(_mm512_slli_epi32(x, 16)),
            _mm512_castsi512_ps(_mm512_and_si512(x, _mm512_set1_epi32(static_cast<int>(0xffff0000u))))};
  }
  static V2B bcast_b(const B* p) { return {_mm512_set1_ps(p[0]), _mm512_set1_ps(p[1])}; }
  static void store_b(B* dst, F x) { _mm512_storeu_ps(dst, x); }
  static F dot2(F acc, const V2& a, const V2B& b) {
    return _mm512_fmadd_ps(a.even, b.even, _mm512_fmadd_ps(a.odd, b.odd, acc));
  }
};

using Kernel16 = SimdKernel<RowsKernel<Avx512Ops, Fp32Pairs<Avx512Ops>, 8, 8>, KeysKernel<Avx512Ops, Bf16Fma, 4, 4, 4>, 16>;

}  // namespace

Kernel avx512vbmi_kernel() { return Kernel16::kernel(); }

}  // namespace fp8attn::cpu
