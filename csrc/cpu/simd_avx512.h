// AVX-512 (F, DQ, BW, VL) vectors of 16 floats as cpu_math.h / kernel_simd.h Ops; included only by
// the translation units compiled with those flags. Internal linkage, as cpu_math.h explains.
#pragma once
#include <immintrin.h>

#include <cstdint>
#include <cstring>

namespace fp8attn::cpu {
namespace {

struct Avx512Ops {
  static constexpr int W = 16;
  using F = __m512;
  using I = __m512i;
  using M = __mmask16;
  // A cache-line prefetch GCC cannot drop (it deletes loops of _mm_prefetch whose addresses need loads).
  static void prefetch(const void* p) { __asm__ volatile("prefetcht0 %0" : : "m"(*static_cast<const char*>(p))); }
  // n bytes (a multiple of 16), 64 at a time.
  static void copy_row(uint8_t* dst, const uint8_t* src, int n) {
    int i = 0;
    for (; i + 64 <= n; i += 64) _mm512_storeu_si512(dst + i, _mm512_loadu_si512(src + i));
    for (; i < n; i += 16)
      _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i), _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i)));
  }
  static F set1(float x) { return _mm512_set1_ps(x); }
  static I set1i(uint32_t x) { return _mm512_set1_epi32(static_cast<int>(x)); }
  static F zero() { return _mm512_setzero_ps(); }
  static F load(const float* p) { return _mm512_loadu_ps(p); }
  static void store(float* p, F x) { _mm512_storeu_ps(p, x); }
  static I loadi(const int32_t* p) { return _mm512_loadu_si512(p); }
  static I load_u8(const uint8_t* p) { return _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }
  static F add(F a, F b) { return _mm512_add_ps(a, b); }
  static F sub(F a, F b) { return _mm512_sub_ps(a, b); }
  static F mul(F a, F b) { return _mm512_mul_ps(a, b); }
  static F div(F a, F b) { return _mm512_div_ps(a, b); }
  static F fma(F a, F b, F c) { return _mm512_fmadd_ps(a, b, c); }
  static F max(F a, F b) { return _mm512_max_ps(a, b); }  // b when either is NaN
  static F min(F a, F b) { return _mm512_min_ps(a, b); }
  static F round_even(F x) { return _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
  static F scale2(F p, F n) { return _mm512_scalef_ps(p, n); }
  static F abs(F a) { return _mm512_abs_ps(a); }
  static F copysign(F mag, F sign) {
    return _mm512_castsi512_ps(_mm512_ternarylogic_epi32(_mm512_castps_si512(mag), _mm512_castps_si512(sign),
                                                         _mm512_set1_epi32(0x7fffffff), 0xe4));  // c ? a : b
  }
  static M lt(F a, F b) { return _mm512_cmp_ps_mask(a, b, _CMP_LT_OQ); }
  static M gt(F a, F b) { return _mm512_cmp_ps_mask(a, b, _CMP_GT_OQ); }
  static M eq(F a, F b) { return _mm512_cmp_ps_mask(a, b, _CMP_EQ_OQ); }
  static M isnan(F a) { return _mm512_cmp_ps_mask(a, a, _CMP_UNORD_Q); }
  static M mor(M a, M b) { return static_cast<M>(a | b); }
  static M mandn(M a, M b) { return static_cast<M>(~a & b); }
  static M mzero() { return 0; }
  static bool any(M a) { return a != 0; }
  static F select(M m, F a, F b) { return _mm512_mask_blend_ps(m, b, a); }
  static I bits(F x) { return _mm512_castps_si512(x); }
  static F from_bits(I u) { return _mm512_castsi512_ps(u); }
  static I addi(I a, I b) { return _mm512_add_epi32(a, b); }
  static I andi(I a, I b) { return _mm512_and_si512(a, b); }
  static I ori(I a, I b) { return _mm512_or_si512(a, b); }
  static I srli(I a, int n) { return _mm512_srli_epi32(a, static_cast<unsigned>(n)); }
  static I slli(I a, int n) { return _mm512_slli_epi32(a, static_cast<unsigned>(n)); }
  static I subi(I a, I b) { return _mm512_sub_epi32(a, b); }
  static I selecti(M m, I a, I b) { return _mm512_mask_blend_epi32(m, b, a); }
  static I cvtf2i(F a) { return _mm512_cvttps_epi32(a); }
  static F load_bf16(const uint16_t* p) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))), 16));
  }
  static F load_fp16(const uint16_t* p) { return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))); }
  static void store_u8(uint8_t* p, I x) { _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm512_cvtepi32_epi8(x)); }
  static void store_u16(uint16_t* p, I x) { _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), _mm512_cvtepi32_epi16(x)); }
  static M lti(I a, I b) { return _mm512_cmplt_epi32_mask(a, b); }
  static M eqi(I a, I b) { return _mm512_cmpeq_epi32_mask(a, b); }
  static F cvti(I a) { return _mm512_cvtepi32_ps(a); }
  // r[0..15] -> their transpose (r[c] holds lane c of every input), as 32-bit lanes.
  static void transpose(I r[16]) {
    I a[16], b[16];
    for (int i = 0; i < 16; i += 2) {
      a[i] = _mm512_unpacklo_epi32(r[i], r[i + 1]);
      a[i + 1] = _mm512_unpackhi_epi32(r[i], r[i + 1]);
    }
    for (int i = 0; i < 16; i += 4) {
      b[i] = _mm512_unpacklo_epi64(a[i], a[i + 2]);
      b[i + 1] = _mm512_unpackhi_epi64(a[i], a[i + 2]);
      b[i + 2] = _mm512_unpacklo_epi64(a[i + 1], a[i + 3]);
      b[i + 3] = _mm512_unpackhi_epi64(a[i + 1], a[i + 3]);
    }
    // b[4g + k]: in 128-bit lane L, element 4L + k of inputs 4g..4g+3.
    for (int k = 0; k < 4; ++k) {
      const I c0 = _mm512_shuffle_i32x4(b[k], b[4 + k], 0x88), c1 = _mm512_shuffle_i32x4(b[k], b[4 + k], 0xdd);
      const I c2 = _mm512_shuffle_i32x4(b[8 + k], b[12 + k], 0x88), c3 = _mm512_shuffle_i32x4(b[8 + k], b[12 + k], 0xdd);
      r[k] = _mm512_shuffle_i32x4(c0, c2, 0x88);
      r[8 + k] = _mm512_shuffle_i32x4(c0, c2, 0xdd);
      r[4 + k] = _mm512_shuffle_i32x4(c1, c3, 0x88);
      r[12 + k] = _mm512_shuffle_i32x4(c1, c3, 0xdd);
    }
  }
  static void transpose(F r[16]) {
    I x[16];
    for (int i = 0; i < 16; ++i) x[i] = _mm512_castps_si512(r[i]);
    transpose(x);
    for (int i = 0; i < 16; ++i) r[i] = _mm512_castsi512_ps(x[i]);
  }
  static float hmax(F a) { return _mm512_reduce_max_ps(a); }
  static float hsum_exact(F a) { return _mm512_reduce_add_ps(a); }  // only for sums that are exact in any order
};

}  // namespace
}  // namespace fp8attn::cpu
