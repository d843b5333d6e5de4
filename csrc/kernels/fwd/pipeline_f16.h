// The sm_90 mma.sync pipeline: FP8 operands widened to f16 in shared memory (exact: every e4m3
// value, fn or fnuz, is an f16 value and every product of two is exact in fp32), then m16n8k16 f16
// mma.sync with fp32 accumulation. On sm_90 an e4m3 mma.sync is itself lowered to f16 HMMAs plus
// per-instruction operand conversions; widening each K/V element once per block instead of once
// per MMA removes most of that conversion work. Same algorithm, tiles and quantization points as
// the e4m3 pipeline (pipeline.h), so results agree with the CPU tile for tile.
//
// Policy (FwdPolicyNvF16): 4 warps x 32 query rows (two m16 row tiles, D <= 128) or x 16, KV tile 64 keys.
// Shared memory (bytes):
//   Q16   [kBlockM][kRow16]      f16 (quantized q codes, widened)
//   K16   [kBlockN][kRow16]      f16, natural key order   (B operand of Q.K^T: ldmatrix)
//   V16   [kBlockN][kRow16]      f16, [key][d]            (B operand of P.V: ldmatrix.trans)
//   stage [2][2][kBlockN][kD]    fp8 K, V tiles in flight (cp.async), widened into K16/V16
//   keys  [kBlockM]              the rows' visible key intervals (RowKeys; read on edge tiles only)
// kRow16 = 2*(D + 8) bytes: an odd number of 16-byte chunks (conflict-free ldmatrix).
#pragma once
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "pipeline.h"

namespace fp8attn {

namespace nv {
constexpr uint32_t kOnesF16x2 = 0x3c003c00u;  // (1.0, 1.0): B operand that sums P rows into l
}  // namespace nv

template <class Problem>
struct FwdPolicyNvF16 {
  static constexpr int kD = Problem::kHeadDim;
  // Two m16 row tiles per warp where the registers allow (D <= 128): K/V fragments feed both.
  static constexpr int kMT = kD <= 128 ? 2 : 1;
  static constexpr int kWarps = 4;
  static constexpr int kThreads = 32 * kWarps;
  static constexpr int kBlockM = 16 * kMT * kWarps;
  static constexpr int kBlockN = 64;
  static constexpr int kNT = 8;  // n8 key tiles per warp per KV tile
  static constexpr int kNTilesO = kMT * kD / 8;  // accumulator fragments (all row tiles)
  static constexpr int kChunks = kD / 16;  // 16-byte fp8 chunks per row
  static constexpr int kKSteps = kD / 16;  // k16 steps of Q.K^T
  static constexpr int kRow16 = 2 * (kD + 8);
  static constexpr int kOffQ = 0;
  static constexpr int kOffK = kOffQ + kBlockM * kRow16;
  static constexpr int kOffV = kOffK + kBlockN * kRow16;
  static constexpr int kOffStage = kOffV + kBlockN * kRow16;
  static constexpr int kStageBytes = 2 * kBlockN * kD;  // K and V of one tile
  static constexpr int kOffKeys = kOffStage + 2 * kStageBytes;
  static constexpr int kSmemBytes = kOffKeys + 8 * kBlockM;
  static constexpr Fp8Kind kFp8 = Problem::kFp8;
  using PQuant = nv::PQuant<Problem::kFp8>;
  // The kernel's row / column mapping of the accumulators (one m16 tile: the m16n8 layout of Sm89Tile).
  using Tile = std::conditional_t<kMT == 2, nv::F16Tile2<kD>, nv::Sm89Tile<Problem::kFp8>>;
};

// The S accumulator s[mt][j][i] of a thread of FwdPipelineNvF16, flattened (e = 4 (kNT mt + j) + i),
// as the online softmax reads it (softmax.h): row slot 2 mt + (i >> 1), key 8j + 2t + (i & 1).
template <int kMT, int kNT>
struct F16SLayout {
  static constexpr int kSElems = 4 * kMT * kNT;
  static constexpr int kRows = 2 * kMT;
  FP8ATTN_HD static constexpr int s_row(int e) { return 2 * (e / (4 * kNT)) + ((e & 3) >> 1); }
  FP8ATTN_HD static constexpr int s_key_off(int e) { return 8 * ((e >> 2) % kNT) + (e & 1); }
};

// Row slot ri of the thread's rows in the block's RowKeys array (rows g + 8 ri of its warp's rows).
// (int2: one 8-byte shared load per row.)
template <bool kHasMask>
struct SmemRowKeys {
  const int2* row0;  // the thread's row slot 0
  FP8ATTN_DEVICE RowKeys<kHasMask> operator[](int ri) const {
    const int2 k = row0[8 * ri];
    return {k.x, k.y};
  }
};

// 16 fp8 codes (uint4) -> 8 f16x2 words (exact).
template <Fp8Kind K>
FP8ATTN_DEVICE void widen16(const uint4 v, uint32_t h[8]) {
  const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    h[2 * i] = nv::fp8x2_lo_to_half2<K>(w[i]);
    h[2 * i + 1] = nv::fp8x2_lo_to_half2<K>(w[i] >> 16);
  }
}

// The block's q rows -> Q16 [kBlockM][kRow16] at Policy::kOffQ, widened to f16.
template <class Problem, class Policy>
FP8ATTN_DEVICE void load_q16(const FwdParams& p, const BlockCtx& c, uint8_t* smem) {
  uint8_t* sQ = smem + Policy::kOffQ;
  for (int i = threadIdx.x; i < Policy::kBlockM * Policy::kChunks; i += Policy::kThreads) {
    const int r = i / Policy::kChunks, ch = i % Policy::kChunks;
    uint32_t h[8];
    widen16<Problem::kFp8>(load_q_chunk<Problem::kFp8>(p, c, r, ch), h);
    uint4* dst = reinterpret_cast<uint4*>(sQ + r * Policy::kRow16 + ch * 32);
    dst[0] = make_uint4(h[0], h[1], h[2], h[3]);
    dst[1] = make_uint4(h[4], h[5], h[6], h[7]);
  }
}

template <class Problem, class Policy>
struct FwdPipelineNvF16 {
  static constexpr int kBN = Policy::kBlockN;
  static constexpr int kD = Policy::kD;
  static constexpr int kThreads = Policy::kThreads;
  static constexpr Fp8Kind kFp8 = Problem::kFp8;

  FP8ATTN_DEVICE static void load_q(const FwdParams& p, const BlockCtx& c, uint8_t* smem) {
    load_q16<Problem, Policy>(p, c, smem);
  }

  FP8ATTN_DEVICE static void prepare(uint8_t*) {}

  // cp.async of KV tile `tile` into stage buffer `st` (keys at or past k_len zero-filled, not read).
  FP8ATTN_DEVICE static void load_kv(const FwdParams& p, const BlockCtx& c, int tile, uint8_t* st) {
    for_kv_chunks<kBN, Policy::kChunks, kThreads>(p, c, tile, [&](int r, int ch, const uint8_t* k, const uint8_t* v, bool ok) {
      nv::cp_async_16(st + r * kD + ch * 16, k, ok);
      nv::cp_async_16(st + kBN * kD + r * kD + ch * 16, v, ok);
    });
  }

  // Stage (fp8 K, V) -> K16, V16.
  FP8ATTN_DEVICE static void widen_kv(const uint8_t* st, uint8_t* sK, uint8_t* sV) {
    for (int i = threadIdx.x; i < 2 * kBN * Policy::kChunks; i += kThreads) {
      const int which = i / (kBN * Policy::kChunks), j = i % (kBN * Policy::kChunks);
      const int r = j / Policy::kChunks, ch = j % Policy::kChunks;
      const uint4 v = *reinterpret_cast<const uint4*>(st + which * kBN * kD + r * kD + ch * 16);
      uint32_t h[8];
      widen16<kFp8>(v, h);
      uint4* dst = reinterpret_cast<uint4*>((which ? sV : sK) + r * Policy::kRow16 + ch * 32);
      dst[0] = make_uint4(h[0], h[1], h[2], h[3]);
      dst[1] = make_uint4(h[4], h[5], h[6], h[7]);
    }
  }

  // One KV tile for the warp's rows. lacc: the row sums of P8 (l) accumulated by the tensor cores
  // against a ones B operand, in fp32 like acc. Row slot ri = 2*mt + h: row tile mt, half h (rows g /
  // g+8 of the tile).
  static constexpr int kMT = Policy::kMT;
  static constexpr int kR = 2 * kMT;
  static constexpr int kNO = Policy::kD / 8;  // accumulator fragments per row tile
  using SL = F16SLayout<kMT, Policy::kNT>;

  FP8ATTN_DEVICE static void step(int tile, bool need_mask, const SmemRowKeys<Problem::kHasMask>& keys,
                                  const LogitsTransform (&logits)[kR], const typename Policy::PQuant& pq,
                                  const uint8_t* sQ, const uint8_t* sK, const uint8_t* sV, FwdState<Policy>& st,
                                  float lacc[kMT][4]) {
    constexpr int kNT = Policy::kNT;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, t = lane % 4;
    const int row0 = 16 * kMT * warp;
    float s[kMT][kNT][4];
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
      for (int j = 0; j < kNT; ++j) s[mt][j][0] = s[mt][j][1] = s[mt][j][2] = s[mt][j][3] = 0.f;

    // S = Q . K^T (k16 steps over D); each K fragment feeds every row tile
    const uint8_t* qa = sQ + (row0 + (lane & 7) + 8 * ((lane >> 3) & 1)) * Policy::kRow16 + 16 * (lane >> 4);
    const uint8_t* kb = sK + ((lane & 7) + 8 * (lane >> 4)) * Policy::kRow16 + 16 * ((lane >> 3) & 1);
#pragma unroll
    for (int ks = 0; ks < Policy::kKSteps; ++ks) {
      uint32_t a[kMT][4];
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt) nv::ldmatrix_x4(a[mt], qa + 16 * mt * Policy::kRow16 + 32 * ks);
#pragma unroll
      for (int jp = 0; jp < kNT / 2; ++jp) {
        uint32_t bf[4];
        nv::ldmatrix_x4(bf, kb + 16 * jp * Policy::kRow16 + 32 * ks);
        const uint32_t b0[2] = {bf[0], bf[1]}, b1[2] = {bf[2], bf[3]};
#pragma unroll
        for (int mt = 0; mt < kMT; ++mt) {
          nv::MmaF16::mma(s[mt][2 * jp], a[mt], b0);
          nv::MmaF16::mma(s[mt][2 * jp + 1], a[mt], b1);
        }
      }
    }

    // logits, mask, row max, the online-softmax update (softmax.h)
    float mx[kR], alpha[kR], offset[kR];
    softmax_scores<SL, true>(reinterpret_cast<float(&)[SL::kSElems]>(s), logits, need_mask, tile * kBN + 2 * t, keys, mx);
#pragma unroll
    for (int ri = 0; ri < kR; ++ri) {
      const RowUpdate u = softmax_update(st.m[ri], nv::quad_max(mx[ri]), nv::Exp2Approx{});
      st.m[ri] = u.m;
      offset[ri] = u.offset;
      alpha[ri] = u.alpha;
    }
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt) {
#pragma unroll
      for (int n = 0; n < kNO; ++n) {
        st.acc[mt * kNO + n][0] *= alpha[2 * mt];
        st.acc[mt * kNO + n][1] *= alpha[2 * mt];
        st.acc[mt * kNO + n][2] *= alpha[2 * mt + 1];
        st.acc[mt * kNO + n][3] *= alpha[2 * mt + 1];
      }
      lacc[mt][0] *= alpha[2 * mt];
      lacc[mt][1] *= alpha[2 * mt];
      lacc[mt][2] *= alpha[2 * mt + 1];
      lacc[mt][3] *= alpha[2 * mt + 1];
    }

    // O += P8 . V8 (V B fragments through ldmatrix.trans of [key][d], shared by the row tiles);
    // l += P8 . 1. P8 (f16 A fragments of k16 chunk kk = n8 tiles 2kk, 2kk+1) is built per chunk.
    const uint32_t ones[2] = {nv::kOnesF16x2, nv::kOnesF16x2};
    const uint8_t* vb = sV + ((lane & 7) + 8 * ((lane >> 3) & 1)) * Policy::kRow16 + 16 * (lane >> 4);
#pragma unroll
    for (int kk = 0; kk < kNT / 2; ++kk) {
      uint32_t pa[kMT][4];
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt) {
#pragma unroll
        for (int hh = 0; hh < 2; ++hh)
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const int j = 2 * kk + hh, ri = 2 * mt + h;
            pa[mt][h + 2 * hh] = pq.quantize2_f16(nv::exp2_approx(s[mt][j][2 * h] - offset[ri]),
                                                  nv::exp2_approx(s[mt][j][2 * h + 1] - offset[ri]));
          }
        nv::MmaF16::mma(lacc[mt], pa[mt], ones);
      }
#pragma unroll
      for (int dp = 0; dp < kNO / 2; ++dp) {
        uint32_t bf[4];
        nv::ldmatrix_x4_trans(bf, vb + 16 * kk * Policy::kRow16 + 32 * dp);
        const uint32_t b0[2] = {bf[0], bf[1]}, b1[2] = {bf[2], bf[3]};
#pragma unroll
        for (int mt = 0; mt < kMT; ++mt) {
          nv::MmaF16::mma(st.acc[mt * kNO + 2 * dp], pa[mt], b0);
          nv::MmaF16::mma(st.acc[mt * kNO + 2 * dp + 1], pa[mt], b1);
        }
      }
    }
  }

  FP8ATTN_DEVICE static void run(const FwdParams& p, const BlockCtx& c, const typename Policy::PQuant& pq,
                                 uint8_t* smem, FwdState<Policy>& st) {
    const uint8_t* sQ = smem + Policy::kOffQ;
    uint8_t* sK = smem + Policy::kOffK;
    uint8_t* sV = smem + Policy::kOffV;
    uint8_t* stage = smem + Policy::kOffStage;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4;
    ThreadRows<typename Policy::Tile> rows;
    rows.init(p, c, warp, lane);
    // The rows' key intervals live in shared memory (registers are short here; read on edge tiles
    // only; published by the loop's first barrier).
    int2* sKeys = reinterpret_cast<int2*>(smem + Policy::kOffKeys);
    const SmemRowKeys<Problem::kHasMask> keys{sKeys + 16 * kMT * warp + g};
    if (lane % 4 == 0) {
      RowKeys<Problem::kHasMask> k[kR];
      rows.keys(c, k);
#pragma unroll
      for (int ri = 0; ri < kR; ++ri) sKeys[16 * kMT * warp + g + 8 * ri] = make_int2(k[ri].lo, k[ri].hi);
    }
    float lacc[kMT][4];
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt) lacc[mt][0] = lacc[mt][1] = lacc[mt][2] = lacc[mt][3] = 0.f;
    if (c.tile_begin < c.tile_end) load_kv(p, c, c.tile_begin, stage);
    nv::cp_async_commit();
    for (int tile = c.tile_begin; tile < c.tile_end; ++tile) {
      const int sidx = (tile - c.tile_begin) & 1;
      nv::cp_async_wait<0>();
      __syncthreads();  // tile landed; every warp is done with K16/V16 of the previous tile
      widen_kv(stage + sidx * Policy::kStageBytes, sK, sV);
      if (tile + 1 < c.tile_end) load_kv(p, c, tile + 1, stage + (sidx ^ 1) * Policy::kStageBytes);
      nv::cp_async_commit();
      __syncthreads();  // K16 / V16 complete
      step(tile, kv_tile_needs_mask<Problem, kBN>(c, tile), keys, rows.logits, pq, sQ, sK, sV, st, lacc);
    }
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt) {  // (every lane of a quad holds the whole row sum)
      st.l[2 * mt] = quad_share(lacc[mt][0]);
      st.l[2 * mt + 1] = quad_share(lacc[mt][2]);
    }
  }
};

}  // namespace fp8attn
