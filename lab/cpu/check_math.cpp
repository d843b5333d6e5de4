// Exhaustive check of cpu_math.h's scalar exp2 / tanh / fp8_round (lab tool, not built by the project):
//   g++ -O2 -std=c++17 -ffp-contract=off -I../../csrc check_math.cpp -o /tmp/check_math && /tmp/check_math
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "cpu/cpu_math.h"
#include "kernels/variant.h"

using namespace fp8attn;
using namespace fp8attn::cpu;

static uint32_t fb(float x) { uint32_t u; std::memcpy(&u, &x, 4); return u; }
static float bf(uint32_t u) { float x; std::memcpy(&x, &u, 4); return x; }
// ulp distance between floats of the same sign (ordered bits)
static long ulps(float a, float b) { long x = fb(a) & 0x7fffffff, y = fb(b) & 0x7fffffff; return std::labs(x - y); }

int main() {
  long worst = 0; float wx = 0;
  for (uint32_t u = 0x80000000u; u <= 0xc3170000u; ++u) {  // x in [-0, -151]
    const float x = bf(u);
    const float got = exp2<ScalarOps>(x), want = static_cast<float>(std::exp2(static_cast<double>(x)));
    const long e = ulps(got, want);
    if (e > worst) worst = e, wx = x;
  }
  std::printf("exp2 on [-151, 0]: max %ld ulp (at %.9g)\n", worst, wx);
  std::printf("exp2(0)=%a exp2(-inf)=%a exp2(nan)=%f exp2(200)=%f exp2(-149.2)=%a\n", exp2<ScalarOps>(0.f),
              exp2<ScalarOps>(-INFINITY), exp2<ScalarOps>(NAN), exp2<ScalarOps>(200.f), exp2<ScalarOps>(-149.2f));
  worst = 0;
  for (uint32_t u = 0; u <= 0x41a00000u; ++u) {  // |y| in [0, 20]
    const float y = bf(u);
    const float got = tanh<ScalarOps>(y), want = static_cast<float>(std::tanh(static_cast<double>(y)));
    const long e = ulps(got, want);
    if (e > worst) worst = e, wx = y;
    if (tanh<ScalarOps>(-y) != -got) { std::printf("tanh not odd at %g\n", y); return 1; }
  }
  std::printf("tanh on [0, 20]: max %ld ulp (at %.9g); tanh(1e30)=%g tanh(nan)=%f\n", worst, wx, tanh<ScalarOps>(1e30f),
              tanh<ScalarOps>(NAN));
  long bad = 0;
  const PQuantize<Fp8Kind::E4M3FN> qfn{1.f};
  const PQuantize<Fp8Kind::E4M3FNUZ> qnz{1.f};
  for (uint32_t u = 0; u <= 0x7fc00000u; ++u) {
    const float y = bf(u);
    const float a = fp8_round<ScalarOps, Fp8Kind::E4M3FN>(y), b = qfn(y);
    const float c = fp8_round<ScalarOps, Fp8Kind::E4M3FNUZ>(y), d = qnz(y);
    if (!((a == b || (a != a && b != b)) && (c == d || (c != c && d != d)))) {
      if (bad++ < 5) std::printf("fp8_round mismatch at %a: %a %a / %a %a\n", y, a, b, c, d);
    }
  }
  std::printf("fp8_round vs PQuantize over all y >= 0 and NaN: %ld mismatches\n", bad);
  return 0;
}
