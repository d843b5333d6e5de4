// Host emulation of one 64-lane wavefront running the AMD warp tile (csrc/kernels/arch/amd_mfma.h)
// -- the real qk / pv / s_key / p_src / o_col code, compiled for the host -- with the MFMA replaced
// by an emulation of the documented v_mfma_f32_32x32x16 operand and accumulator layouts:
//   A (32x16): lane l holds A[l % 32][8 * (l / 32) + j] in byte j;  B (16x32): B[8 * (l / 32) + j][l % 32]
//   D (32x32): lane l, register r holds D[8 * (r / 4) + 4 * (l / 32) + r % 4][l % 32].
// Checks, for every lane and element: S element i == q_row . k_{s_key(lane, i)}, and O element e ==
// sum_k P[row][k] V[k][o_col(lane, e)] with P taken from the S elements through p_src, exactly as
// the pipeline packs it. Also: fn_as_fnuz over all bytes, exact fp8 -> f16 widening of all
// codes (NaN codes to NaN), transpose4x4_bytes. Run by scripts/ci_rocm_check.sh (clang: ext_vector_type, _Float16).
//   clang++-22 -std=c++17 -O1 -I csrc scripts/amd_tile_emulation.cpp -o /tmp/emu && /tmp/emu
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

// Shims for the few HIP names the atom header uses outside device-only branches.
struct uint4 {
  uint32_t x, y, z, w;
};
inline uint4 make_uint4(uint32_t x, uint32_t y, uint32_t z, uint32_t w) { return uint4{x, y, z, w}; }
inline float __shfl_xor(float x, int) { return x; }

#include "kernels/arch/amd_mfma.h"

using namespace fp8attn;
using amd::f32x16;
constexpr Fp8Kind K = Fp8Kind::E4M3FNUZ;

// ---- MFMA emulation: pass 1 records every lane's operands per call; pass 2 returns c + D.
static int g_lane = 0, g_call = 0, g_pass = 1;
static std::vector<std::vector<uint64_t>> g_a, g_b;  // [call][lane]

static float byte_val(uint64_t x, int j) { return fp8_decode<K>(static_cast<uint8_t>(x >> (8 * j))); }

namespace fp8attn {
namespace amd {
template <>
f32x16 mfma_32x32x16<K>(uint64_t a, uint64_t b, f32x16 c) {
  const int k = g_call++;
  if (g_pass == 1) {
    if (static_cast<int>(g_a.size()) <= k) {
      g_a.emplace_back(64, 0);
      g_b.emplace_back(64, 0);
    }
    g_a[k][g_lane] = a;
    g_b[k][g_lane] = b;
    return c;
  }
  const int n = g_lane % 32, h = g_lane / 32;
  for (int r = 0; r < 16; ++r) {
    const int i = 8 * (r / 4) + 4 * h + r % 4;
    double acc = 0;
    for (int kk = 0; kk < 16; ++kk) {  // A[i][kk] from lane i + 32*(kk/8); B[kk][n] from lane n + 32*(kk/8)
      acc += static_cast<double>(byte_val(g_a[k][i + 32 * (kk / 8)], kk % 8)) * byte_val(g_b[k][n + 32 * (kk / 8)], kk % 8);
    }
    c[r] += static_cast<float>(acc);
  }
  return c;
}
}  // namespace amd
}  // namespace fp8attn

template <int D>
struct TestPolicy {
  static constexpr int kD = D;
  static constexpr int kDPad = (D + 31) / 32 * 32;
  static constexpr int kRowStride = kDPad + 16;
  static constexpr int kVtStride = 64 + 16;
  static constexpr int kNTilesO = (D + 31) / 32 * 4;
};

static int failures = 0;
#define CHECK(cond, ...)                  \
  do {                                    \
    if (!(cond)) {                        \
      if (failures++ < 10) {              \
        std::printf("FAIL: " __VA_ARGS__); \
        std::printf("\n");                \
      }                                   \
    }                                     \
  } while (0)

template <int D, bool kK64>
void test_tile(std::mt19937& rng) {
  using P = TestPolicy<D>;
  using Tile = amd::MfmaTile<K, kK64>;
  const int warp = 1;  // a wavefront other than 0: row offsets matter
  std::uniform_int_distribution<int> code(0, 255);
  auto rand_code = [&] {
    int c;
    do c = code(rng);
    while (c == 0x80);  // fnuz NaN
    return static_cast<uint8_t>(c);
  };
  std::vector<uint8_t> sQ(2 * 32 * P::kRowStride), sK(64 * P::kRowStride), sVt(P::kDPad * P::kVtStride, 0);
  for (auto& x : sQ) x = rand_code();
  for (auto& x : sK) x = rand_code();
  for (int d = 0; d < D; ++d)
    for (int k = 0; k < 64; ++k) sVt[d * P::kVtStride + k] = rand_code();
  auto q = [&](int row, int d) { return fp8_decode<K>(sQ[(warp * 32 + row) * P::kRowStride + d]); };
  auto kk = [&](int key, int d) { return fp8_decode<K>(sK[Tile::k_row(key) * P::kRowStride + d]); };
  auto v = [&](int key, int d) { return fp8_decode<K>(sVt[d * P::kVtStride + key]); };

  // ---- S = Q . K^T
  std::vector<std::vector<float>> s(64, std::vector<float>(Tile::kSElems));
  for (g_pass = 1; g_pass <= 2; ++g_pass) {
    if (g_pass == 1) g_a.clear(), g_b.clear();
    for (g_lane = 0; g_lane < 64; ++g_lane) {
      g_call = 0;
      Tile::template qk<P>(s[g_lane].data(), sQ.data(), sK.data(), warp, g_lane);
    }
  }
  std::vector<std::vector<int>> keys_of_row(32);
  for (int lane = 0; lane < 64; ++lane) {
    const int row = Tile::row_in_warp(lane, 0);
    for (int i = 0; i < Tile::kSElems; ++i) {
      const int key = Tile::s_key(lane, i);
      double ref = 0, mag = 0;  // fp32 accumulation: error bound ~ eps * sum |terms|
      for (int d = 0; d < D; ++d) ref += static_cast<double>(q(row, d)) * kk(key, d), mag += std::fabs(q(row, d) * kk(key, d));
      CHECK(std::fabs(s[lane][i] - ref) <= 1e-6 * (1 + mag), "D=%d S lane %d elem %d key %d: %g vs %g", D, lane,
            i, key, s[lane][i], ref);
      keys_of_row[row].push_back(key);
    }
  }
  for (int row = 0; row < 32; ++row) {  // the two lanes of a row cover the 64 keys once
    std::vector<int> seen(64, 0);
    for (int key : keys_of_row[row]) seen[key]++;
    for (int key = 0; key < 64; ++key) CHECK(seen[key] == 1, "D=%d row %d key %d seen %d times", D, row, key, seen[key]);
  }

  // ---- O += P . V, P packed from the S elements through p_src (as pipeline.h does)
  std::vector<std::vector<uint8_t>> prow(32, std::vector<uint8_t>(64));
  for (auto& r : prow)
    for (auto& x : r) x = static_cast<uint8_t>(code(rng) & 0x7f);  // probabilities are >= 0
  std::vector<std::vector<float>> acc(64, std::vector<float>(P::kNTilesO * 4, 0.f));
  for (g_pass = 1; g_pass <= 2; ++g_pass) {
    if (g_pass == 1) g_a.clear(), g_b.clear();
    for (g_lane = 0; g_lane < 64; ++g_lane) {
      const int row = Tile::row_in_warp(g_lane, 0);
      uint32_t pa[Tile::kPWords];
      for (int w = 0; w < Tile::kPWords; ++w) {
        pa[w] = 0;
        for (int b = 0; b < 4; ++b)
          pa[w] |= static_cast<uint32_t>(prow[row][Tile::s_key(g_lane, Tile::p_src(w, b))]) << (8 * b);
      }
      float a2[P::kNTilesO][4] = {};
      g_call = 0;
      Tile::template pv<P>(a2, pa, sVt.data(), g_lane);
      if (g_pass == 2)
        for (int e = 0; e < P::kNTilesO * 4; ++e) acc[g_lane][e] = a2[e / 4][e % 4];
    }
  }
  std::vector<std::vector<int>> cols_of_row(32);
  for (int lane = 0; lane < 64; ++lane) {
    const int row = Tile::row_in_warp(lane, 0);
    for (int e = 0; e < P::kNTilesO * 4; ++e) {
      const int d = Tile::o_col(lane, e);
      CHECK(Tile::o_row(e) == 0 && d < Tile::o_cols(D), "D=%d O lane %d elem %d: column %d", D, lane, e, d);
      if (d >= D) continue;
      double ref = 0, mag = 0;
      for (int key = 0; key < 64; ++key) {
        const double t = static_cast<double>(fp8_decode<K>(prow[row][key])) * v(key, d);
        ref += t, mag += std::fabs(t);
      }
      CHECK(std::fabs(acc[lane][e] - ref) <= 1e-6 * (1 + mag), "D=%d O lane %d elem %d col %d: %g vs %g", D, lane,
            e, d, acc[lane][e], ref);
      cols_of_row[row].push_back(d);
    }
  }
  for (int row = 0; row < 32; ++row) {
    std::vector<int> seen(D, 0);
    for (int d : cols_of_row[row]) seen[d]++;
    for (int d = 0; d < D; ++d) CHECK(seen[d] == 1, "D=%d row %d column %d stored %d times", D, row, d, seen[d]);
  }
}

// Every code, in both bytes: its value, NaN codes to f16 NaN.
template <Fp8Kind Kind>
void test_widen() {
  for (int c = 0; c < 256; ++c) {
    const uint8_t c1 = static_cast<uint8_t>(c ^ 0x80);
    const amd::f16x2 h = amd::fp8x2_to_f16x2<Kind>(static_cast<uint32_t>(c) | (static_cast<uint32_t>(c1) << 8));
    const float want[2] = {fp8_decode<Kind>(static_cast<uint8_t>(c)), fp8_decode<Kind>(c1)};
    for (int i = 0; i < 2; ++i) {
      const float got = static_cast<float>(h[i]);
      CHECK(got == want[i] || (got != got && want[i] != want[i]), "widen kind %d code %#x byte %d: %g vs %g",
            static_cast<int>(Kind), c, i, got, want[i]);
    }
  }
}

int main() {
  std::mt19937 rng(1234);
  test_tile<64, false>(rng);
  test_tile<80, false>(rng);
  test_tile<128, false>(rng);
  test_tile<256, false>(rng);
  test_tile<64, true>(rng);  // the gfx950 f8f6f4 arrangement (k = 64 steps, 16-wide tails)
  test_tile<80, true>(rng);
  test_tile<112, true>(rng);
  test_tile<256, true>(rng);
  for (uint32_t b = 0; b < 256; ++b) {  // fn_as_fnuz: 0x80 -> 0, 0x7f / 0xff -> 0x80, in every position
    for (int pos = 0; pos < 4; ++pos) {
      const uint32_t other = (b * 7 + 3) & 0xffu;  // a neighbour byte (mapped by the same rule)
      const auto map = [](uint32_t c) { return c == 0x80 ? 0u : (c & 0x7f) == 0x7f ? 0x80u : c; };
      const uint32_t x = (b << (8 * pos)) | (other << (8 * ((pos + 1) % 4)));
      const uint32_t want = (map(b) << (8 * pos)) | (map(other) << (8 * ((pos + 1) % 4)));
      const uint32_t y = amd::fn_as_fnuz(x);
      CHECK(y == want, "fn_as_fnuz(%#x) = %#x, want %#x", x, y, want);
    }
  }
  test_widen<Fp8Kind::E4M3FN>();
  test_widen<Fp8Kind::E4M3FNUZ>();
  const uint32_t in[4] = {0x03020100u, 0x13121110u, 0x23222120u, 0x33323130u};
  uint32_t out[4];
  amd::MfmaTile<K>::transpose4x4_bytes(in, out);
  CHECK(out[0] == 0x30201000u && out[3] == 0x33231303u, "transpose4x4_bytes");
  if (failures) {
    std::printf("amd tile emulation: %d failures\n", failures);
    return 1;
  }
  std::printf("ok: AMD tile emulated on one 64-lane wavefront (D = 64, 80, 112, 128, 256; k16 and k64 forms): S and O exact for every lane\n");
  return 0;
}
