// AVX2 + FMA vectors of 8 floats as cpu_math.h / kernel_simd.h Ops (masks are vectors of all-ones
// lanes); included only by the translation unit compiled with those flags. Internal linkage, as
// cpu_math.h explains.
#pragma once
#include <immintrin.h>

#include <cstdint>
#include <cstring>

namespace fp8attn::cpu {
namespace {

struct Avx2Ops {
  static constexpr int W = 8;
  using F = __m256;
  using I = __m256i;
  using M = __m256;
  // A cache-line prefetch GCC cannot drop (it deletes loops of _mm_prefetch whose addresses need loads).
  static void prefetch(const void* p) { __asm__ volatile("prefetcht0 %0" : : "m"(*static_cast<const char*>(p))); }
  // n bytes (a multiple of 16), 32 at a time.
  static void copy_row(uint8_t* dst, const uint8_t* src, int n) {
    int i = 0;
    for (; i + 32 <= n; i += 32)
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i)));
    for (; i < n; i += 16)
      _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i), _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i)));
  }
  static F set1(float x) { return _mm256_set1_ps(x); }
  static I set1i(uint32_t x) { return _mm256_set1_epi32(static_cast<int>(x)); }
  static F zero() { return _mm256_setzero_ps(); }
  static F load(const float* p) { return _mm256_loadu_ps(p); }
  static void store(float* p, F x) { _mm256_storeu_ps(p, x); }
  static I loadi(const int32_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }
  static I load_u8(const uint8_t* p) {
    int64_t x;
    std::memcpy(&x, p, 8);
    return _mm256_cvtepu8_epi32(_mm_cvtsi64_si128(x));
  }
  static F add(F a, F b) { return _mm256_add_ps(a, b); }
  static F sub(F a, F b) { return _mm256_sub_ps(a, b); }
  static F mul(F a, F b) { return _mm256_mul_ps(a, b); }
  static F div(F a, F b) { return _mm256_div_ps(a, b); }
  static F fma(F a, F b, F c) { return _mm256_fmadd_ps(a, b, c); }
  static F max(F a, F b) { return _mm256_max_ps(a, b); }  // b when either is NaN
  static F min(F a, F b) { return _mm256_min_ps(a, b); }
  static F round_even(F x) { return _mm256_round_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
  // p · 2^n rounded once, as two exact-or-final multiplies: n = n1 + n2 with both halves in [-75, 64].
  static F scale2(F p, F n) {
    const I ni = _mm256_cvtps_epi32(n);
    const I n1 = _mm256_srai_epi32(ni, 1), n2 = _mm256_sub_epi32(ni, n1);
    const I bias = _mm256_set1_epi32(127);
    const F s1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n1, bias), 23));
    const F s2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n2, bias), 23));
    return _mm256_mul_ps(_mm256_mul_ps(p, s1), s2);
  }
  static F abs(F a) { return _mm256_andnot_ps(_mm256_set1_ps(-0.f), a); }
  static F copysign(F mag, F sign) {
    const F s = _mm256_set1_ps(-0.f);
    return _mm256_or_ps(_mm256_andnot_ps(s, mag), _mm256_and_ps(s, sign));
  }
  static M lt(F a, F b) { return _mm256_cmp_ps(a, b, _CMP_LT_OQ); }
  static M gt(F a, F b) { return _mm256_cmp_ps(a, b, _CMP_GT_OQ); }
  static M eq(F a, F b) { return _mm256_cmp_ps(a, b, _CMP_EQ_OQ); }
  static M isnan(F a) { return _mm256_cmp_ps(a, a, _CMP_UNORD_Q); }
  static M mor(M a, M b) { return _mm256_or_ps(a, b); }
  static M mandn(M a, M b) { return _mm256_andnot_ps(a, b); }
  static M mzero() { return _mm256_setzero_ps(); }
  static bool any(M a) { return _mm256_movemask_ps(a) != 0; }
  static F select(M m, F a, F b) { return _mm256_blendv_ps(b, a, m); }
  static I bits(F x) { return _mm256_castps_si256(x); }
  static F from_bits(I u) { return _mm256_castsi256_ps(u); }
  static I addi(I a, I b) { return _mm256_add_epi32(a, b); }
  static I andi(I a, I b) { return _mm256_and_si256(a, b); }
  static I ori(I a, I b) { return _mm256_or_si256(a, b); }
  static I srli(I a, int n) { return _mm256_srli_epi32(a, n); }
  static I slli(I a, int n) { return _mm256_slli_epi32(a, n); }
  static I subi(I a, I b) { return _mm256_sub_epi32(a, b); }
  static I selecti(M m, I a, I b) { return _mm256_blendv_epi8(b, a, _mm256_castps_si256(m)); }
  static I cvtf2i(F a) { return _mm256_cvttps_epi32(a); }
  static F load_bf16(const uint16_t* p) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))), 16));
  }
  static F load_fp16(const uint16_t* p) { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }
  static __m128i pack_u16(I x) { return _mm_packus_epi32(_mm256_castsi256_si128(x), _mm256_extracti128_si256(x, 1)); }
  static void store_u8(uint8_t* p, I x) {
    const __m128i w = pack_u16(x);
    _mm_storel_epi64(reinterpret_cast<__m128i*>(p), _mm_packus_epi16(w, w));
  }
  static void store_u16(uint16_t* p, I x) { _mm_storeu_si128(reinterpret_cast<__m128i*>(p), pack_u16(x)); }
  static M lti(I a, I b) { return _mm256_castsi256_ps(_mm256_cmpgt_epi32(b, a)); }
  static M eqi(I a, I b) { return _mm256_castsi256_ps(_mm256_cmpeq_epi32(a, b)); }
  static F cvti(I a) { return _mm256_cvtepi32_ps(a); }
  // r[0..7] -> their transpose (r[c] holds lane c of every input).
  static void transpose(F r[8]) {
    F a[8], b[8];
    for (int i = 0; i < 8; i += 2) {
      a[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
      a[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
    }
    for (int i = 0; i < 8; i += 4) {
      b[i] = _mm256_shuffle_ps(a[i], a[i + 2], 0x44);
      b[i + 1] = _mm256_shuffle_ps(a[i], a[i + 2], 0xee);
      b[i + 2] = _mm256_shuffle_ps(a[i + 1], a[i + 3], 0x44);
      b[i + 3] = _mm256_shuffle_ps(a[i + 1], a[i + 3], 0xee);
    }
    // b[4g + k]: in 128-bit half L, element 4L + k of inputs 4g..4g+3.
    for (int k = 0; k < 4; ++k) {
      r[k] = _mm256_permute2f128_ps(b[k], b[4 + k], 0x20);
      r[4 + k] = _mm256_permute2f128_ps(b[k], b[4 + k], 0x31);
    }
  }
  static float hmax(F a) {
    __m128 x = _mm_max_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    x = _mm_max_ps(x, _mm_movehl_ps(x, x));
    return _mm_cvtss_f32(_mm_max_ss(x, _mm_movehdup_ps(x)));
  }
  static float hsum_exact(F a) {  // only for sums that are exact in any order
    __m128 x = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    x = _mm_add_ps(x, _mm_movehl_ps(x, x));
    return _mm_cvtss_f32(_mm_add_ss(x, _mm_movehdup_ps(x)));
  }
};

}  // namespace
}  // namespace fp8attn::cpu
