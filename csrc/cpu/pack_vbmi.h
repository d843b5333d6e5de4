// FP8 codes -> bf16 pairs by VBMI byte lookups (vpermi2b), for the AVX-512 kernels that store their packed
// operands as bf16 (kernel_avx512bf16.cpp, kernel_avx512vbmi.cpp). Included only by translation units
// compiled with AVX-512 F/DQ/BW/VL and VBMI; internal linkage, as cpu_math.h explains.
#pragma once
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "cpu/simd_avx512.h"
#include "cpu/kernel_simd.h"

namespace fp8attn::cpu {
namespace {

// The bf16 bits of the value of each FP8 magnitude code (0..127), as low and high bytes.
template <Fp8Kind K>
struct Bf16Lut {
  alignas(64) uint8_t lo[128];
  alignas(64) uint8_t hi[128];
  constexpr Bf16Lut() : lo{}, hi{} {
    const int bias = Fp8Traits<K>::kBias;
    for (int c = 0; c < 128; ++c) {
      const int e = c >> 3, m = c & 7;
      int b = 0;
      if (K == Fp8Kind::E4M3FN && c == 0x7f) {
        b = 0x7fc0;  // NaN
      } else if (e > 0) {
        b = ((e + 127 - bias) << 7) | (m << 4);
      } else if (m > 0) {  // subnormal m·2^(-2-bias), normalized
        const int top = m >= 4 ? 2 : (m >= 2 ? 1 : 0);
        b = ((top - 2 - bias + 127) << 7) | ((m - (1 << top)) << (7 - top));
      }
      lo[c] = static_cast<uint8_t>(b & 0xff);
      hi[c] = static_cast<uint8_t>(b >> 8);
    }
  }
};
template <Fp8Kind K>
constexpr Bf16Lut<K> kLut{};

// vpermt2b indices that pair byte src(w) of the low-byte vector with the same byte of the high-byte one,
// for words w = 0..31.
struct WordIndex {
  alignas(64) uint8_t idx[64];
  template <class Src>
  constexpr explicit WordIndex(Src src) : idx{} {
    for (int w = 0; w < 32; ++w) {
      idx[2 * w] = static_cast<uint8_t>(src(w));
      idx[2 * w + 1] = static_cast<uint8_t>(64 + src(w));
    }
  }
};
constexpr WordIndex kWords0{[](int w) { return w; }};       // bytes 0-31 in order
constexpr WordIndex kWords1{[](int w) { return 32 + w; }};  // bytes 32-63
// Bytes of 16 dwords (key i's d 4c..4c+3 at 4i..4i+3) -> the pair vectors of d pairs 2c and 2c+1.
constexpr WordIndex kPairsEven{[](int w) { return 4 * (w / 2) + w % 2; }};
constexpr WordIndex kPairsOdd{[](int w) { return 4 * (w / 2) + 2 + w % 2; }};

// The low and high bytes of the bf16 value of each of 64 FP8 codes.
template <Fp8Kind K>
void lut_bytes(__m512i x, __m512i* lo, __m512i* hi) {
  const Bf16Lut<K>& t = kLut<K>;
  const __m512i mag = _mm512_and_si512(x, _mm512_set1_epi8(0x7f));
  *lo = _mm512_permutex2var_epi8(_mm512_load_si512(t.lo), mag, _mm512_load_si512(t.lo + 64));
  *hi = _mm512_permutex2var_epi8(_mm512_load_si512(t.hi), mag, _mm512_load_si512(t.hi + 64));
  *hi = _mm512_ternarylogic_epi32(*hi, x, _mm512_set1_epi8(static_cast<char>(0x80)), 0xf8);  // hi | (x & 0x80)
  if (K == Fp8Kind::E4M3FNUZ) {  // 0x80 is NaN
    const __mmask64 nan = _mm512_cmpeq_epi8_mask(x, _mm512_set1_epi8(static_cast<char>(0x80)));
    *hi = _mm512_mask_mov_epi8(*hi, nan, _mm512_set1_epi8(0x7f));
    *lo = _mm512_mask_mov_epi8(*lo, nan, _mm512_set1_epi8(static_cast<char>(0xc0)));
  }
}

__m512i words(__m512i lo, __m512i hi, const WordIndex& w) { return _mm512_permutex2var_epi8(lo, _mm512_load_si512(w.idx), hi); }

// 64 FP8 codes -> their 64 bf16 values in order (words 0-31 in w0, 32-63 in w1).
template <Fp8Kind K>
void to_bf16(__m512i x, __m512i* w0, __m512i* w1) {
  __m512i lo, hi;
  lut_bytes<K>(x, &lo, &hi);
  *w0 = words(lo, hi, kWords0);
  *w1 = words(lo, hi, kWords1);
}

__mmask64 bytes_mask(int n) { return n >= 64 ? ~__mmask64{0} : (__mmask64{1} << n) - 1; }
__mmask32 words_mask(int n) { return n >= 32 ? ~__mmask32{0} : (__mmask32{1} << n) - 1; }

// Pairs stored as the two bf16 halves of a dword (a pair vector is [W][2]; FP8 values are exact in bf16),
// packed from FP8 codes by byte lookups: what the AVX-512 BF16 and VBMI kernels share. Each of them adds
// its dot-product step (dot2) and operand loads.
struct Bf16Pack {
  static constexpr bool kTiles = false;
  using E = uint16_t;
  using F = __m512;
  static constexpr int W = 16;
  static int vidx(int lane, int t) { return 2 * lane + t; }
  static E to_e(float x) {  // exact for FP8 values
    uint32_t u;
    std::memcpy(&u, &x, 4);
    return static_cast<E>(u >> 16);
  }
  static void store_pv(E* dst, F even, F odd) {  // (even >> 16) | (odd & 0xffff0000): exact for FP8 values
    _mm512_storeu_si512(dst, _mm512_ternarylogic_epi32(_mm512_srli_epi32(_mm512_castps_si512(even), 16),
                                                       _mm512_castps_si512(odd), _mm512_set1_epi32(0xffff0000u), 0xf8));
  }
  static void store_e(E* dst, F x) {  // 16 values of FP8 precision
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst), _mm512_cvtepi32_epi16(_mm512_srli_epi32(_mm512_castps_si512(x), 16)));
  }
  template <Fp8Kind K>
  static void convert_row(const uint8_t* src, E* dst, int n) {
    for (int i = 0; i < n; i += 64) {
      const int rem = n - i;
      __m512i w0, w1;
      to_bf16<K>(_mm512_maskz_loadu_epi8(bytes_mask(rem), src + i), &w0, &w1);
      _mm512_mask_storeu_epi16(dst + i, words_mask(rem), w0);
      if (rem > 32) _mm512_mask_storeu_epi16(dst + i + 32, words_mask(rem - 32), w1);
    }
  }
  // 16 keys' rows (null: a zero row) -> the D/2 pair vectors over keys, pair p at dst + p * stride.
  template <Fp8Kind K>
  static void pack_kt(const uint8_t* const rows[16], E* dst, int D, size_t stride) {
    for (int d0 = 0; d0 < D; d0 += 64) {
      const __mmask64 mk = bytes_mask(D - d0);
      __m512i r[16];
      for (int i = 0; i < 16; ++i) r[i] = rows[i] ? _mm512_maskz_loadu_epi8(mk, rows[i] + d0) : _mm512_setzero_si512();
      Avx512Ops::transpose(r);
      for (int c = 0; c < 16 && d0 + 4 * c < D; ++c) {  // d 4c..4c+3 of the slab: pairs d0/2 + 2c, +1
        __m512i lo, hi;
        lut_bytes<K>(r[c], &lo, &hi);
        E* p = dst + static_cast<size_t>(d0 / 2 + 2 * c) * stride;
        _mm512_storeu_si512(p, words(lo, hi, kPairsEven));
        _mm512_storeu_si512(p + stride, words(lo, hi, kPairsOdd));
      }
    }
  }
  // Keys r0, r1 (either may be null: a zero row) -> [d][2] words.
  template <Fp8Kind K>
  static void pack_v_pair(const uint8_t* r0, const uint8_t* r1, E* dst, int D) {
    alignas(64) static constexpr uint8_t kPairs[64] = {
        0,  32, 1,  33, 2,  34, 3,  35, 4,  36, 5,  37, 6,  38, 7,  39, 8,  40, 9,  41, 10, 42,
        11, 43, 12, 44, 13, 45, 14, 46, 15, 47, 16, 48, 17, 49, 18, 50, 19, 51, 20, 52, 21, 53,
        22, 54, 23, 55, 24, 56, 25, 57, 26, 58, 27, 59, 28, 60, 29, 61, 30, 62, 31, 63};
    const __m512i pairs = _mm512_load_si512(kPairs);
    for (int d = 0; d < D; d += 32) {
      const __mmask32 mk = static_cast<__mmask32>(bytes_mask(D - d));
      const __m256i a = r0 ? _mm256_maskz_loadu_epi8(mk, r0 + d) : _mm256_setzero_si256();
      const __m256i b = r1 ? _mm256_maskz_loadu_epi8(mk, r1 + d) : _mm256_setzero_si256();
      const __m512i x = _mm512_permutexvar_epi8(pairs, _mm512_inserti64x4(_mm512_castsi256_si512(a), b, 1));
      __m512i w0, w1;
      to_bf16<K>(x, &w0, &w1);
      _mm512_storeu_si512(dst + 2 * d, w0);
      if (D - d > 16) _mm512_storeu_si512(dst + 2 * d + 32, w1);
    }
  }
};

}  // namespace
}  // namespace fp8attn::cpu
