// Every bit pattern through cpu_math.h's functions on ScalarOps, Avx2Ops and Avx512Ops: the vector
// paths must give the scalar bits (NaN for NaN); and the scalar templates against fp8.h / half.h.
// Lab tool, not built by the project:
//   g++ -O2 -std=c++17 -ffp-contract=off -mavx2 -mfma -mf16c -mavx512f -mavx512dq -mavx512bw -mavx512vl \
//       -I../../csrc check_simd_math.cpp -o /tmp/check_simd_math && /tmp/check_simd_math
#include <cstdio>
#include <cstring>

#include "cpu/cpu_math.h"
#include "cpu/simd_avx2.h"
#include "cpu/simd_avx512.h"
#include "kernels/numeric/half.h"

using namespace fp8attn;
using namespace fp8attn::cpu;

static uint32_t fb(float x) { uint32_t u; std::memcpy(&u, &x, 4); return u; }
static bool same(float a, float b) { return fb(a) == fb(b) || (a != a && b != b); }

long bad[16];
const char* names[16] = {"exp2", "tanh", "fp8_round fn", "fp8_round fnuz", "fp8_round_signed fn", "fp8_round_signed fnuz",
                         "fp8_code fn", "fp8_code fnuz", "bf16_bits", "fp16_bits", "fp8_code vs fp8_encode",
                         "bf16 vs bf16_encode", "fp16 vs fp16_encode", "signed vs decode(encode)"};

template <class O>
void check(const float* x) {
  constexpr int W = O::W;
  alignas(64) float r[W];
  alignas(64) uint32_t c[W];
  const auto v = O::load(x);
  auto fcheck = [&](int id, typename O::F y, float (*ref)(float)) {
    O::store(r, y);
    for (int i = 0; i < W; ++i) if (!same(r[i], ref(x[i]))) bad[id]++;
  };
  auto icheck = [&](int id, typename O::I y, uint32_t (*ref)(float)) {
    O::store(reinterpret_cast<float*>(c), O::from_bits(y));
    for (int i = 0; i < W; ++i) if (c[i] != ref(x[i])) bad[id]++;
  };
  fcheck(0, exp2<O>(O::select(O::gt(v, O::set1(0.f)), O::set1(0.f), v)), [](float t) { return exp2<ScalarOps>(t > 0 ? 0 : t); });
  fcheck(1, tanh<O>(v), [](float t) { return tanh<ScalarOps>(t); });
  const auto av = O::abs(v);
  fcheck(2, fp8_round<O, Fp8Kind::E4M3FN>(av), [](float t) { return fp8_round<ScalarOps, Fp8Kind::E4M3FN>(std::fabs(t)); });
  fcheck(3, fp8_round<O, Fp8Kind::E4M3FNUZ>(av), [](float t) { return fp8_round<ScalarOps, Fp8Kind::E4M3FNUZ>(std::fabs(t)); });
  fcheck(4, fp8_round_signed<O, Fp8Kind::E4M3FN>(v), [](float t) { return fp8_round_signed<ScalarOps, Fp8Kind::E4M3FN>(t); });
  fcheck(5, fp8_round_signed<O, Fp8Kind::E4M3FNUZ>(v), [](float t) { return fp8_round_signed<ScalarOps, Fp8Kind::E4M3FNUZ>(t); });
  icheck(6, fp8_code<O, Fp8Kind::E4M3FN>(v), [](float t) { return fp8_code<ScalarOps, Fp8Kind::E4M3FN>(t); });
  icheck(7, fp8_code<O, Fp8Kind::E4M3FNUZ>(v), [](float t) { return fp8_code<ScalarOps, Fp8Kind::E4M3FNUZ>(t); });
  icheck(8, bf16_bits<O>(v), [](float t) { return bf16_bits<ScalarOps>(t); });
  icheck(9, fp16_bits<O>(v), [](float t) { return fp16_bits<ScalarOps>(t); });
}

void check_scalar_vs_numerics(float t) {
  if (fp8_code<ScalarOps, Fp8Kind::E4M3FN>(t) != fp8_encode<Fp8Kind::E4M3FN>(t) ||
      fp8_code<ScalarOps, Fp8Kind::E4M3FNUZ>(t) != fp8_encode<Fp8Kind::E4M3FNUZ>(t)) bad[10]++;
  if (bf16_bits<ScalarOps>(t) != bf16_encode(t)) bad[11]++;
  if (fp16_bits<ScalarOps>(t) != fp16_encode(t)) bad[12]++;
  if (!same(fp8_round_signed<ScalarOps, Fp8Kind::E4M3FN>(t), fp8_decode<Fp8Kind::E4M3FN>(fp8_encode<Fp8Kind::E4M3FN>(t))) ||
      !same(fp8_round_signed<ScalarOps, Fp8Kind::E4M3FNUZ>(t), fp8_decode<Fp8Kind::E4M3FNUZ>(fp8_encode<Fp8Kind::E4M3FNUZ>(t))))
    bad[13]++;
}

int main(int argc, char** argv) {
  const uint64_t step = argc > 1 ? std::strtoull(argv[1], nullptr, 0) : 1;  // 1: every bit pattern
  alignas(64) float x[16];
  for (uint64_t u = 0; u < (uint64_t{1} << 32); u += 16 * step) {
    for (int i = 0; i < 16; ++i) {
      const uint32_t b = static_cast<uint32_t>(u + i * step);
      std::memcpy(&x[i], &b, 4);
      check_scalar_vs_numerics(x[i]);
    }
    check<Avx512Ops>(x);
    check<Avx2Ops>(x);
    check<Avx2Ops>(x + 8);
  }
  // FP8 code -> value for every code
  for (int c = 0; c < 256; ++c) {
    if (!same(fp8_value<ScalarOps, Fp8Kind::E4M3FN>(c), fp8_decode<Fp8Kind::E4M3FN>(c)) ||
        !same(fp8_value<ScalarOps, Fp8Kind::E4M3FNUZ>(c), fp8_decode<Fp8Kind::E4M3FNUZ>(c))) bad[14]++;
    alignas(64) uint32_t cs[16];
    alignas(64) float r[16];
    for (int i = 0; i < 16; ++i) cs[i] = c;
    Avx512Ops::store(r, fp8_value<Avx512Ops, Fp8Kind::E4M3FNUZ>(_mm512_load_si512(cs)));
    if (!same(r[0], fp8_decode<Fp8Kind::E4M3FNUZ>(c))) bad[14]++;
    Avx2Ops::store(r, fp8_value<Avx2Ops, Fp8Kind::E4M3FN>(_mm256_load_si256(reinterpret_cast<const __m256i*>(cs))));
    if (!same(r[0], fp8_decode<Fp8Kind::E4M3FN>(c))) bad[14]++;
  }
  names[14] = "fp8_value";
  long total = 0;
  for (int i = 0; i < 15; ++i) {
    std::printf("%-28s %ld mismatches\n", names[i], bad[i]);
    total += bad[i];
  }
  return total != 0;
}
