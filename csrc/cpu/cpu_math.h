// The CPU implementation's elementwise math, written once for every instruction set: each function
// is a template over an Ops type (ScalarOps below; the SIMD ones in simd_avx2.h / simd_avx512.h)
// that supplies IEEE single operations, so the scalar oracle and every vector path compute the
// same bits. Only exactly rounded operations are used (add, mul, fma, div, round-to-even, scaling
// by 2^n), never the C library's exp2 / tanh, whose results differ from any vector version.
//
// Everything here has internal linkage: the per-ISA translation units are compiled with their own
// -m flags, and an inline function shared between them could be linked to an AVX-512 copy.
#pragma once
#include <cmath>
#include <cstdint>

#include "cpu/item.h"
#include "kernels/fwd/softmax.h"
#include "kernels/numeric/fp8.h"
#include "kernels/variant.h"

namespace fp8attn::cpu {
namespace {

constexpr float pow2(int e) { return e >= 0 ? (e == 0 ? 1.f : 2.f * pow2(e - 1)) : 0.5f * pow2(e + 1); }

struct ScalarOps {
  using F = float;
  using I = uint32_t;
  using M = bool;
  static F set1(float x) { return x; }
  static I set1i(uint32_t x) { return x; }
  static F add(F a, F b) { return a + b; }
  static F sub(F a, F b) { return a - b; }
  static F mul(F a, F b) { return a * b; }
  static F div(F a, F b) { return a / b; }
  static F fma(F a, F b, F c) { return std::fma(a, b, c); }
  static F round_even(F x) { return std::nearbyint(x); }
  // p * 2^n rounded once (n integral, in [-150, 128], or NaN).
  static F scale2(F p, F n) { return n == n ? std::ldexp(p, static_cast<int>(n)) : p; }
  // x86's maxps / minps: the second operand when either is NaN.
  static F max(F a, F b) { return a > b ? a : b; }
  static F min(F a, F b) { return a < b ? a : b; }
  static F abs(F a) { return std::fabs(a); }
  static F copysign(F mag, F sign) { return std::copysign(mag, sign); }
  static M lt(F a, F b) { return a < b; }
  static M gt(F a, F b) { return a > b; }
  static M eq(F a, F b) { return a == b; }
  static M isnan(F a) { return a != a; }
  static F select(M m, F a, F b) { return m ? a : b; }
  static I bits(F x) { return f32_bits(x); }
  static F from_bits(I u) { return bits_f32(u); }
  static I addi(I a, I b) { return a + b; }
  static I andi(I a, I b) { return a & b; }
  static I ori(I a, I b) { return a | b; }
  static I srli(I a, int n) { return a >> n; }
  static I slli(I a, int n) { return a << n; }
  static I subi(I a, I b) { return a - b; }
  static I selecti(M m, I a, I b) { return m ? a : b; }
  static M lti(I a, I b) { return a < b; }
  static M eqi(I a, I b) { return a == b; }
  static F cvti(I a) { return static_cast<F>(a); }
  static I cvtf2i(F a) { return a == a ? static_cast<I>(a) : 0u; }  // a integral, in [0, 2^31)
};

// 2^f on [-1/2, 1/2] = 1 + f·(c1 + f·(c2 + ...)): a minimax fit of (2^f - 1)/f (relative error 1.1e-8).
constexpr float kExp2Poly[6] = {0.6931471824645996f,  0.24022649228572845f,  0.05550357326865196f,
                                0.009618237614631653f, 0.0013390735257416964f, 0.00015403507859446108f};

// 2^x within 1 ulp for x <= 0 (the softmax's only arguments), denormal results included; exactly 1 at
// x = 0, 0 at and below -150 (2^-150 rounds to 0) and at -inf, +inf above 128, NaN kept (min / max
// return their second operand, x, when it is NaN).
template <class O>
typename O::F exp2(typename O::F x) {
  using F = typename O::F;
  x = O::min(O::set1(128.f), O::max(O::set1(-150.f), x));
  const F n = O::round_even(x);
  const F f = O::sub(x, n);
  F p = O::set1(kExp2Poly[5]);
  for (int i = 4; i >= 0; --i) p = O::fma(p, f, O::set1(kExp2Poly[i]));
  p = O::fma(p, f, O::set1(1.f));
  return O::scale2(p, n);
}

// tanh(a) = a + a^3·P(a^2) below 0.55 (minimax, relative error 1.1e-9), (1 - e) / (1 + e) with
// e = exp(-2|a|) above; within 2 ulp, odd, NaN kept.
constexpr float kTanhSmall = 0.55f;
constexpr float kTanhPoly[6] = {-0.3333333432674408f,  0.1333332359790802f,    -0.05396470054984093f,
                                0.021818460896611214f, -0.008526375517249107f, 0.0025264471769332886f};

template <class O>
typename O::F tanh(typename O::F y) {
  using F = typename O::F;
  const F a = O::abs(y);
  const F e = exp2<O>(O::mul(a, O::set1(-2.f * 1.4426950408889634f)));
  const F big = O::div(O::sub(O::set1(1.f), e), O::add(O::set1(1.f), e));
  const F u = O::mul(a, a);
  F p = O::set1(kTanhPoly[5]);
  for (int i = 4; i >= 0; --i) p = O::fma(p, u, O::set1(kTanhPoly[i]));
  const F small = O::fma(O::mul(a, u), p, a);
  return O::copysign(O::select(O::lt(a, O::set1(kTanhSmall)), small, big), y);
}

// The FP8 value of sat(y) for y >= 0 or NaN: what PQuantize<K> (decode(encode(y))) gives, computed on
// the float bits (round the mantissa to 3 bits, nearest even; below the smallest normal, round to the
// subnormal quantum).
template <class O, Fp8Kind K>
typename O::F fp8_round(typename O::F y) {
  using F = typename O::F;
  constexpr int bias = Fp8Traits<K>::kBias;
  constexpr float kMax = Fp8Traits<K>::kMax;
  constexpr float quantum = pow2(-2 - bias), min_normal = pow2(1 - bias);
  y = O::min(O::set1(kMax), y);
  auto b = O::bits(y);
  b = O::addi(b, O::addi(O::set1i(0x7ffffu), O::andi(O::srli(b, 20), O::set1i(1u))));
  const F normal = O::from_bits(O::andi(b, O::set1i(0xfff00000u)));
  const F sub = O::mul(O::round_even(O::mul(y, O::set1(1.f / quantum))), O::set1(quantum));
  return O::select(O::isnan(y), y, O::select(O::lt(y, O::set1(min_normal)), sub, normal));
}

// Below this log2-unit offset from the running max every p8 = fp8_round(exp2(z) · inv_p_scale) is 0: exp2(z)
// · inv_p_scale <= quantum / 4 there (< quantum / 2, which rounds to 0, with exp2's 1 ulp). Never below
// exp2's own clamp, -150.
template <Fp8Kind K>
float p_floor(float inv_p_scale) {
  constexpr float quantum = pow2(-2 - Fp8Traits<K>::kBias);
  const float f = std::floor(std::log2(quantum / inv_p_scale)) - 2.f;
  return f > -150.f ? f : -150.f;
}

// P's FP8 value at log2-unit offset z = x - m: fp8_round(exp2(z) · inv_p_scale), bit for bit, with exp2 run
// on max(z, floor) (floor = p_floor: no denormal 2^z, which costs a microcode assist per vector on x86) and
// 0 below the floor; a NaN z stays NaN (max returns its second operand, z, then; lt is false).
template <class O, Fp8Kind K>
typename O::F p8_value(typename O::F z, typename O::F inv_p_scale, typename O::F floor) {
  const auto p8 = fp8_round<O, K>(O::mul(exp2<O>(O::max(floor, z)), inv_p_scale));
  return O::select(O::lt(z, floor), O::set1(0.f), p8);
}

// The value of sat(y), any sign: fp8_decode(fp8_encode(y)) (e4m3fnuz has no -0).
template <class O, Fp8Kind K>
typename O::F fp8_round_signed(typename O::F y) {
  const auto r = O::copysign(fp8_round<O, K>(O::abs(y)), y);
  return K == Fp8Kind::E4M3FNUZ ? O::select(O::eq(r, O::set1(0.f)), O::set1(0.f), r) : r;
}

// The FP8 code of sat(x) in each lane's low byte: fp8_encode<K> on the bits.
template <class O, Fp8Kind K>
typename O::I fp8_code(typename O::F x) {
  constexpr uint32_t bias = Fp8Traits<K>::kBias;
  constexpr float kMax = Fp8Traits<K>::kMax;
  const auto sign = O::andi(O::srli(O::bits(x), 24), O::set1i(0x80u));
  auto a = O::abs(x);
  const auto nan = O::isnan(a);
  a = O::select(O::gt(a, O::set1(kMax)), O::set1(kMax), a);
  const auto b = O::addi(O::bits(a), O::addi(O::set1i(0x7ffffu), O::andi(O::srli(O::bits(a), 20), O::set1i(1u))));
  const auto normal = O::subi(O::srli(b, 20), O::set1i((127u - bias) << 3));
  const auto sub = O::cvtf2i(O::round_even(O::mul(a, O::set1(pow2(2 + static_cast<int>(bias))))));
  const auto mag = O::selecti(O::lt(a, O::set1(pow2(1 - static_cast<int>(bias)))), sub, normal);
  auto code = O::ori(sign, mag);
  if (K == Fp8Kind::E4M3FNUZ) code = O::selecti(O::eqi(mag, O::set1i(0u)), O::set1i(0u), code);
  return O::selecti(nan, O::set1i(Fp8Traits<K>::kNaN), code);
}

// bf16_encode on the bits (in each lane's low 16 bits).
template <class O>
typename O::I bf16_bits(typename O::F x) {
  const auto u = O::bits(x);
  const auto nan = O::lti(O::set1i(0x7f800000u), O::andi(u, O::set1i(0x7fffffffu)));
  const auto r = O::srli(O::addi(u, O::addi(O::set1i(0x7fffu), O::andi(O::srli(u, 16), O::set1i(1u)))), 16);
  return O::selecti(nan, O::ori(O::srli(u, 16), O::set1i(0x40u)), r);
}

// fp16_encode on the bits (in each lane's low 16 bits).
template <class O>
typename O::I fp16_bits(typename O::F x) {
  const auto u = O::bits(x);
  const auto sign = O::andi(O::srli(u, 16), O::set1i(0x8000u));
  const auto au = O::andi(u, O::set1i(0x7fffffffu));
  const auto a = O::from_bits(au);
  const auto b = O::addi(au, O::addi(O::set1i(0xfffu), O::andi(O::srli(au, 13), O::set1i(1u))));
  const auto normal = O::subi(O::srli(b, 13), O::set1i(112u << 10));
  const auto sub = O::cvtf2i(O::round_even(O::mul(a, O::set1(pow2(24)))));
  auto mag = O::selecti(O::lt(a, O::set1(pow2(-14))), sub, normal);
  mag = O::selecti(O::lt(a, O::set1(65520.f)), mag, O::set1i(0x7c00u));  // rounds to inf
  const auto nan = O::lti(O::set1i(0x7f800000u), au);
  return O::ori(sign, O::selecti(nan, O::set1i(0x7e00u), mag));
}

// The value of each FP8 code (c in the low byte of each lane): fp8_decode<K>, on the bits.
template <class O, Fp8Kind K>
typename O::F fp8_value(typename O::I c) {
  constexpr uint32_t bias = Fp8Traits<K>::kBias;
  const auto mag = O::andi(c, O::set1i(0x7fu));
  const auto normal = O::from_bits(O::addi(O::slli(mag, 20), O::set1i((127u - bias) << 23)));
  const auto sub = O::mul(O::cvti(mag), O::set1(pow2(-2 - static_cast<int>(bias))));
  const auto v = O::select(O::lti(mag, O::set1i(8u)), sub, normal);
  const auto signed_v = O::from_bits(O::ori(O::bits(v), O::slli(O::andi(c, O::set1i(0x80u)), 24)));
  const auto nan = K == Fp8Kind::E4M3FN ? O::eqi(mag, O::set1i(0x7fu)) : O::eqi(c, O::set1i(0x80u));
  return O::select(nan, O::from_bits(O::set1i(0x7fc00000u)), signed_v);
}

// Lane r's epilogue from its final m and l (docs/design.md §1): softmax.h's add_sink (when the call has
// sinks), then finish_row: O = acc · o_scale (l sums p8, so p_scale cancels there) and the lse. One scalar
// path for every instruction set (exp2 is this file's).
struct Exp2Cpu {
  float operator()(float x) const { return exp2<ScalarOps>(x); }
};
inline RowResult lane_result(const ItemArgs& a, int r, float m, float l) {
  float o_factor = a.v_descale[r];
  if (a.sink) {
    const SinkRow s = add_sink(m, l, a.sink[r], a.inv_p_scale, Exp2Cpu{});
    m = s.m;
    l = s.l;
    o_factor *= s.acc_scale;
  }
  return finish_row(m, l, o_factor, a.p_scale);
}

// Key j's K and V rows in the item's sequence (dense / varlen rows, or paged through the block table;
// an entry out of range reads block 0, as SeqInfo::valid_block does).
inline const uint8_t* key_row(const KeySource& s, int32_t j, bool is_v) {
  const uint8_t* base = is_v ? s.v : s.k;
  const int64_t row = is_v ? s.v_row : s.k_row;
  if (!s.blocks) return base + static_cast<int64_t>(j) * row;
  int32_t blk = s.blocks[j / s.page];
  blk = static_cast<uint32_t>(blk) < static_cast<uint32_t>(s.num_blocks) ? blk : 0;
  return base + static_cast<int64_t>(blk) * (is_v ? s.v_block : s.k_block) + static_cast<int64_t>(j % s.page) * row;
}

}  // namespace
}  // namespace fp8attn::cpu
