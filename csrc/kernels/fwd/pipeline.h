// The block Pipeline of the forward pass (ck_tile style): the KV loop of one block of packed
// query rows, on fp8 operands, for every atom family (the warp tile Policy::Tile: NVIDIA
// mma.sync m16n8k32, AMD MFMA 32x32x16 -- see arch/select.h). Per KV tile of kBlockN keys, in
// ascending key order (the order fixes where P is quantized, so it matches the CPU implementation
// tile for tile):
//   S = q8 . k8^T (fp32, fp8 mma)  ->  s = LogitsTransform(S), -inf where masked
//   m_new = max(m, rowmax s); alpha = exp2(m - m_new); p = exp2(s - m_new)
//   p8 = sat(p / p_scale) (PQuantize);  l = l*alpha + sum p8;  acc = acc*alpha + p8 . v8
// (the per-row math of softmax.h). The loop knows nothing about layouts (BlockCtx addresses keys)
// or the output (the Epilogue).
//
// The Pipeline interface (every pipeline's, the kernel's only calls): load_q(p, c, smem),
// prepare(smem), run(p, c, pq, smem, st) -- the block's KV tiles into st (acc, m, l in the layout of
// Policy::Tile, which the epilogue reads); each pipeline derives the rows its own lanes own in the
// loop (ThreadRows of its layout: the Tile's, or another one as decode's) and their LoopRows.
#pragma once
#include <cmath>
#include <cstdint>

#include "../mask.h"
#include "../scales.h"
#include "../seqinfo.h"
#include "../variant.h"
#include "policy.h"
#include "softmax.h"

namespace fp8attn {

// 16 consecutive q elements at element offset `off` as FP8 codes: an FP8 q as is, a 16-bit q
// quantized with its head's descale (times the fp32 reciprocal, as every implementation does).
template <Fp8Kind K>
FP8ATTN_DEVICE uint4 load_q16_codes(const FwdParams& p, int64_t off, int32_t h) {
  if (p.q_type == ElemType::FP8) return *reinterpret_cast<const uint4*>(static_cast<const uint8_t*>(p.q) + off);
  const float inv = inv_q_descale_of(p, h);
  const uint4* src = reinterpret_cast<const uint4*>(static_cast<const uint16_t*>(p.q) + off);
  const uint4 lo = src[0], hi = src[1];
  const uint32_t w[8] = {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
  uint32_t out[4] = {0, 0, 0, 0};
#pragma unroll
  for (int e = 0; e < 16; ++e) {
    const uint16_t bits = static_cast<uint16_t>(w[e / 2] >> (16 * (e & 1)));
    const float x = p.q_type == ElemType::BF16 ? bf16_decode(bits) : fp16_decode(bits);
    out[e / 4] |= static_cast<uint32_t>(fp8_encode<K>(x * inv)) << (8 * (e & 3));
  }
  return make_uint4(out[0], out[1], out[2], out[3]);
}


// What the Kernel tells the Pipeline about its block: the sequence, its rows and the tile range.
struct BlockCtx {
  SeqInfo seq;
  Mask mask;
  int32_t b, hkv, group;      // batch, kv head, q heads per kv head
  int32_t rows;               // packed rows of this (b, hkv): q_len * group
  int32_t m0;                 // first packed row of the block
  int32_t qrow0, qrow1;       // query rows the block touches [qrow0, qrow1)
  int32_t split;                 // KV split index (0 when not split)
  int32_t tile_begin, tile_end;  // KV tiles this block (split) processes

  // Packed row m: q row m / G of q head hkv * G + m % G (GQA packing, kernel.h).
  FP8ATTN_DEVICE int32_t q_row(const FwdParams& p, int32_t m) const { return p.div_group.div(m); }
  FP8ATTN_DEVICE int32_t q_head(int32_t m, int32_t qrow) const { return hkv * group + (m - qrow * group); }
};

// Chunk `ch` of packed row `r` of the block -- q row r / G of q head hkv * G + r % G (GQA
// packing, see kernel.h): its element offset in q and its q head; false past the block's rows.
FP8ATTN_DEVICE bool q_chunk_offset(const FwdParams& p, const BlockCtx& c, int r, int ch, int64_t* off, int32_t* h) {
  const int mrow = c.m0 + r;
  if (mrow >= c.rows) return false;
  const int32_t qrow = c.q_row(p, mrow);
  *h = c.q_head(mrow, qrow);
  *off = c.seq.q_offset + static_cast<int64_t>(qrow) * p.q_row_stride + static_cast<int64_t>(*h) * p.q_head_stride +
         ch * 16;
  return true;
}
// The 16 FP8 codes of that chunk (zeros past the block's rows), quantized when q is 16-bit.
template <Fp8Kind K>
FP8ATTN_DEVICE uint4 load_q_chunk(const FwdParams& p, const BlockCtx& c, int r, int ch) {
  int64_t off;
  int32_t h;
  if (!q_chunk_offset(p, c, r, ch, &off, &h)) return make_uint4(0, 0, 0, 0);
  return load_q16_codes<K>(p, off, h);
}

// The rows one thread owns (lane of row-owning warp `warp`; Layout: kRows, kRowsPerWarp,
// row_in_warp, kInvProductScale), their heads and logits transforms (scales are per q head / kv
// head). The atom's products may come out scaled by a power of two (Layout::kInvProductScale undoes
// it, exactly: see arch/amd_mfma.h); it is folded into the QK scale here and into the O scale by
// store_rows.
template <class Layout>
struct ThreadRows {
  static constexpr int kR = Layout::kRows;
  int32_t mrow[kR], qrow[kR], head[kR];
  LogitsTransform logits[kR];

  FP8ATTN_DEVICE void init(const FwdParams& p, const BlockCtx& c, int warp, int lane) {
    const float k_descale = k_descale_of(p, c.hkv);
#pragma unroll
    for (int ri = 0; ri < kR; ++ri) {
      mrow[ri] = c.m0 + warp * Layout::kRowsPerWarp + Layout::row_in_warp(lane, ri);
      const int32_t mr = min(mrow[ri], c.rows - 1);
      qrow[ri] = c.q_row(p, mr);
      head[ri] = c.q_head(mr, qrow[ri]);
      const float q_descale = q_descale_of(p, head[ri]);
      logits[ri] = LogitsTransform::make(p.softmax_scale, q_descale * k_descale * Layout::kInvProductScale, p.softcap);
    }
  }
  // The keys each row sees (the mask's row interval).
  template <bool kHasMask>
  FP8ATTN_DEVICE void keys(const BlockCtx& c, RowKeys<kHasMask> (&k)[kR]) const {
#pragma unroll
    for (int ri = 0; ri < kR; ++ri) k[ri] = RowKeys<kHasMask>::of(c.mask, qrow[ri]);
  }
};

// Whether KV tile `tile` of kBlockN keys needs per-element masking for the block's rows.
template <class Problem, int kBlockN>
FP8ATTN_DEVICE bool kv_tile_needs_mask(const BlockCtx& c, int tile) {
  return tile_needs_mask<Problem::kHasMask>(c.mask, c.qrow0, c.qrow1, tile * kBlockN, (tile + 1) * kBlockN);
}

// The 16-byte chunks of KV tile `tile` (kBN keys x kChunks), spread over kThreads threads:
// copy(r, ch, k, v, ok) for chunk ch of the tile's key r, k / v its global addresses; keys at or past
// k_len have ok = false and are never read (their cache slots may hold anything).
template <int kBN, int kChunks, int kThreads, class Copy>
FP8ATTN_DEVICE void for_kv_chunks(const FwdParams& p, const BlockCtx& c, int tile, Copy copy) {
  const uint8_t* kbase = static_cast<const uint8_t*>(p.k) + static_cast<int64_t>(c.hkv) * p.k_head_stride;
  const uint8_t* vbase = static_cast<const uint8_t*>(p.v) + static_cast<int64_t>(c.hkv) * p.v_head_stride;
  for (int i = threadIdx.x; i < kBN * kChunks; i += kThreads) {
    const int r = i / kChunks, ch = i % kChunks;
    const int32_t key = tile * kBN + r;
    const bool ok = key < c.seq.k_len;
    const int64_t koff = ok ? c.seq.key_offset(p, key, false) : 0;
    const int64_t voff = ok ? c.seq.key_offset(p, key, true) : 0;
    copy(r, ch, kbase + koff + ch * 16, vbase + voff + ch * 16, ok);
  }
}

// Per-thread state: lane `lane` of warp w owns packed rows
// m0 + w * Tile::kRowsPerWarp + Tile::row_in_warp(lane, ri), ri < Tile::kRows (NVIDIA: g, g + 8).
template <class Policy>
struct FwdState {
  float acc[Policy::kNTilesO][4];
  float m[Policy::Tile::kRows], l[Policy::Tile::kRows];
};

template <class Problem, class Policy>
struct FwdPipeline {
  static constexpr int kBN = Policy::kBlockN;
  static constexpr int kD = Policy::kD;
  static constexpr int kThreads = Policy::kThreads;
  using Tile = typename Policy::Tile;
  static constexpr int kR = Tile::kRows;

  // ---- loads -------------------------------------------------------------------------------
  // q rows of the block -> shared memory as fp8 codes (quantized with 1/q_descale when 16-bit).
  FP8ATTN_DEVICE static void load_q(const FwdParams& p, const BlockCtx& c, uint8_t* smem) {
    uint8_t* sQ = smem + Policy::kOffQ;
    for (int i = threadIdx.x; i < Policy::kBlockM * (Policy::kDPad / 16); i += kThreads) {
      const int r = i / (Policy::kDPad / 16), ch = i % (Policy::kDPad / 16);
      const uint4 val = ch < Policy::kChunks ? load_q_chunk<Problem::kFp8>(p, c, r, ch) : make_uint4(0, 0, 0, 0);
      *reinterpret_cast<uint4*>(sQ + r * Policy::kRowStride + ch * 16) = val;
    }
  }

  // Zero the K pad columns [D, DPad) of every stage once (the copies never write them).
  FP8ATTN_DEVICE static void prepare(uint8_t* smem) {
    uint8_t* sK = smem + Policy::kOffK;
    if constexpr (Policy::kDPad != kD) {
      constexpr int kPadChunks = (Policy::kDPad - kD) / 16;
      for (int i = threadIdx.x; i < Policy::kStages * kBN * kPadChunks; i += kThreads) {
        const int r = i / kPadChunks, ch = i % kPadChunks;
        *reinterpret_cast<uint4*>(sK + r * Policy::kRowStride + kD + ch * 16) = make_uint4(0, 0, 0, 0);
      }
    }
  }

  // Issue the copies of KV tile `tile` (K rows permuted, V rows natural); keys at or past
  // k_len are zero-filled and never read from memory (their cache slots may hold anything).
  FP8ATTN_DEVICE static void load_kv(const FwdParams& p, const BlockCtx& c, int tile, uint8_t* sK, uint8_t* sV) {
    for_kv_chunks<kBN, Policy::kChunks, kThreads>(p, c, tile, [&](int r, int ch, const uint8_t* k, const uint8_t* v, bool ok) {
      Tile::copy16(sK + Tile::k_row(r) * Policy::kRowStride + ch * 16, k, ok);
      Tile::copy16(sV + r * Policy::kRowStride + ch * 16, v, ok);
    });
  }

  // Vraw [key][d] -> Vt [d][key] in 4x4 byte blocks (lane -> 4-key block kb, 16-d chunk dc).
  FP8ATTN_DEVICE static void transpose_v(const uint8_t* sV, uint8_t* sVt) {
    for (int i = threadIdx.x; i < (kBN / 4) * Policy::kChunks; i += kThreads) {
      const int kb = i % (kBN / 4), dc = i / (kBN / 4);
      uint32_t x[4][4];
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        const uint4 v = *reinterpret_cast<const uint4*>(sV + (4 * kb + r) * Policy::kRowStride + 16 * dc);
        x[r][0] = v.x;
        x[r][1] = v.y;
        x[r][2] = v.z;
        x[r][3] = v.w;
      }
#pragma unroll
      for (int w = 0; w < 4; ++w) {
        const uint32_t in[4] = {x[0][w], x[1][w], x[2][w], x[3][w]};
        uint32_t out[4];
        Tile::transpose4x4_bytes(in, out);
#pragma unroll
        for (int e = 0; e < 4; ++e)
          *reinterpret_cast<uint32_t*>(sVt + (16 * dc + 4 * w + e) * Policy::kVtStride + 4 * kb) = out[e];
      }
    }
  }

  // ---- one KV tile --------------------------------------------------------------------------
  // need_mask: this tile has invisible elements (the rows' keys: the thread's row intervals).
  FP8ATTN_DEVICE static void step(int tile, bool need_mask, const LogitsTransform (&logits)[kR],
                                  const RowKeys<Problem::kHasMask> (&keys)[kR], const typename Policy::PQuant& pq,
                                  const uint8_t* sQ, const uint8_t* sK, const uint8_t* sVt, FwdState<Policy>& st) {
    const int warp = threadIdx.x / Tile::kWarpSize, lane = threadIdx.x % Tile::kWarpSize;
    // S = Q . K^T
    float s[Tile::kSElems];
    Tile::template qk<Policy>(s, sQ, sK, warp, lane);

    // logits, mask, row max, the online-softmax update
    float mx[kR], alpha[kR], offset[kR];
    softmax_scores<Tile, false>(s, logits, need_mask, tile * kBN + Tile::s_key_base(lane), keys, mx);
#pragma unroll
    for (int ri = 0; ri < kR; ++ri) {
      const RowUpdate u = softmax_update(st.m[ri], Tile::row_max(mx[ri]), Exp2Precise{});
      st.m[ri] = u.m;
      offset[ri] = u.offset;
      alpha[ri] = u.alpha;
    }

    // P quantization into the P.V operand words; l
    uint32_t pa[Tile::kPWords];
    float lsum[kR];
#pragma unroll
    for (int ri = 0; ri < kR; ++ri) lsum[ri] = 0.f;
#pragma unroll
    for (int w = 0; w < Tile::kPWords; ++w) {
      const int ri = Tile::p_row(w);
      float pv[4], v8[4];
#pragma unroll
      for (int b = 0; b < 4; ++b) pv[b] = exp2f(s[Tile::p_src(w, b)] - offset[ri]);
      pa[w] = pq.quantize4(pv, v8);
      lsum[ri] += (v8[0] + v8[1]) + (v8[2] + v8[3]);
    }
#pragma unroll
    for (int ri = 0; ri < kR; ++ri) st.l[ri] = st.l[ri] * alpha[ri] + lsum[ri];
#pragma unroll
    for (int n = 0; n < Policy::kNTilesO; ++n) {
#pragma unroll
      for (int i = 0; i < 4; ++i) st.acc[n][i] *= alpha[Tile::o_row(4 * n + i)];
    }

    // O += P8 . V8
    Tile::template pv<Policy>(st.acc, pa, sVt, lane);
  }

  // ---- the loop ------------------------------------------------------------------------------
  FP8ATTN_DEVICE static void run(const FwdParams& p, const BlockCtx& c, const typename Policy::PQuant& pq,
                                 uint8_t* smem, FwdState<Policy>& st) {
    uint8_t* sQ = smem + Policy::kOffQ;
    uint8_t* sK = smem + Policy::kOffK;
    uint8_t* sV = smem + Policy::kOffV;
    uint8_t* sVt = smem + Policy::kOffVt;
    ThreadRows<Tile> rows;
    rows.init(p, c, threadIdx.x / Tile::kWarpSize, threadIdx.x % Tile::kWarpSize);
    RowKeys<Problem::kHasMask> keys[kR];
    rows.keys(c, keys);
    if (c.tile_begin < c.tile_end) load_kv(p, c, c.tile_begin, sK, sV);
    Tile::copy_commit();
    for (int tile = c.tile_begin; tile < c.tile_end; ++tile) {
      const int stage = Policy::kStages == 2 ? (tile - c.tile_begin) & 1 : 0;
      if (Policy::kStages == 1 && tile != c.tile_begin) {
        __syncthreads();  // one buffer: every warp is done with the previous tile's K
        load_kv(p, c, tile, sK, sV);
        Tile::copy_commit();
      }
      Tile::copy_wait_all();
      __syncthreads();  // tile's K/V landed; every warp is done with the previous tile
      transpose_v(sV + stage * Policy::kKVBytes, sVt);
      if (Policy::kStages == 2 && tile + 1 < c.tile_end)
        load_kv(p, c, tile + 1, sK + (stage ^ 1) * Policy::kKVBytes, sV + (stage ^ 1) * Policy::kKVBytes);
      Tile::copy_commit();
      __syncthreads();  // Vt complete
      step(tile, kv_tile_needs_mask<Problem, kBN>(c, tile), rows.logits, keys, pq, sQ, sK + stage * Policy::kKVBytes,
           sVt, st);
    }
  }
};

}  // namespace fp8attn
