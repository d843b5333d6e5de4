// The sm_90 mma.sync pipeline: FP8 operands widened to f16 in shared memory (exact: every e4m3
// value, fn or fnuz, is an f16 value and every product of two is exact in fp32), then m16n8k16 f16
// mma.sync with fp32 accumulation. On sm_90 an e4m3 mma.sync is itself lowered to f16 HMMAs plus
// per-instruction operand conversions; widening each K/V element once per block instead of once
// per MMA removes most of that conversion work. Same algorithm, tiles and quantization points as
// the e4m3 pipeline (pipeline.h), so results agree with the CPU tile for tile.
//
// Policy (FwdPolicyNvF16): kWarps warps x 16 query rows, KV tile 64 keys.
// Shared memory (bytes):
//   Q16   [kBlockM][kRow16]      f16 (quantized q codes, widened)
//   K16   [kBlockN][kRow16]      f16, natural key order   (B operand of Q.K^T: ldmatrix)
//   V16   [kBlockN][kRow16]      f16, [key][d]            (B operand of P.V: ldmatrix.trans)
//   stage [2][2][kBlockN][kD]    fp8 K, V tiles in flight (cp.async), widened into K16/V16
// kRow16 = 2*(D + 8) bytes: an odd number of 16-byte chunks (conflict-free ldmatrix).
#pragma once
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "pipeline.h"

namespace fp8attn {

namespace nv {
constexpr uint32_t kOnesF16x2 = 0x3c003c00u;  // (1.0, 1.0): B operand that sums P rows into l

// Warp tile of two m16 row tiles (32 rows per warp): lane (g, t) owns rows g + 8*ri, ri = 0..3;
// accumulator fragment n = mt * (D/8) + j holds rows 16*mt + {g, g+8}, columns 8j + 2t + {0, 1}.
// Each K / V fragment loaded from shared memory feeds both row tiles (half the smem traffic per MMA).
template <int kD>
struct F16Tile2 {
  static constexpr int kWarpSize = 32;
  static constexpr int kRowsPerWarp = 32;
  static constexpr int kRows = 4;
  static constexpr float kInvProductScale = 1.f;
  FP8ATTN_HD static constexpr int o_frags(int d) { return 2 * d / 8; }  // n8 fragments of both row tiles
  FP8ATTN_HD static constexpr int o_cols(int d) { return d; }
  FP8ATTN_DEVICE static int row_in_warp(int lane, int ri) { return lane / 4 + 8 * ri; }
  FP8ATTN_DEVICE static bool row_leader(int lane) { return lane % 4 == 0; }
  FP8ATTN_HD static constexpr int o_row(int e) { return 2 * ((e >> 2) / (kD / 8)) + ((e & 3) >> 1); }
  FP8ATTN_DEVICE static int o_col(int lane, int e) { return 8 * ((e >> 2) % (kD / 8)) + 2 * (lane % 4) + (e & 1); }
  FP8ATTN_DEVICE static float row_sum(float x) {
    x += __shfl_xor_sync(0xffffffffu, x, 1);
    return x + __shfl_xor_sync(0xffffffffu, x, 2);
  }
};
}  // namespace nv

// kWarps_ = 4: 4 warps x 16 rows (prefill). kWarps_ = 1 (decode: at most 16 packed rows per
// (batch, kv head)): one 16-row block whose 4 warps split each 64-key tile (16 keys each), sharing
// the tile's row max through shared memory and summing acc / l at the end -- the same tile
// semantics as the CPU (one m_new per tile), a quarter of the MMA work per warp, 4x the blocks.
template <class Problem, int kWarps_ = 4>
struct FwdPolicyNvF16 {
  static constexpr bool kSplitN = kWarps_ == 1;
  static constexpr int kD = Problem::kHeadDim;
  // Two m16 row tiles per warp where the registers allow (D <= 128): K/V fragments feed both.
  static constexpr int kMT = (!kSplitN && kD <= 128) ? 2 : 1;
  static constexpr int kWarps = 4;
  static constexpr int kThreads = 32 * kWarps;
  static constexpr int kBlockM = kSplitN ? 16 : 16 * kMT * kWarps;
  static constexpr int kBlockN = 64;
  static constexpr int kNT = kSplitN ? 2 : 8;  // n8 key tiles per warp per KV tile
  static constexpr int kNTilesO = kMT * kD / 8;  // accumulator fragments (all row tiles)
  static constexpr int kChunks = kD / 16;  // 16-byte fp8 chunks per row
  static constexpr int kKSteps = kD / 16;  // k16 steps of Q.K^T
  static constexpr int kRow16 = 2 * (kD + 8);
  static constexpr int kOffQ = 0;
  static constexpr int kOffK = kOffQ + kBlockM * kRow16;
  static constexpr int kOffV = kOffK + kBlockN * kRow16;
  static constexpr int kOffStage = kOffV + kBlockN * kRow16;
  static constexpr int kStageBytes = 2 * kBlockN * kD;  // K and V of one tile
  static constexpr int kOffRed = kOffStage + 2 * kStageBytes;  // split-N: per-warp row maxima
  static constexpr int kOffLoHi = kOffRed + (kSplitN ? 4 * kWarps * 16 : 0);  // visible key range per row
  static constexpr int kSmemBytes = kOffLoHi + 8 * kBlockM;
  static_assert(!kSplitN || (kWarps - 1) * 32 * (kNTilesO * 4 + 4) * 4 <= kOffRed - kOffK,
                "split-N: the final cross-warp sum must fit in the K/V buffers");
  static constexpr Fp8Kind kFp8 = Problem::kFp8;
  using PQuant = nv::PQuant<Problem::kFp8>;
  // The kernel's row / column mapping of the accumulators (one m16 tile: the m16n8 layout of Sm89Tile).
  using Tile = std::conditional_t<kMT == 2, nv::F16Tile2<kD>, nv::Sm89Tile<Problem::kFp8>>;
};

template <class Problem, class Policy>
struct FwdPipelineNvF16 {
  static constexpr int kBN = Policy::kBlockN;
  static constexpr int kD = Policy::kD;
  static constexpr int kThreads = Policy::kThreads;
  static constexpr Fp8Kind kFp8 = Problem::kFp8;

  // 16 fp8 codes (uint4) -> 8 f16x2 words.
  FP8ATTN_DEVICE static void widen16(const uint4 v, uint32_t h[8]) {
    const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      h[2 * i] = nv::fp8x2_lo_to_half2<kFp8>(w[i]);
      h[2 * i + 1] = nv::fp8x2_lo_to_half2<kFp8>(w[i] >> 16);
    }
  }

  FP8ATTN_DEVICE static void load_q(const FwdParams& p, const BlockCtx& c, uint8_t* smem) {
    uint8_t* sQ = smem + Policy::kOffQ;
    for (int i = threadIdx.x; i < Policy::kBlockM * Policy::kChunks; i += kThreads) {
      const int r = i / Policy::kChunks, ch = i % Policy::kChunks;
      uint32_t h[8];
      widen16(load_q_chunk<kFp8>(p, c, r, ch), h);
      uint4* dst = reinterpret_cast<uint4*>(sQ + r * Policy::kRow16 + ch * 32);
      dst[0] = make_uint4(h[0], h[1], h[2], h[3]);
      dst[1] = make_uint4(h[4], h[5], h[6], h[7]);
    }
  }

  FP8ATTN_DEVICE static void prepare(uint8_t*) {}

  // cp.async of KV tile `tile` into stage buffer `st` (keys at or past k_len zero-filled, not read).
  FP8ATTN_DEVICE static void load_kv(const FwdParams& p, const BlockCtx& c, int tile, uint8_t* st) {
    const uint8_t* kbase = static_cast<const uint8_t*>(p.k) + static_cast<int64_t>(c.hkv) * p.k_head_stride;
    const uint8_t* vbase = static_cast<const uint8_t*>(p.v) + static_cast<int64_t>(c.hkv) * p.v_head_stride;
    for (int i = threadIdx.x; i < kBN * Policy::kChunks; i += kThreads) {
      const int r = i / Policy::kChunks, ch = i % Policy::kChunks;
      const int32_t key = tile * kBN + r;
      const bool ok = key < c.seq.k_len;
      const int64_t koff = ok ? c.seq.key_offset(p, key, false) : 0;
      const int64_t voff = ok ? c.seq.key_offset(p, key, true) : 0;
      nv::cp_async_16(st + r * kD + ch * 16, kbase + koff + ch * 16, ok);
      nv::cp_async_16(st + kBN * kD + r * kD + ch * 16, vbase + voff + ch * 16, ok);
    }
  }

  // Stage (fp8 K, V) -> K16, V16.
  FP8ATTN_DEVICE static void widen_kv(const uint8_t* st, uint8_t* sK, uint8_t* sV) {
    for (int i = threadIdx.x; i < 2 * kBN * Policy::kChunks; i += kThreads) {
      const int which = i / (kBN * Policy::kChunks), j = i % (kBN * Policy::kChunks);
      const int r = j / Policy::kChunks, ch = j % Policy::kChunks;
      const uint4 v = *reinterpret_cast<const uint4*>(st + which * kBN * kD + r * kD + ch * 16);
      uint32_t h[8];
      widen16(v, h);
      uint4* dst = reinterpret_cast<uint4*>((which ? sV : sK) + r * Policy::kRow16 + ch * 32);
      dst[0] = make_uint4(h[0], h[1], h[2], h[3]);
      dst[1] = make_uint4(h[4], h[5], h[6], h[7]);
    }
  }

  // P -> FP8 code -> its exact f16 value, two at a time (lo = p0).
  FP8ATTN_DEVICE static uint32_t quant2(float p0, float p1, float inv_p_scale) {
#if FP8ATTN_NV_FP8_MMA
    if constexpr (kFp8 == Fp8Kind::E4M3FN) {
      uint16_t c;
      uint32_t h;
      asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;\n" : "=h"(c) : "f"(p1 * inv_p_scale), "f"(p0 * inv_p_scale));
      asm("cvt.rn.f16x2.e4m3x2 %0, %1;\n" : "=r"(h) : "h"(c));
      return h;
    } else
#endif
    {
      const uint32_t c = static_cast<uint32_t>(fp8_encode<kFp8>(p0 * inv_p_scale)) |
                         (static_cast<uint32_t>(fp8_encode<kFp8>(p1 * inv_p_scale)) << 8);
      return nv::fp8x2_to_half2<kFp8>(c, false);
    }
  }

  // One KV tile for the warp's rows (split-N: for the warp's 16 keys of the tile). lacc: the row
  // sums of P8 (l) accumulated by the tensor cores against a ones B operand, in fp32 like acc.
  // Row slot ri = 2*mt + h: row tile mt, half h (rows g / g+8 of the tile).
  static constexpr int kMT = Policy::kMT;
  static constexpr int kR = 2 * kMT;
  static constexpr int kNO = Policy::kD / 8;  // accumulator fragments per row tile

  FP8ATTN_DEVICE static void step(int tile, bool need_mask, const int2* sLoHi, const LogitsTransform logits[kR], const typename Policy::PQuant& pq,
                                  const uint8_t* sQ, const uint8_t* sK, const uint8_t* sV, float* sRed,
                                  FwdState<Policy>& st, float lacc[kMT][4]) {
    constexpr int kNT = Policy::kNT;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    const int key0 = Policy::kSplitN ? 16 * warp : 0;
    const int row0 = Policy::kSplitN ? 0 : 16 * kMT * warp;
    float s[kMT][kNT][4];
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
      for (int j = 0; j < kNT; ++j) s[mt][j][0] = s[mt][j][1] = s[mt][j][2] = s[mt][j][3] = 0.f;

    // S = Q . K^T (k16 steps over D); each K fragment feeds every row tile
    const uint8_t* qa = sQ + (row0 + (lane & 7) + 8 * ((lane >> 3) & 1)) * Policy::kRow16 + 16 * (lane >> 4);
    const uint8_t* kb = sK + (key0 + (lane & 7) + 8 * (lane >> 4)) * Policy::kRow16 + 16 * ((lane >> 3) & 1);
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

    // logits (the softcap branch hoisted out of the element loop), mask, row max.
    // Element (mt, j, i): row slot 2mt + (i>>1), key key0 + 8j + 2t + (i&1).
    constexpr float kNegInf = -INFINITY;
    if (logits[0].has_softcap) {
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
        for (int j = 0; j < kNT; ++j)
#pragma unroll
          for (int i = 0; i < 4; ++i) s[mt][j][i] = logits[2 * mt + (i >> 1)](s[mt][j][i]);
    } else {
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
        for (int j = 0; j < kNT; ++j)
#pragma unroll
          for (int i = 0; i < 4; ++i) s[mt][j][i] *= logits[2 * mt + (i >> 1)].scale_log2;
    }
    float mx[kR];
#pragma unroll
    for (int ri = 0; ri < kR; ++ri) mx[ri] = kNegInf;
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
      for (int j = 0; j < kNT; ++j)
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const int ri = 2 * mt + (i >> 1);
          if (need_mask) {  // the row's visible keys are [lo, hi) (Mask::visible, precomputed)
            const int32_t key = tile * kBN + key0 + 8 * j + 2 * t + (i & 1);
            const int2 r = sLoHi[row0 + 16 * mt + g + 8 * (i >> 1)];
            s[mt][j][i] = (key >= r.x && key < r.y) ? s[mt][j][i] : kNegInf;
          }
          mx[ri] = fmaxf(mx[ri], s[mt][j][i]);
        }
#pragma unroll
    for (int ri = 0; ri < kR; ++ri) {
      mx[ri] = fmaxf(mx[ri], __shfl_xor_sync(0xffffffffu, mx[ri], 1));
      mx[ri] = fmaxf(mx[ri], __shfl_xor_sync(0xffffffffu, mx[ri], 2));
    }
    if constexpr (Policy::kSplitN) {  // the tile's row max over the 4 warps' keys
      if (t == 0) {
        sRed[warp * 16 + g] = mx[0];
        sRed[warp * 16 + g + 8] = mx[1];
      }
      __syncthreads();
#pragma unroll
      for (int ri = 0; ri < 2; ++ri)
#pragma unroll
        for (int w = 0; w < Policy::kWarps; ++w) mx[ri] = fmaxf(mx[ri], sRed[w * 16 + g + 8 * ri]);
    }
    float alpha[kR], m_use[kR];
#pragma unroll
    for (int ri = 0; ri < kR; ++ri) {
      const float m_new = fmaxf(st.m[ri], mx[ri]);
      m_use[ri] = m_new == kNegInf ? 0.f : m_new;  // nothing visible yet: p = 0, alpha = 0 (acc, l are 0)
      alpha[ri] = nv::exp2_approx(st.m[ri] - m_use[ri]);
      st.m[ri] = m_new;
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
    const uint8_t* vb = sV + (key0 + (lane & 7) + 8 * ((lane >> 3) & 1)) * Policy::kRow16 + 16 * (lane >> 4);
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
            pa[mt][h + 2 * hh] = quant2(nv::exp2_approx(s[mt][j][2 * h] - m_use[ri]),
                                        nv::exp2_approx(s[mt][j][2 * h + 1] - m_use[ri]), pq.inv_p_scale);
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

  FP8ATTN_DEVICE static void run(const FwdParams& p, const BlockCtx& c, const int32_t qrow_in[kR],
                                 const LogitsTransform logits_in[kR], const typename Policy::PQuant& pq, uint8_t* smem,
                                 FwdState<Policy>& st) {
    const uint8_t* sQ = smem + Policy::kOffQ;
    uint8_t* sK = smem + Policy::kOffK;
    uint8_t* sV = smem + Policy::kOffV;
    uint8_t* stage = smem + Policy::kOffStage;
    float* sRed = reinterpret_cast<float*>(smem + Policy::kOffRed);
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4;
    int32_t qrow[kR];
    LogitsTransform logits[kR];
#pragma unroll
    for (int ri = 0; ri < kR; ++ri) {
      qrow[ri] = qrow_in[ri];
      logits[ri] = logits_in[ri];
    }
    if constexpr (Policy::kSplitN) {  // every warp works on the block's 16 rows (the kernel gave warp w rows 16w..)
      const float k_descale = p.k_descale ? p.k_descale[c.hkv * p.k_descale_head_stride] : 1.f;
#pragma unroll
      for (int ri = 0; ri < 2; ++ri) {
        const int32_t mr = min(c.m0 + g + 8 * ri, c.rows - 1);
        qrow[ri] = c.q_row(p, mr);
        const int32_t h = c.q_head(mr, qrow[ri]);
        const float q_descale = p.q_descale ? p.q_descale[h * p.q_descale_head_stride] : 1.f;
        logits[ri] = LogitsTransform::make(p.softmax_scale, q_descale * k_descale, p.softcap);
      }
    }
    // Row r of the block sees keys [lo, hi): Mask::visible as an interval, kept in shared memory
    // (read on edge tiles only; published by the loop's first barrier).
    int2* sLoHi = reinterpret_cast<int2*>(smem + Policy::kOffLoHi);
    if (lane % 4 == 0 && (!Policy::kSplitN || warp == 0)) {
#pragma unroll
      for (int ri = 0; ri < kR; ++ri) {
        int64_t l = 0, h = c.seq.k_len;
        if (Problem::kHasMask) {
          const int64_t base = static_cast<int64_t>(qrow[ri]) + c.mask.shift;
          if (c.mask.left >= 0) l = base - c.mask.left > 0 ? base - c.mask.left : 0;
          if (c.mask.right >= 0) h = base + c.mask.right + 1 < h ? base + c.mask.right + 1 : h;
        }
        const int32_t lo = static_cast<int32_t>(l < c.seq.k_len ? l : c.seq.k_len);
        sLoHi[(Policy::kSplitN ? 0 : 16 * kMT * warp) + g + 8 * ri] = make_int2(lo, static_cast<int32_t>(h > lo ? h : lo));
      }
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
      const int k0 = tile * kBN;
      const bool need_mask = Problem::kHasMask ? !c.mask.tile_fully_visible(c.qrow0, c.qrow1, k0, k0 + kBN)
                                               : k0 + kBN > c.seq.k_len;
      step(tile, need_mask, sLoHi, logits, pq, sQ, sK, sV, sRed, st, lacc);
    }
    if constexpr (Policy::kSplitN) {  // sum the warps' partial acc / l (same m sequence) into warp 0
      constexpr int kW = Policy::kNTilesO * 4 + 4;
      float* red = reinterpret_cast<float*>(smem + Policy::kOffK);
      __syncthreads();
      if (warp > 0) {
        float* dst = red + ((warp - 1) * 32 + lane) * kW;
#pragma unroll
        for (int n = 0; n < Policy::kNTilesO; ++n)
#pragma unroll
          for (int i = 0; i < 4; ++i) dst[4 * n + i] = st.acc[n][i];
#pragma unroll
        for (int i = 0; i < 4; ++i) dst[Policy::kNTilesO * 4 + i] = lacc[0][i];
      }
      __syncthreads();
      if (warp == 0) {
#pragma unroll
        for (int w = 1; w < Policy::kWarps; ++w) {
          const float* src = red + ((w - 1) * 32 + lane) * kW;
#pragma unroll
          for (int n = 0; n < Policy::kNTilesO; ++n)
#pragma unroll
            for (int i = 0; i < 4; ++i) st.acc[n][i] += src[4 * n + i];
#pragma unroll
          for (int i = 0; i < 4; ++i) lacc[0][i] += src[Policy::kNTilesO * 4 + i];
        }
      }
    }
    // Every lane of a quad holds the whole row sum; the kernel's epilogue sums the quad
    // (Tile::row_sum), so hand it a quarter (exact: a power of two).
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt) {
      st.l[2 * mt] = 0.25f * lacc[mt][0];
      st.l[2 * mt + 1] = 0.25f * lacc[mt][2];
    }
  }
};

}  // namespace fp8attn
