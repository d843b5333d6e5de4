// The AMX kernel: kernel_simd.h's KeysKernel (every item, decode and prefill) with its two products, q·k
// and P·V, as AMX bf16 tile products (tdpbf16ps) on FP8 values widened to bf16 (exact, pack_vbmi.h's byte
// lookups), the rest (the online softmax, P's quantization, masks, the epilogue) the AVX-512 code the
// other kernels run. Unlike them it does not give the scalar oracle's bits: a tile product sums its 32
// products in the hardware's own order and precision (docs/cpu.md, "The AMX kernel"), so it agrees with
// the oracle to rounding, as the GPU's tensor-core pipelines do, and the tests hold it to their bounds.
//
// Tiles: 0-3 accumulators (S or O, tile_rows x 16 fp32), 4 the A operand (q or P rows: tile_rows x 32 bf16),
// 5 the B operand (K^T or V: 16 pair rows x 16 columns x 2 bf16), 6 and 7 A and B of a head dim's last 16
// when it is not a multiple of 32 (80, 112).
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "cpu/pack_vbmi.h"

namespace fp8attn::cpu {
namespace {

struct TileConfig {
  uint8_t palette = 0, start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

// X(t) for the tile ids t = 0 .. n-1 (GCC's tile intrinsics paste their id into the instruction: literals only).
#define FP8ATTN_FOR_TILES(n, X) \
  do {                          \
    X(0);                       \
    if ((n) > 1) X(1);          \
    if ((n) > 2) X(2);          \
    if ((n) > 3) X(3);          \
  } while (0)

struct AmxTiles : Bf16Pack {
  static constexpr bool kTiles = true;
  static constexpr int kAccTiles = 4;
  using B = E;  // q and P rows as bf16: the A operands
  static void store_b(B* dst, F x) { store_e(dst, x); }

  static void configure(int rows) {
    alignas(64) TileConfig c;
    c.palette = 1;
    for (int t = 0; t < 5; ++t) c.rows[t] = static_cast<uint8_t>(rows), c.colsb[t] = 64;
    c.rows[5] = 16, c.colsb[5] = 64;
    c.rows[6] = static_cast<uint8_t>(rows), c.colsb[6] = 32;
    c.rows[7] = 8, c.colsb[7] = 64;
    _tile_loadconfig(&c);
  }

  // ct[k] (tile_rows x 16 fp32, row stride 16) = q rows (stride D) · K^T of key vector k (kt: [D/2][nkb][16][2]).
  template <int nk>
  static void qk_block(const E* q, const E* kt, int D, int nkb, float* ct) {
    static_assert(nk <= kAccTiles, "one accumulator tile per key vector");
    const size_t qs = sizeof(E) * D, ks = sizeof(E) * 32 * nkb;
#define FP8ATTN_ZERO(t) _tile_zero(t)
#define FP8ATTN_QK(t) { _tile_loadd(5, kt + (static_cast<size_t>(d / 2) * nkb + t) * 32, ks); _tile_dpbf16ps(t, 4, 5); }
#define FP8ATTN_QK_TAIL(t) { _tile_loadd(7, kt + (static_cast<size_t>(d / 2) * nkb + t) * 32, ks); _tile_dpbf16ps(t, 6, 7); }
#define FP8ATTN_STORE(t) _tile_stored(t, ct + (t) * 16 * 16, 64)
    FP8ATTN_FOR_TILES(nk, FP8ATTN_ZERO);
    int d = 0;
    for (; d + 32 <= D; d += 32) {
      _tile_loadd(4, q + d, qs);
      FP8ATTN_FOR_TILES(nk, FP8ATTN_QK);
    }
    if (d < D) {  // the last 16 of D: an 8-pair step
      _tile_loadd(6, q + d, qs);
      FP8ATTN_FOR_TILES(nk, FP8ATTN_QK_TAIL);
    }
    FP8ATTN_FOR_TILES(nk, FP8ATTN_STORE);
#undef FP8ATTN_ZERO
#undef FP8ATTN_QK
#undef FP8ATTN_QK_TAIL
#undef FP8ATTN_STORE
  }

  // o rows (stride D fp32) += P rows (16 key pairs, row stride p_row) · V (vc: [16 pairs][D][2]).
  static void pv_block(const E* p, int p_row, const E* vc, int D, float* o) {
    const size_t os = sizeof(float) * D, vs = sizeof(E) * 2 * D;
#define FP8ATTN_LOAD(t) _tile_loadd(t, o + d0 + 16 * (t), os)
#define FP8ATTN_PV(t) { _tile_loadd(5, vc + 2 * (d0 + 16 * (t)), vs); _tile_dpbf16ps(t, 4, 5); }
#define FP8ATTN_STORE(t) _tile_stored(t, o + d0 + 16 * (t), os)
    _tile_loadd(4, p, sizeof(E) * p_row);
    for (int d0 = 0; d0 < D; d0 += 16 * kAccTiles) {
      const int n = (D - d0) / 16 < kAccTiles ? (D - d0) / 16 : kAccTiles;
      FP8ATTN_FOR_TILES(n, FP8ATTN_LOAD);
      FP8ATTN_FOR_TILES(n, FP8ATTN_PV);
      FP8ATTN_FOR_TILES(n, FP8ATTN_STORE);
    }
#undef FP8ATTN_LOAD
#undef FP8ATTN_PV
#undef FP8ATTN_STORE
  }
};

using Keys = KeysKernel<Avx512Ops, AmxTiles, 1, 4, 1>;
static_assert(Keys::kPairs == 16 && Keys::kTileRows == 16, "a P tile is 16 rows of 16 key pairs");
using Amx = SimdKernel<Keys, Keys, (1 << 30)>;  // every item on the keys kernel

// The thread's tile configuration is restored after the call: other AMX code (oneDNN's GEMMs in the same
// worker) may rely on the one it loaded.
void run(const ItemArgs& a) {
  alignas(64) TileConfig saved;
  _tile_storeconfig(&saved);
  Amx::run(a);
  if (saved.palette) {
    _tile_loadconfig(&saved);
  } else {
    _tile_release();
  }
}

}  // namespace
#undef FP8ATTN_FOR_TILES

Kernel amx_kernel() { return {&Amx::scratch_bytes, &run, &Amx::encode}; }

}  // namespace fp8attn::cpu
