// The AMX kernel: kernel_simd.h's KeysKernel (every item, decode and prefill) with its two products, q·k
// and P·V, as AMX bf16 tile products (tdpbf16ps) on FP8 values widened to bf16 (exact, pack_vbmi.h's byte
// lookups), the rest (the online softmax, P's quantization, masks, the epilogue) the AVX-512 code the
// other kernels run. Unlike them it does not give the scalar oracle's bits: a tile product sums its 32
// products in the hardware's own order and precision (docs/cpu.md, "The AMX kernel"), so it agrees with
// the oracle to rounding, as the GPU's tensor-core pipelines do, and the tests hold it to their bounds.
//
// Tiles: 0-3 accumulators (S or O, tile_rows x 16 fp32), 4 the A operand (q or P rows: tile_rows x 32 bf16),
// 5 the B operand (K^T or V: 16 pair rows x 16 columns x 2 bf16), 6 and 7 A and B of a head dim's last 16
// when it is not a multiple of 32 (80, 112). Items whose groups have fewer lanes than a tile has rows (decode)
// compute S^T = K·Q^T instead (KeysKernel's key_rows): 5 the key rows (A), 6 the lanes' q^T (B), 7 S^T.
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

  // key_rows: tiles 5-7 hold S^T = K·Q^T's operands and result (16 x 64 bytes each) instead of q·K^T's D tail.
  static void configure(int rows, bool key_rows) {
    alignas(64) TileConfig c;
    c.palette = 1;
    for (int t = 0; t < 5; ++t) c.rows[t] = static_cast<uint8_t>(rows), c.colsb[t] = 64;
    c.rows[5] = 16, c.colsb[5] = 64;
    c.rows[6] = static_cast<uint8_t>(key_rows ? 16 : rows), c.colsb[6] = key_rows ? 64 : 32;
    c.rows[7] = key_rows ? 16 : 8, c.colsb[7] = 64;
    _tile_loadconfig(&c);
  }

  // S^T = K·Q^T for nk key vectors: ct[k] (16 keys x 16 lanes fp32) = key rows 16k.. (kr: [key][dp] bf16, zero
  // past D) · the lanes' q^T (qt: [dp/2][16][2]); A = tile 5, B = tile 6, the result tile 7.
  template <int nk>
  static void qkt_block(const E* kr, int dp, const E* qt, float* ct) {
    const size_t ks = sizeof(E) * dp;
    for (int k = 0; k < nk; ++k) {
      _tile_zero(7);
      for (int d = 0; d < dp; d += 32) {
        _tile_loadd(5, kr + static_cast<size_t>(k) * 16 * dp + d, ks);
        _tile_loadd(6, qt + static_cast<size_t>(d) * 16, 64);
        _tile_dpbf16ps(7, 5, 6);
      }
      _tile_stored(7, ct + k * 16 * 16, 64);
    }
  }
  // Lane n's results of 16 keys (column n of a 16 x 16 result).
  static F column(const float* c, int n) {
    return _mm512_i32gather_ps(_mm512_mullo_epi32(_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
                                                  _mm512_set1_epi32(16)), c + n, 4);
  }
  // The B operand of S^T: q rows (n of them, stride D) -> [dp/2 pairs][16 lanes][2], lanes past n and pairs
  // past D zero.
  static void pack_qt(const E* q, int n, int D, int dp, E* qt) {
    for (int d0 = 0; d0 < dp; d0 += 32) {
      const __mmask32 m = words_mask(D - d0);
      __m512i r[16];
      for (int i = 0; i < 16; ++i) r[i] = i < n ? _mm512_maskz_loadu_epi16(m, q + static_cast<size_t>(i) * D + d0) : _mm512_setzero_si512();
      Avx512Ops::transpose(r);
      for (int c = 0; c < 16; ++c) _mm512_storeu_si512(qt + static_cast<size_t>(d0 / 2 + c) * 32, r[c]);
    }
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
