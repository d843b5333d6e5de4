// bf16 / fp16 <-> float, bit-exact on host and device (round to nearest even, NaN kept).
#pragma once
#include <cstdint>

#include "fp8.h"

namespace fp8attn {

FP8ATTN_HD float bf16_decode(uint16_t h) { return bits_f32(static_cast<uint32_t>(h) << 16); }

FP8ATTN_HD uint16_t bf16_encode(float x) {
  uint32_t u = f32_bits(x);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

FP8ATTN_HD float fp16_decode(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
  float a;
  if (e == 0) {
    a = static_cast<float>(m) * bits_f32(static_cast<uint32_t>(127 - 24) << 23);
  } else if (e == 31) {
    a = bits_f32(0x7f800000u | (m << 13));
  } else {
    a = bits_f32(((e + 112u) << 23) | (m << 13));
  }
  return bits_f32(f32_bits(a) | sign);
}

FP8ATTN_HD uint16_t fp16_encode(float x) {
  const uint32_t u = f32_bits(x);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  const uint32_t au = u & 0x7fffffffu;
  if (au > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);
  const float a = bits_f32(au);
  if (a >= 65520.f) return static_cast<uint16_t>(sign | 0x7c00u);  // rounds to inf
  if (a < 6.103515625e-05f) {  // subnormal: quantum 2^-24, exact scaling
    return static_cast<uint16_t>(sign | static_cast<uint16_t>(round_even(a * 16777216.f)));
  }
  uint32_t b = au + 0xfffu + ((au >> 13) & 1u);
  return static_cast<uint16_t>(sign | (((b >> 23) - 112u) << 10) | ((b >> 13) & 0x3ffu));
}

}  // namespace fp8attn
