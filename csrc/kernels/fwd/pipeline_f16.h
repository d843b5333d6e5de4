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

#include "pipeline.h"

namespace fp8attn {

template <class Problem, int kWarps_ = 4>
struct FwdPolicyNvF16 {
  static constexpr int kWarps = kWarps_;
  static constexpr int kThreads = 32 * kWarps;
  static constexpr int kBlockM = 16 * kWarps;
  static constexpr int kBlockN = 64;
  static constexpr int kD = Problem::kHeadDim;
  static constexpr int kNTilesO = kD / 8;
  static constexpr int kChunks = kD / 16;  // 16-byte fp8 chunks per row
  static constexpr int kKSteps = kD / 16;  // k16 steps of Q.K^T
  static constexpr int kRow16 = 2 * (kD + 8);
  static constexpr int kOffQ = 0;
  static constexpr int kOffK = kOffQ + kBlockM * kRow16;
  static constexpr int kOffV = kOffK + kBlockN * kRow16;
  static constexpr int kOffStage = kOffV + kBlockN * kRow16;
  static constexpr int kStageBytes = 2 * kBlockN * kD;  // K and V of one tile
  static constexpr int kSmemBytes = kOffStage + 2 * kStageBytes;
  static constexpr Fp8Kind kFp8 = Problem::kFp8;
  using PQuant = nv::PQuant<Problem::kFp8>;
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
      const int mrow = c.m0 + r;
      uint4 codes = make_uint4(0, 0, 0, 0);
      if (mrow < c.rows) {
        const int32_t qrow = mrow / c.group, h = c.hkv * c.group + mrow % c.group;
        const int64_t off = c.seq.q_offset + static_cast<int64_t>(qrow) * p.q_row_stride +
                            static_cast<int64_t>(h) * p.q_head_stride + ch * 16;
        if (p.q_type == ElemType::FP8) {
          codes = *reinterpret_cast<const uint4*>(static_cast<const uint8_t*>(p.q) + off);
        } else {
          const float inv = 1.f / (p.q_descale ? p.q_descale[h * p.q_descale_head_stride] : 1.f);
          const uint4* src = reinterpret_cast<const uint4*>(static_cast<const uint16_t*>(p.q) + off);
          const uint4 lo = src[0], hi = src[1];
          const uint32_t w[8] = {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
          uint32_t out[4] = {0, 0, 0, 0};
#pragma unroll
          for (int e = 0; e < 16; ++e) {
            const uint16_t bits = static_cast<uint16_t>(w[e / 2] >> (16 * (e & 1)));
            const float x = p.q_type == ElemType::BF16 ? bf16_decode(bits) : fp16_decode(bits);
            out[e / 4] |= static_cast<uint32_t>(fp8_encode<kFp8>(x * inv)) << (8 * (e & 3));
          }
          codes = make_uint4(out[0], out[1], out[2], out[3]);
        }
      }
      uint32_t h[8];
      widen16(codes, h);
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

  FP8ATTN_DEVICE static void step(const BlockCtx& c, int tile, bool need_mask, const int32_t qrow[2],
                                  const LogitsTransform logits[2], const typename Policy::PQuant& pq,
                                  const uint8_t* sQ, const uint8_t* sK, const uint8_t* sV, FwdState<Policy>& st) {
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, t = lane % 4;
    float s[8][4];
#pragma unroll
    for (int j = 0; j < 8; ++j) s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.f;

    // S = Q . K^T (k16 steps over D)
    const uint8_t* qa = sQ + (warp * 16 + (lane & 7) + 8 * ((lane >> 3) & 1)) * Policy::kRow16 + 16 * (lane >> 4);
    const uint8_t* kb = sK + ((lane & 7) + 8 * (lane >> 4)) * Policy::kRow16 + 16 * ((lane >> 3) & 1);
#pragma unroll
    for (int ks = 0; ks < Policy::kKSteps; ++ks) {
      uint32_t a[4];
      nv::ldmatrix_x4(a, qa + 32 * ks);
#pragma unroll
      for (int jp = 0; jp < 4; ++jp) {
        uint32_t bf[4];
        nv::ldmatrix_x4(bf, kb + 16 * jp * Policy::kRow16 + 32 * ks);
        const uint32_t b0[2] = {bf[0], bf[1]}, b1[2] = {bf[2], bf[3]};
        nv::MmaF16::mma(s[2 * jp], a, b0);
        nv::MmaF16::mma(s[2 * jp + 1], a, b1);
      }
    }

    // logits, mask, row max. Element (j, i): row g + 8*(i>>1), key 8j + 2t + (i&1).
    constexpr float kNegInf = -INFINITY;
    float mx[2] = {kNegInf, kNegInf};
#pragma unroll
    for (int j = 0; j < 8; ++j) {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int ri = i >> 1;
        float x = logits[ri](s[j][i]);
        if (need_mask) {
          const int32_t key = tile * kBN + 8 * j + 2 * t + (i & 1);
          const bool vis = Problem::kHasMask ? c.mask.visible(qrow[ri], key) : key < c.seq.k_len;
          x = vis ? x : kNegInf;
        }
        s[j][i] = x;
        mx[ri] = fmaxf(mx[ri], x);
      }
    }
    float alpha[2], m_use[2];
#pragma unroll
    for (int ri = 0; ri < 2; ++ri) {
      mx[ri] = fmaxf(mx[ri], __shfl_xor_sync(0xffffffffu, mx[ri], 1));
      mx[ri] = fmaxf(mx[ri], __shfl_xor_sync(0xffffffffu, mx[ri], 2));
      const float m_new = fmaxf(st.m[ri], mx[ri]);
      m_use[ri] = m_new == kNegInf ? 0.f : m_new;  // nothing visible yet: p = 0, alpha = 0 (acc, l are 0)
      alpha[ri] = exp2f(st.m[ri] - m_use[ri]);
      st.m[ri] = m_new;
    }

    // P8 as f16 A fragments (k16 chunk kk = n8 tiles 2kk, 2kk+1), and l
    uint32_t pa[4][4];
    float lsum[2] = {0.f, 0.f};
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
#pragma unroll
      for (int hh = 0; hh < 2; ++hh) {
        const int j = 2 * kk + hh;
#pragma unroll
        for (int ri = 0; ri < 2; ++ri)
          pa[kk][ri + 2 * hh] = nv::quantize2_f16<kFp8>(exp2f(s[j][2 * ri] - m_use[ri]),
                                                        exp2f(s[j][2 * ri + 1] - m_use[ri]), pq.inv_p_scale,
                                                        &lsum[ri]);
      }
    }
#pragma unroll
    for (int ri = 0; ri < 2; ++ri) st.l[ri] = st.l[ri] * alpha[ri] + lsum[ri];
#pragma unroll
    for (int n = 0; n < Policy::kNTilesO; ++n) {
      st.acc[n][0] *= alpha[0];
      st.acc[n][1] *= alpha[0];
      st.acc[n][2] *= alpha[1];
      st.acc[n][3] *= alpha[1];
    }

    // O += P8 . V8 (V B fragments through ldmatrix.trans of [key][d])
    const uint8_t* vb = sV + ((lane & 7) + 8 * ((lane >> 3) & 1)) * Policy::kRow16 + 16 * (lane >> 4);
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
#pragma unroll
      for (int dp = 0; dp < Policy::kNTilesO / 2; ++dp) {
        uint32_t bf[4];
        nv::ldmatrix_x4_trans(bf, vb + 16 * kk * Policy::kRow16 + 32 * dp);
        const uint32_t b0[2] = {bf[0], bf[1]}, b1[2] = {bf[2], bf[3]};
        nv::MmaF16::mma(st.acc[2 * dp], pa[kk], b0);
        nv::MmaF16::mma(st.acc[2 * dp + 1], pa[kk], b1);
      }
    }
  }

  FP8ATTN_DEVICE static void run(const FwdParams& p, const BlockCtx& c, const int32_t qrow[2],
                                 const LogitsTransform logits[2], const typename Policy::PQuant& pq, uint8_t* smem,
                                 FwdState<Policy>& st) {
    const uint8_t* sQ = smem + Policy::kOffQ;
    uint8_t* sK = smem + Policy::kOffK;
    uint8_t* sV = smem + Policy::kOffV;
    uint8_t* stage = smem + Policy::kOffStage;
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
      step(c, tile, need_mask, qrow, logits, pq, sQ, sK, sV, st);
    }
  }
};

}  // namespace fp8attn
