// Whether AMX's bf16 tile product (tdpbf16ps) adds like the CPU oracle, a chain of rounded fp32 steps, on
// FP8-valued bf16 inputs (lab check; needs an AMX-BF16 CPU):
//   g++ -O2 -mamx-tile -mamx-bf16 -o /tmp/amx_order lab/cpu/amx_order.cpp && /tmp/amx_order
// It does not (2026-12-07, this project's Intel Xeon: 48 % of the outputs differ from both pair orders, 17 %
// even with every pair's second product zero), so fp8attn's CPU kernels cannot use AMX and keep the oracle's
// bits.
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>

struct TileConfig {
  uint8_t palette, start;
  uint8_t reserved[14];
  uint16_t colsb[16];
  uint8_t rows[16];
};

static uint16_t bf16(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  return static_cast<uint16_t>(u >> 16);
}
static float f32(uint16_t b) {
  const uint32_t u = uint32_t{b} << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

int main() {
  if (syscall(SYS_arch_prctl, 0x1023 /* ARCH_REQ_XCOMP_PERM */, 18 /* XFEATURE_XTILEDATA */)) {
    std::puts("no AMX tile state from the OS");
    return 1;
  }
  std::mt19937 g(1);
  auto fp8 = [&] {  // an e4m3 value (3 mantissa bits), zero now and then
    const float v = std::ldexp(1.f + float(g() % 8) / 8.f, int(g() % 18) - 9);
    return g() % 7 == 0 ? 0.f : (g() & 1 ? -v : v);
  };
  alignas(64) uint16_t A[16][32], B[16][32];
  alignas(64) float C[16][16], C0[16][16];
  TileConfig cfg{};
  cfg.palette = 1;
  for (int i = 0; i < 3; ++i) cfg.colsb[i] = 64, cfg.rows[i] = 16;
  _tile_loadconfig(&cfg);
  for (const bool padded : {false, true}) {
    long total = 0, odd_first = 0, even_first = 0;
    for (int trial = 0; trial < 4000; ++trial) {
      for (int i = 0; i < 16; ++i)
        for (int j = 0; j < 32; ++j) A[i][j] = padded && j % 2 ? 0 : bf16(fp8()), B[i][j] = padded && j % 2 ? 0 : bf16(fp8());
      for (int i = 0; i < 16; ++i)
        for (int j = 0; j < 16; ++j) C0[i][j] = C[i][j] = std::ldexp(float(int(g() % 2000) - 1000), int(g() % 40) - 30);
      _tile_loadd(0, C, 64);
      _tile_loadd(1, A, 64);
      _tile_loadd(2, B, 64);
      _tile_dpbf16ps(0, 1, 2);
      _tile_stored(0, C, 64);
      for (int m = 0; m < 16; ++m)
        for (int n = 0; n < 16; ++n) {
          float o = C0[m][n], e = C0[m][n];  // the oracle's chain: odd element first; and the other order
          for (int k = 0; k < 16; ++k) {
            o = std::fma(f32(A[m][2 * k + 1]), f32(B[k][2 * n + 1]), o);
            o = std::fma(f32(A[m][2 * k]), f32(B[k][2 * n]), o);
            e = std::fma(f32(A[m][2 * k]), f32(B[k][2 * n]), e);
            e = std::fma(f32(A[m][2 * k + 1]), f32(B[k][2 * n + 1]), e);
          }
          ++total;
          odd_first += std::memcmp(&o, &C[m][n], 4) != 0;
          even_first += std::memcmp(&e, &C[m][n], 4) != 0;
        }
    }
    std::printf("%s: %ld outputs, %ld differ from the odd-first chain, %ld from the even-first one\n",
                padded ? "pairs with a zero second element" : "full pairs", total, odd_first, even_first);
  }
  _tile_release();
}
