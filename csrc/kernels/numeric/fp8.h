// FP8 e4m3 numerics for both flavours, bit-exact on host and device:
//   e4m3fn   (OCP):   bias 7, max 448, NaN = 0x7f/0xff, has -0.
//   e4m3fnuz (MI300): bias 8, max 240, NaN = 0x80, no -0.
// Encoding saturates (sat(x) = cast(clamp(x, -max, max)), round to nearest even) and keeps NaN.
// The arch atoms may replace encode/decode with hardware instructions that give the same bits.
#pragma once
#include <cstdint>
#include <cstring>
#include <cmath>

#include "../arch/scalar.h"
#include "../common.h"
#include "fp8_kind.h"

namespace fp8attn {

template <Fp8Kind K>
struct Fp8Traits;

template <>
struct Fp8Traits<Fp8Kind::E4M3FN> {
  static constexpr int kBias = 7;
  static constexpr float kMax = 448.f;
  static constexpr uint8_t kNaN = 0x7f;
  static constexpr bool kHasNegZero = true;
  // Default P dequant scale: a power of two, so p / p_scale is exact and p = 1 maps to 256 < max.
  static constexpr float kDefaultPScale = 1.f / 256.f;
};

template <>
struct Fp8Traits<Fp8Kind::E4M3FNUZ> {
  static constexpr int kBias = 8;
  static constexpr float kMax = 240.f;
  static constexpr uint8_t kNaN = 0x80;
  static constexpr bool kHasNegZero = false;
  // Half of fn's: the same bit patterns as fn with its default (fnuz is worth half per code).
  static constexpr float kDefaultPScale = 1.f / 128.f;
};

FP8ATTN_HD uint32_t f32_bits(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  return u;
}
FP8ATTN_HD float bits_f32(uint32_t u) {
  float x;
  std::memcpy(&x, &u, 4);
  return x;
}


// Saturating, round-to-nearest-even float -> e4m3 encode (software; the reference for hardware).
template <Fp8Kind K>
FP8ATTN_HD uint8_t fp8_encode(float x) {
  using T = Fp8Traits<K>;
  const uint32_t u = f32_bits(x);
  const uint8_t sign = static_cast<uint8_t>((u >> 24) & 0x80);
  float a = bits_f32(u & 0x7fffffffu);
  if (!(a == a)) return T::kNaN;
  a = a < T::kMax ? a : T::kMax;
  uint8_t mag;
  constexpr int kEmin = 1 - T::kBias;  // exponent of the smallest normal
  if (a < bits_f32(static_cast<uint32_t>(kEmin + 127) << 23)) {
    // Subnormal range: the quantum is 2^(kEmin-3); scaling by its inverse is exact.
    mag = static_cast<uint8_t>(round_even(a * bits_f32(static_cast<uint32_t>(127 + 3 - kEmin) << 23)));
  } else {
    // Round the 23-bit mantissa to 3 bits, nearest even, then re-bias the exponent.
    uint32_t b = f32_bits(a);
    b += 0x7ffffu + ((b >> 20) & 1u);
    const int e = static_cast<int>(b >> 23) - 127 + T::kBias;
    mag = static_cast<uint8_t>((e << 3) | ((b >> 20) & 7u));
  }
  if (!T::kHasNegZero && mag == 0) return 0;
  return static_cast<uint8_t>(sign | mag);
}

// e4m3 -> float decode.
template <Fp8Kind K>
FP8ATTN_HD float fp8_decode(uint8_t c) {
  using T = Fp8Traits<K>;
  const uint32_t mag = c & 0x7fu;
  if (K == Fp8Kind::E4M3FN ? mag == 0x7fu : c == 0x80u) return bits_f32(0x7fc00000u);
  const uint32_t e = mag >> 3, m = mag & 7u;
  const float a = e == 0 ? static_cast<float>(m) * bits_f32(static_cast<uint32_t>(127 - 2 - T::kBias) << 23)
                         : bits_f32(((e + 127 - T::kBias) << 23) | (m << 20));
  return (c & 0x80u) ? -a : a;
}

template <Fp8Kind K>
FP8ATTN_HD float fp8_max() {
  return Fp8Traits<K>::kMax;
}

// Software conversion of 4 values: the codes of sat(x[i]) packed little-endian (byte i = x[i]),
// their values in xq. What PQuantize uses where no hardware conversion writes kind K (the arch
// atoms' Fp8Cvt fall back to it).
template <Fp8Kind K>
FP8ATTN_HD uint32_t fp8_encode4(const float x[4], float xq[4]) {
  uint32_t r = 0;
  for (int i = 0; i < 4; ++i) {
    const uint8_t c = fp8_encode<K>(x[i]);
    xq[i] = fp8_decode<K>(c);
    r |= static_cast<uint32_t>(c) << (8 * i);
  }
  return r;
}

// The software conversions of kind K as PQuantize's converter (the host's; arch/ has the others).
template <Fp8Kind K>
struct Fp8SoftCvt {
  FP8ATTN_HD static uint32_t encode4(const float x[4], float xq[4]) { return fp8_encode4<K>(x, xq); }
  FP8ATTN_HD static uint32_t encode4(const float x[4]) {
    float xq[4];
    return fp8_encode4<K>(x, xq);
  }
};

}  // namespace fp8attn
