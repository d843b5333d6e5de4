// The decode pipeline of the sm_90 f16 family: at most 16 packed rows per (batch, kv head)
// (q_len * H/H_kv <= 16). Decode is bound by how fast the FP8 KV cache streams in, so:
//  * Each of the 4 warps owns 16 keys of every 64-key tile and copies them itself into a ring of
//    kStages tiles (all in flight but the one computed); a warp only waits for its own copies, so
//    the ring needs no block barrier. The ring is as deep as the blocks meant to share a
//    multiprocessor allow (decode_config.h); the first tiles are requested before Q is loaded.
//    On sm_90 the TMA engine copies, completing on a per-warp, per-stage mbarrier: a page-aligned
//    run of 16 keys is one tensor-map box for K and one for V (lane 0), other keys one bulk copy
//    per row. With 16-byte cp.async (earlier archs) a warp's copy issue stalled 2-4 us per tile
//    once the memory system was busy (an event trace); per-row bulk copies took ~2 us, being issued
//    one lane at a time; the two boxes ~0.5 us (docs/gpu-kernels.md).
//  * K and V stay FP8 in shared memory and are widened in registers right before their MMA (exact:
//    every e4m3 value is an f16 value), each byte once.
//  * The rows are the n8 side of the f16 MMA: S^T = K . Q^T and O^T += V^T . P8^T (keys / d on
//    the m16 side), so 8 packed rows (GQA 32/8 x q_len 2) cost one n8 tile instead of an m16 tile.
// The one __syncthreads per tile shares the warps' row maxima: the tile's m_new is the maximum over
// all 64 keys, as in every implementation. Same algorithm, tiles and quantization points as
// FwdPipelineNvF16 (see pipeline.h); the warps' partial O and l (same m sequence) are summed through
// shared memory at the end into warp 0, in the m16n8 layout of nv::Sm89Tile the epilogue reads.
//
// Fragments (lane = 4g + t; m16n8k16: A[m][k], B[k][n], C[m][n], see arch/nv_mma.h):
//   Q.K^T: A = K (m = key), B = Q^T (n = row). The k order inside a 16-d chunk is permuted the
//     same way for both: lane t takes d 4t..4t+3 (one ldmatrix word of fp8 K) as k {2t, 2t+1,
//     8+2t, 9+2t}, so B is the f16 words (8c + 2t, 8c + 2t + 1) of Q's row.
//   S^T, P: lane holds (key g, rows 2t, 2t+1) and (key g + 8, same rows); movmatrix.trans turns the
//     quantized f16 pairs into the B fragment of P^T.
//   P.V: A = V^T (m = d) from ldmatrix.trans of fp8 V, which hands lane (g, t) the bytes of keys
//     2t, 2t+1 at d 2g, 2g+1; m = g is d 2g, m = g + 8 is d 2g + 1 of the 16-d chunk. So O^T's lane
//     holds O[row 2t + {0,1}][d 16c + 2g] (acc[0], acc[1]) and [d 16c + 2g + 1] (acc[2], acc[3]).
// Shared memory (bytes): Q16 [kBlockM][kRow16] f16 (natural d order) | row maxima [2][4][16] f32 |
// ring mbarriers [4 warps][8] | ring [kStages][K, V][64][kRowStride] fp8 (rows as in global memory,
// swizzled at D 128, else padded to an odd number of 16-byte chunks, so that ldmatrix's 8 rows hit
// distinct banks; 1024-byte aligned when swizzled), reused at the end for the warps' partial O / l.
// Launch (launch_decode_with): the decode kernel is a programmatic dependent of the grid before it, and when
// split it triggers its own dependent (the combine kernel) at once, so that the combine blocks are resident
// and waiting when it ends.
#pragma once
#include <cmath>
#include <cstdint>

#include <cuda_runtime.h>

#include "../arch/nv_tma.h"
#include "../arch/nv_wgmma.h"
#include "decode_config.h"
#include "kernel.h"
#include "pipeline_f16.h"

namespace fp8attn {

// The rows a decode lane owns: slot ri = 2n + e is packed row 8n + 2t + e, the same in every warp
// (the kernel's ThreadRows computes their heads / logits transforms from this).
template <int kRowTiles>
struct DecodeRows {
  static constexpr int kRows = 2 * kRowTiles;
  static constexpr int kRowsPerWarp = 0;
  static constexpr float kInvProductScale = 1.f;
  FP8ATTN_DEVICE static int row_in_warp(int lane, int ri) { return 8 * (ri / 2) + 2 * (lane % 4) + ri % 2; }
};

// The S^T accumulator s[n][i] of a decode lane, flattened (e = 4n + i), as the online softmax reads
// it (softmax.h): row slot 2n + (i & 1), key 16 warp + g + 8 (i >> 1) of the tile.
template <int kRowTiles>
struct DecodeSLayout {
  static constexpr int kSElems = 4 * kRowTiles;
  static constexpr int kRows = 2 * kRowTiles;
  FP8ATTN_HD static constexpr int s_row(int e) { return 2 * (e >> 2) + (e & 1); }
  FP8ATTN_HD static constexpr int s_key_off(int e) { return 8 * ((e & 3) >> 1); }
};

static_assert(kDecodeMaxSplits == kMaxSplits, "decode_config.h: the combine kernel's split limit");

// kRowTiles_ n8 tiles of packed rows: 1 (rows <= 8) or 2 (rows <= 16); Cfg: a DecodeConfig.
template <class Problem, int kRowTiles_, class Cfg = DecodeDefault<8 * kRowTiles_, Problem::kHeadDim>>
struct FwdPolicyNvDecode {
  static constexpr int kRowTiles = kRowTiles_;
  static constexpr int kBlocksPerSm = Cfg::kBlocksPerSm;  // (fwd_kernel_decode's register budget)
  static constexpr int kD = Problem::kHeadDim;
  static constexpr int kWarps = 4;
  static constexpr int kThreads = 32 * kWarps;
  static constexpr int kBlockM = 8 * kRowTiles;
  static constexpr int kBlockN = 64;
  static constexpr int kKeysPerWarp = kBlockN / kWarps;
  static constexpr int kNTilesO = kD / 8;  // the epilogue's accumulator fragments (Sm89Tile layout)
  static constexpr int kChunks = kD / 16;  // 16-byte fp8 chunks per K / V row
  // The 8 rows an ldmatrix phase reads must hit 8 distinct 16-byte bank groups. D 128: 128-byte rows
  // in the 128-byte swizzle (chunk c of ring row r at c ^ (r % 8); what a swizzled TMA box writes), so
  // that a third ring tile fits next to 3 other blocks; other head dims: rows of an odd chunk count
  // (padded), each one contiguous bulk copy.
  static constexpr bool kSwizzle = kD == 128;
  static constexpr int kRowStride = kSwizzle || kChunks % 2 ? kD : kD + 16;
  static constexpr int kRingAlign = kSwizzle ? 1024 : 16;  // (the swizzle's period)
  static constexpr int kBoxBytes = kRowStride, kBoxSwizzle = kSwizzle ? 128 : 0;  // a page box (launch_decode_with)
  // The swizzle's XOR of ring row `row`: its chunk ch is at 16-byte chunk ch ^ swizzle_xor(row).
  FP8ATTN_HD static constexpr int swizzle_xor(int row) { return kSwizzle ? row & 7 : 0; }
  static constexpr bool kRowCopy = Cfg::kRowCopy;
  // Q16 row: D/2 f16x2 words, padded to 8 (mod 16) words so that the 8-byte B loads of lanes
  // (g, t), g < 4, hit distinct banks.
  static constexpr int kRow16 = 4 * (kD / 2 + ((kD / 2) % 16 == 0 ? 8 : 0));
  static constexpr int kStageBytes = 2 * kBlockN * kRowStride;
  static constexpr int kOffQ = 0;
  static constexpr int kOffRed = kOffQ + kBlockM * kRow16;
  static constexpr int kOffBar = kOffRed + 2 * kWarps * 16 * 4;  // [kWarps][8] (kStages <= 8)
  static constexpr int kOffRing = kOffBar + kWarps * 8 * 8;
  // Tiles that fit next to Cfg::kBlocksPerSm - 1 other blocks (sm_90: 227 KiB per multiprocessor,
  // 1 KiB of it reserved per block), 2..8; or Cfg::kStages.
  static constexpr int kFit =
      (nv::Sm89::kSmemLimit / Cfg::kBlocksPerSm - 1024 - kOffRing - kRingAlign) / kStageBytes;
  static constexpr int kStages = Cfg::kStages ? Cfg::kStages : kFit < 2 ? 2 : kFit > 8 ? 8 : kFit;
  static_assert(kStages <= 8, "a warp has 8 ring mbarriers");
  // The final sum, in the ring: partial O [warp][kBlockM][kOStride] f32, l [warp][kBlockM], m [kBlockM].
  static constexpr int kOStride = kD + 8;  // float2 reads of rows g, g + 4: distinct banks
  static constexpr int kSumBytes = 4 * (kWarps * kBlockM * kOStride + kWarps * kBlockM + kBlockM);
  static constexpr int kRingBytes = kStages * kStageBytes > kSumBytes ? kStages * kStageBytes : kSumBytes;
  static constexpr int kSmemBytes = kOffRing + kRingAlign + kRingBytes;  // (+ the ring's alignment slack)
  static constexpr Fp8Kind kFp8 = Problem::kFp8;
  using PQuant = nv::PQuant<Problem::kFp8>;
  using Tile = nv::Sm89Tile<Problem::kFp8>;  // the accumulator layout handed to the epilogue
};

template <class Problem, class Policy>
struct FwdPipelineNvDecode {
  static constexpr int kBN = Policy::kBlockN;
  static constexpr int kD = Policy::kD;
  static constexpr int kNR = Policy::kRowTiles;
  static constexpr int kR = 2 * kNR;  // row slots per lane
  static constexpr int kChunks = Policy::kChunks;
  static constexpr int kStages = Policy::kStages;
  static constexpr int kKW = Policy::kKeysPerWarp;
  static constexpr Fp8Kind kFp8 = Problem::kFp8;
  using SL = DecodeSLayout<kNR>;

  static constexpr bool kBulk = nv::kBulkCopy;
  static constexpr bool kPageBoxes = false;  // (every tile a page box: FwdPipelineNvDecodeWg)

  // Whether this warp's 16 keys of KV tile `tile` come as one TMA box (sm_90, a cache with tensor maps,
  // all 16 keys valid); in the swizzle (Policy::kSwizzle) when they do, and always before sm_90 (cp.async
  // writes the swizzled chunks), else as plain rows (one bulk copy each).
  FP8ATTN_DEVICE static bool by_box(const FwdParams& p, const BlockCtx& c, int tile) {
    return p.kv_tma && tile * kBN + kKW * static_cast<int>(threadIdx.x / 32) + kKW <= c.seq.k_len;
  }
  FP8ATTN_DEVICE static bool swizzled(const FwdParams& p, const BlockCtx& c, int tile) {
    return Policy::kSwizzle && (!kBulk || by_box(p, c, tile));
  }

  // This warp's 16 keys of KV tile `tile` into `stage` (keys at or past k_len are zeros: P is 0
  // there, and V must be finite). sm_90: when the 16 keys are valid and the cache has tensor maps
  // (p.kv_tma), lane 0 loads one box of page `entry` for K and one for V; otherwise lanes 0-15 copy
  // the K rows, 16-31 the V rows, one bulk copy each; all counted on `bar`. Earlier archs: cp.async
  // of the warp's 16 x kChunks 16-byte chunks of K (and of V), kChunks / 2 per lane; lanes run along
  // the rows (kRowCopy) or 2 lanes per key.
  FP8ATTN_DEVICE static void load_kv(const FwdParams& p, const BlockCtx& c, int tile, uint8_t* stage, uint64_t* bar,
                                     int32_t entry) {
    const int lane = threadIdx.x % 32;
    const uint8_t* kbase = static_cast<const uint8_t*>(p.k) + static_cast<int64_t>(c.hkv) * p.k_head_stride;
    const uint8_t* vbase = static_cast<const uint8_t*>(p.v) + static_cast<int64_t>(c.hkv) * p.v_head_stride;
    if constexpr (kBulk) {
      const int32_t key0 = tile * kBN + kKW * (threadIdx.x / 32);
      if (by_box(p, c, tile)) {  // the warp's 16 keys: one box of one cache page
        if (lane == 0) {
          const int32_t blk = SeqInfo::valid_block(p, entry);
          const int32_t row = key0 - p.div_page.div(key0) * p.page_block_size;
          uint8_t* dst = stage + kKW * (threadIdx.x / 32) * Policy::kRowStride;
          nv::mbar_arrive_expect_tx(bar, 2 * kKW * Policy::kRowStride);
          nv::tma_load_4d(dst, p.k_tmap, 0, c.hkv, row, blk, bar);
          nv::tma_load_4d(dst + kBN * Policy::kRowStride, p.v_tmap, 0, c.hkv, row, blk, bar);
        }
        return;
      }
      const int r = kKW * (threadIdx.x / 32) + lane % kKW;
      const bool is_v = lane >= kKW;
      const int32_t key = key0 + lane % kKW;
      uint8_t* dst = stage + (is_v ? kBN * Policy::kRowStride : 0) + r * Policy::kRowStride;
      if (lane == 0) {
        const int32_t valid = min(max(c.seq.k_len - key0, 0), kKW);
        nv::mbar_arrive_expect_tx(bar, static_cast<uint32_t>(2 * valid * kD));
      }
      __syncwarp();
      if (key < c.seq.k_len) {
        nv::bulk_copy_g2s(dst, (is_v ? vbase : kbase) + c.seq.key_offset(p, key, is_v), kD, bar);
      } else {
#pragma unroll
        for (int ch = 0; ch < kChunks; ++ch) reinterpret_cast<uint4*>(dst)[ch] = make_uint4(0, 0, 0, 0);
      }
    } else {
#pragma unroll
      for (int j = 0; j < (kChunks + 1) / 2; ++j) {
        const int i = lane + 32 * j;
        const int kr = Policy::kRowCopy ? i / kChunks : lane / 2;
        const int ch = Policy::kRowCopy ? i % kChunks : 2 * j + lane % 2;
        if (Policy::kRowCopy ? i < kKW * kChunks : ch < kChunks) {
          const int r = kKW * (threadIdx.x / 32) + kr;
          const int32_t key = tile * kBN + r;
          const bool ok = key < c.seq.k_len;
          uint8_t* kdst = stage + r * Policy::kRowStride + 16 * (ch ^ Policy::swizzle_xor(r));
          nv::cp_async_16(kdst, kbase + (ok ? c.seq.key_offset(p, key, false) : 0) + 16 * ch, ok);
          nv::cp_async_16(kdst + kBN * Policy::kRowStride, vbase + (ok ? c.seq.key_offset(p, key, true) : 0) + 16 * ch,
                          ok);
        }
      }
    }
  }

  // The tile's scores of this warp's keys (softmax.h: logits transform, mask), the row maxima over all 64
  // keys (shared with the other warps through sRed: the block barrier) and the rows' online-softmax
  // update (m, offset, alpha). True when some row of the warp moved (rescaling by 1 changes nothing).
  FP8ATTN_DEVICE static bool tile_max(int tile, bool need_mask, const LogitsTransform (&logits)[kR],
                                      const RowKeys<Problem::kHasMask> (&keys)[kR], float (&s)[SL::kSElems],
                                      float* sRed, float (&m)[kR], float (&offset)[kR], float (&alpha)[kR]) {
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    float mx[kR];
    softmax_scores<SL, true>(s, logits, need_mask, tile * kBN + kKW * warp + g, keys, mx);
    float* red = sRed + (tile & 1) * 4 * 16;  // [warp][row]; two buffers: one barrier per tile
#pragma unroll
    for (int ri = 0; ri < kR; ++ri)
#pragma unroll
      for (int x = 4; x < 32; x *= 2) mx[ri] = max_nan(mx[ri], nv::shfl_xor(mx[ri], x));
    if (g == 0) {
#pragma unroll
      for (int n = 0; n < kNR; ++n)
        *reinterpret_cast<float2*>(red + 16 * warp + 8 * n + 2 * t) = make_float2(mx[2 * n], mx[2 * n + 1]);
    }
    __syncthreads();
#pragma unroll
    for (int w = 0; w < 4; ++w)
#pragma unroll
      for (int n = 0; n < kNR; ++n) {
        const float2 v = *reinterpret_cast<const float2*>(red + 16 * w + 8 * n + 2 * t);
        mx[2 * n] = max_nan(mx[2 * n], v.x);
        mx[2 * n + 1] = max_nan(mx[2 * n + 1], v.y);
      }
    bool moved = false;
#pragma unroll
    for (int ri = 0; ri < kR; ++ri) {
      const RowUpdate u = softmax_update(m[ri], mx[ri], nv::Exp2Approx{});
      m[ri] = u.m;
      offset[ri] = u.offset;
      alpha[ri] = u.alpha;
      moved |= needs_rescale(alpha[ri]);
    }
    return __any_sync(0xffffffffu, moved);
  }

  // One KV tile for this warp's 16 keys: S^T, the tile's row max (shared with the other warps
  // through sRed: the block barrier), P8, l and O^T.
  FP8ATTN_DEVICE static void step(int tile, bool need_mask, bool swz, const LogitsTransform (&logits)[kR],
                                  const RowKeys<Problem::kHasMask> (&keys)[kR], const typename Policy::PQuant& pq,
                                  const uint8_t* sQ, const uint8_t* stage, float* sRed, float acc[kNR][kChunks][4],
                                  float lacc[kNR][4], float (&m)[kR]) {
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    const uint8_t* sK = stage + kKW * warp * Policy::kRowStride;
    const uint8_t* sV = sK + kBN * Policy::kRowStride;
    // ldmatrix rows: lanes 0-7 keys 0-7 and lanes 8-15 keys 8-15 of chunk ch; lanes 16-31 the
    // same keys of chunk ch + 1 (of ch again past the last chunk). Row kKW * warp + lr: (row & 7) =
    // (lane & 7), the row's swizzle in a swizzled tile (swz).
    const int lr = (lane & 7) + 8 * ((lane >> 3) & 1), sw = swz ? Policy::swizzle_xor(lane) : 0;
    const auto at = [&](const uint8_t* base, int ch) {
      return base + lr * Policy::kRowStride + 16 * ((ch + 1 < kChunks ? ch + (lane >> 4) : ch) ^ sw);
    };

    // S^T = K . Q^T
    float s[kNR][4];
#pragma unroll
    for (int n = 0; n < kNR; ++n) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.f;
#pragma unroll
    for (int ch = 0; ch < kChunks; ch += 2) {
      uint32_t kw[4];
      nv::ldmatrix_x4(kw, at(sK, ch));
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        if (ch + h >= kChunks) break;
        const uint32_t a[4] = {nv::fp8_pair_to_half2<kFp8>(kw[2 * h], 0x10), nv::fp8_pair_to_half2<kFp8>(kw[2 * h + 1], 0x10),
                               nv::fp8_pair_to_half2<kFp8>(kw[2 * h], 0x32), nv::fp8_pair_to_half2<kFp8>(kw[2 * h + 1], 0x32)};
#pragma unroll
        for (int n = 0; n < kNR; ++n) {
          const uint2 q = *reinterpret_cast<const uint2*>(sQ + (8 * n + g) * Policy::kRow16 + 32 * (ch + h) + 8 * t);
          const uint32_t b[2] = {q.x, q.y};
          nv::MmaF16::mma(s[n], a, b);
        }
      }
    }

    float offset[kR], alpha[kR];
    if (tile_max(tile, need_mask, logits, keys, reinterpret_cast<float(&)[SL::kSElems]>(s), sRed, m, offset, alpha)) {
#pragma unroll
      for (int n = 0; n < kNR; ++n) {
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          lacc[n][i] *= alpha[2 * n + (i & 1)];
#pragma unroll
          for (int ch = 0; ch < kChunks; ++ch) acc[n][ch][i] *= alpha[2 * n + (i & 1)];
        }
      }
    }

    // P8 (as the B fragments of P^T), l += P8 . 1, O^T += V^T . P8^T
    const uint32_t ones[4] = {nv::kOnesF16x2, nv::kOnesF16x2, nv::kOnesF16x2, nv::kOnesF16x2};
    uint32_t pb[kNR][2];
#pragma unroll
    for (int n = 0; n < kNR; ++n) {
#pragma unroll
      for (int h = 0; h < 2; ++h)
        pb[n][h] = nv::movmatrix_trans(pq.quantize2_f16(nv::exp2_approx(s[n][2 * h] - offset[2 * n]),
                                                        nv::exp2_approx(s[n][2 * h + 1] - offset[2 * n + 1])));
      nv::MmaF16::mma(lacc[n], ones, pb[n]);
    }
#pragma unroll
    for (int ch = 0; ch < kChunks; ch += 2) {
      uint32_t vw[4];
      nv::ldmatrix_x4_trans(vw, at(sV, ch));
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        if (ch + h >= kChunks) break;
        const uint32_t a[4] = {nv::fp8_pair_to_half2<kFp8>(vw[2 * h], 0x20), nv::fp8_pair_to_half2<kFp8>(vw[2 * h], 0x31),
                               nv::fp8_pair_to_half2<kFp8>(vw[2 * h + 1], 0x20), nv::fp8_pair_to_half2<kFp8>(vw[2 * h + 1], 0x31)};
#pragma unroll
        for (int n = 0; n < kNR; ++n) nv::MmaF16::mma(acc[n][ch + h], a, pb[n]);
      }
    }
  }

  // The warps' partial O^T / l -> their sum in warp 0's FwdState (rows g, g + 8; columns 8j + 2t),
  // summed in warp order.
  FP8ATTN_DEVICE static void reduce(uint8_t* ring, const float acc[kNR][kChunks][4], const float lacc[kNR][4],
                                    const float m[kR], FwdState<Policy>& st) {
    constexpr int kM = Policy::kBlockM, kS = Policy::kOStride;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    float* sO = reinterpret_cast<float*>(ring);
    float* sL = sO + 4 * kM * kS;
    float* sM = sL + 4 * kM;
    __syncthreads();  // every warp is done with the ring
#pragma unroll
    for (int n = 0; n < kNR; ++n) {
      float* row = sO + (warp * kM + 8 * n + 2 * t) * kS + 2 * g;
#pragma unroll
      for (int ch = 0; ch < kChunks; ++ch) {
        *reinterpret_cast<float2*>(row + 16 * ch) = make_float2(acc[n][ch][0], acc[n][ch][2]);
        *reinterpret_cast<float2*>(row + kS + 16 * ch) = make_float2(acc[n][ch][1], acc[n][ch][3]);
      }
      if (g == 0) {
        *reinterpret_cast<float2*>(sL + warp * kM + 8 * n + 2 * t) = make_float2(lacc[n][0], lacc[n][1]);
        if (warp == 0) *reinterpret_cast<float2*>(sM + 8 * n + 2 * t) = make_float2(m[2 * n], m[2 * n + 1]);
      }
    }
    __syncthreads();
    if (warp == 0) read_rows<4>(sO, sL, sM, st);
  }

  // Warp 0: the partial O / l of kSlabs slabs in shared memory (O [kSlabs][kBlockM][kOStride] f32,
  // l [kSlabs][kBlockM], m [kBlockM]), summed in slab order -> st (rows g, g + 8; columns 8j + 2t).
  template <int kSlabs>
  FP8ATTN_DEVICE static void read_rows(const float* sO, const float* sL, const float* sM, FwdState<Policy>& st) {
    constexpr int kM = Policy::kBlockM, kS = Policy::kOStride;
    const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
#pragma unroll
    for (int ri = 0; ri < 2; ++ri) {
      if (8 * ri >= kM) break;  // one row tile: rows g + 8 are past the block (the kernel skips them)
      const int r = g + 8 * ri;
#pragma unroll
      for (int j = 0; j < Policy::kNTilesO; ++j) {
        float2 o = *reinterpret_cast<const float2*>(sO + r * kS + 8 * j + 2 * t);
#pragma unroll
        for (int w = 1; w < kSlabs; ++w) {
          const float2 v = *reinterpret_cast<const float2*>(sO + (w * kM + r) * kS + 8 * j + 2 * t);
          o.x += v.x;
          o.y += v.y;
        }
        st.acc[j][2 * ri] = o.x;
        st.acc[j][2 * ri + 1] = o.y;
      }
      float l = sL[r];
#pragma unroll
      for (int w = 1; w < kSlabs; ++w) l += sL[w * kM + r];
      st.l[ri] = quad_share(l);  // (every lane of the quad holds it)
      st.m[ri] = sM[r];
    }
  }

  // The block-table entry of this warp's page box of KV tile `tile` (TMA path; 0 where it has no keys).
  FP8ATTN_DEVICE static int32_t entry_of(const FwdParams& p, const BlockCtx& c, int tile) {
    const int32_t key0 = tile * kBN + kKW * static_cast<int>(threadIdx.x / 32);
    return p.kv_tma && key0 < c.seq.k_len ? c.seq.blocks[p.div_page.div(key0)] : 0;
  }

  // This warp's block-table entries of the split's first kStages + 1 tiles (the TMA path's page boxes):
  // read by guess_entries before the sequence's lengths are known, completed by resolve_entries.
  struct Entries {
    int32_t e[kStages + 1];
    uint32_t read = 0;  // bit i: e[i] was read for tile begin + i
    int32_t begin = -1;
  };
  // The entries of the tiles the split would start with if its sequence were the longest (p.seqlen_q,
  // p.seqlen_k: exact for the uniform batches of decode), inside the table's columns; their loads need
  // nothing from memory, so they are in flight together with the lengths'.
  FP8ATTN_DEVICE static Entries guess_entries(const FwdParams& p, BlockCtx g) {
    Entries en;
    const int warp = threadIdx.x / 32;
#pragma unroll
    for (int i = 0; i <= kStages; ++i) en.e[i] = 0;
    if (!p.kv_tma || p.block_table_cols <= 0) return en;
    g.seq.q_len = p.seqlen_q;
    g.seq.k_len = p.seqlen_k;
    if (!block_range<Problem, Policy>(p, g)) return en;
    const int32_t* row = p.block_table + static_cast<int64_t>(g.b) * p.block_table_batch_stride;
    en.begin = g.tile_begin;
#pragma unroll
    for (int i = 0; i <= kStages; ++i) {
      const int32_t key0 = (g.tile_begin + i) * kBN + kKW * warp, col = p.div_page.div(key0);
      if (key0 < g.seq.k_len && col < p.block_table_cols) {
        en.e[i] = row[col];
        en.read |= 1u << i;
      }
    }
    return en;
  }
  // The guess checked against the block's real tile range: entries it missed are read now (0 for keys
  // this warp does not have).
  FP8ATTN_DEVICE static void resolve_entries(const FwdParams& p, const BlockCtx& c, Entries& en) {
    const int warp = threadIdx.x / 32;
#pragma unroll
    for (int i = 0; i <= kStages; ++i) {
      const int32_t key0 = (c.tile_begin + i) * kBN + kKW * warp;
      if (!p.kv_tma || key0 >= c.seq.k_len)
        en.e[i] = 0;
      else if (en.begin != c.tile_begin || !((en.read >> i) & 1u))
        en.e[i] = entry_of(p, c, c.tile_begin + i);
    }
  }

  // This pipeline's lanes own other rows in the loop (DecodeRows) than in st (Sm89Tile's m16 rows,
  // after reduce). en: this warp's entries of the first kStages + 1 tiles (resolve_entries).
  FP8ATTN_DEVICE static void run(const FwdParams& p, const BlockCtx& c, const typename Policy::PQuant& pq,
                                 uint8_t* smem, FwdState<Policy>& st, const Entries& en) {
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const uint8_t* sQ = smem + Policy::kOffQ;
    float* sRed = reinterpret_cast<float*>(smem + Policy::kOffRed);
    uint8_t* ring = smem + Policy::kOffRing;
    ring += (Policy::kRingAlign - nv::smem_addr(ring) % Policy::kRingAlign) % Policy::kRingAlign;
    uint64_t* bars = reinterpret_cast<uint64_t*>(smem + Policy::kOffBar) + 8 * warp;  // this warp's ring
    // The combine kernel may become resident now (it waits for this grid). Without one the next grid
    // launches as this one ends: triggered early, its blocks would take the slots this grid's first
    // blocks free and leave multiprocessors empty (64 x 4k: -4 %).
    if (p.num_splits > 1) pdl_launch_dependents();
    if constexpr (kBulk) {
      if (lane == 0) {
        for (int s = 0; s < kStages; ++s) nv::mbar_init(&bars[s], 1);
        nv::fence_mbarrier_init();
      }
      __syncwarp();
    }
    FP8ATTN_TRACE(kTraceDecodeStart);
    const int tiles = c.tile_end - c.tile_begin;
    // The block-table entry of a tile's page box (TMA path) is read one tile load ahead of its copy.
    int32_t ahead = en.e[kStages];
#pragma unroll
    for (int i = 0; i < kStages; ++i) {
      if (i < tiles) load_kv(p, c, c.tile_begin + i, ring + i * Policy::kStageBytes, &bars[i], en.e[i]);
      nv::cp_async_commit();
    }
    FP8ATTN_TRACE(kTraceDecodeFirstIssued);
    load_q16<Problem, Policy>(p, c, smem);  // its latency overlaps the first tiles'
    ThreadRows<DecodeRows<kNR>> rows;
    rows.init(p, c, warp, lane);
    RowKeys<Problem::kHasMask> keys[kR];
    rows.keys(c, keys);

    float acc[kNR][kChunks][4], lacc[kNR][4], m[kR];
#pragma unroll
    for (int n = 0; n < kNR; ++n) {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        lacc[n][i] = 0.f;
#pragma unroll
        for (int ch = 0; ch < kChunks; ++ch) acc[n][ch][i] = 0.f;
      }
    }
#pragma unroll
    for (int ri = 0; ri < kR; ++ri) m[ri] = -INFINITY;

    FP8ATTN_TRACE(kTraceDecodeQ);
    __syncthreads();  // Q16 published
    int slot = 0;
    for (int i = 0; i < tiles; ++i) {
      const int tile = c.tile_begin + i;
      uint8_t* stage = ring + slot * Policy::kStageBytes;
      if constexpr (kBulk)
        nv::mbar_wait(&bars[slot], (i / kStages) & 1);
      else
        nv::cp_async_wait<kStages - 1>();
      FP8ATTN_TRACE(kTraceDecodeLanded);
      __syncwarp();  // the warp's copies (and zero rows) of this tile are visible to all its lanes
      step(tile, kv_tile_needs_mask<Problem, kBN>(c, tile), swizzled(p, c, tile), rows.logits, keys, pq, sQ, stage, sRed,
           acc, lacc, m);
      FP8ATTN_TRACE(kTraceDecodeStepped);
      __syncwarp();  // every lane is done with the slot before it is refilled
      if constexpr (kBulk) nv::fence_proxy_async();  // ... by the async proxy
      if (i + kStages < tiles) {
        load_kv(p, c, tile + kStages, stage, &bars[slot], ahead);
        ahead = entry_of(p, c, tile + kStages + 1);
      }
      nv::cp_async_commit();
      slot = slot + 1 == kStages ? 0 : slot + 1;
      FP8ATTN_TRACE(kTraceDecodeIssued);
    }
    reduce(ring, acc, lacc, m, st);
    FP8ATTN_TRACE(kTraceDecodeReduced);
  }
};

// The decode kernels' entry point: decode_block compiled for Policy::kBlocksPerSm resident blocks
// (its register budget, decode_config.h) on sm_90+, the plan's arch; earlier archs fit fewer blocks
// by shared memory anyway, so there the registers stay free.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
#define FP8ATTN_DECODE_BOUNDS(Policy) __launch_bounds__(Policy::kThreads)
#else
#define FP8ATTN_DECODE_BOUNDS(Policy) __launch_bounds__(Policy::kThreads, Policy::kBlocksPerSm)
#endif
// The decode kernels' block: fwd_block's steps with every global read that does not depend on the sequence's
// lengths issued together with them (the split's first block-table entries, guessed; p_scale, v_descale and
// out_scale), so that the first KV copies wait for one memory round trip instead of three and the epilogue for
// none.
template <class Problem, class Policy, class Pipe>
FP8ATTN_DEVICE void decode_block(const FwdParams& p) {
  using Tile = typename Policy::Tile;
  extern __shared__ __align__(128) uint8_t smem[];
  const int warp = threadIdx.x / Tile::kWarpSize, lane = threadIdx.x % Tile::kWarpSize;
  FP8ATTN_TRACE(kTraceKernelStart);
  BlockCtx c;
  block_ids<Problem, Policy>(p, blockIdx.x, blockIdx.y, c);
  pdl_wait();  // launched as a programmatic dependent (launch_decode_with): the grid before wrote the inputs
  const SeqLens lens = SeqLens::load(p, c.b);
  const float p_scale = p_scale_of<Problem::kFp8>(p), v_descale = v_descale_of(p, c.hkv), out_scale = p.out_scale ? *p.out_scale : 1.f;
  typename Pipe::Entries en = Pipe::guess_entries(p, c);
  c.seq = SeqInfo::of(p, c.b, lens);  // (the first use of a length: the one wait)
  if (!block_range<Problem, Policy>(p, c)) return;
  Pipe::resolve_entries(p, c, en);
  const typename Policy::PQuant pq{1.f / p_scale};
  FwdState<Policy> st;
  init_state(st);
  Pipe::run(p, c, pq, smem, st, en);
  ThreadRows<Tile> tr;  // the rows of st's layout
  tr.init(p, c, warp, lane);
  store_rows<Problem, Policy>(p, c, tr, st, lane,
                             RowScales<Policy>(p, tr, st, p_scale, pq.inv_p_scale, v_descale),
                             OutputTransform<Problem::kFp8>::make(p, out_scale));
  FP8ATTN_TRACE(kTraceRowsStored);
}

template <class Problem, class Policy, class Pipe>
__global__ void FP8ATTN_DECODE_BOUNDS(Policy) fwd_kernel_decode(const __grid_constant__ FwdParams p) {
  decode_block<Problem, Policy, Pipe>(p);
}
#undef FP8ATTN_DECODE_BOUNDS

inline bool pdl_supported() {  // per device, cached (not a stream operation: fine during capture)
  static int cache[64] = {0};  // 0 unknown, 1 no, 2 yes
  int dev = 0, major = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= 64) return false;
  if (cache[dev] == 0)
    cache[dev] = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) == cudaSuccess && major >= 9 ? 2 : 1;
  return cache[dev] == 2;
}

// The decode kernel of one (Problem, Policy, Pipe): one block per (batch, kv head) and split (rows <=
// kBlockM), then the combine kernel when split; each as a programmatic dependent of the grid before it
// (kDecodePdl; sm_90+ only). A pipeline that needs every tile as page boxes (Pipe::kPageBoxes) hands a
// cache whose maps cannot be encoded to the mma.sync pipeline of the same rows (Policy::Fallback).
template <class Problem, class Policy, class Pipe = FwdPipelineNvDecode<Problem, Policy>>
void launch_decode_with(const FwdParams& p, cudaStream_t stream) {
  auto* kern = &fwd_kernel_decode<Problem, Policy, Pipe>;
  // Paged cache on sm_90+: TMA boxes of 16 tokens when the layout allows (else per-row bulk copies).
  FwdParams q = with_divisors<Policy>(p);
  if (p.block_table != nullptr && pdl_supported()) {
    q.kv_tma = nv::encode_kv_page_maps(q, Policy::kBoxBytes, Policy::kBoxSwizzle);
  }
  if constexpr (Pipe::kPageBoxes) {
    if (!q.kv_tma) return launch_decode_with<Problem, typename Policy::Fallback>(p, stream);
  }
  // Once per kernel and process (not a stream operation: fine during graph capture).
  static const cudaError_t attr_err = cudaFuncSetAttribute(
      reinterpret_cast<const void*>(kern), cudaFuncAttributeMaxDynamicSharedMemorySize, Policy::kSmemBytes);
  (void)attr_err;
  const int64_t nx = static_cast<int64_t>(p.batch) * p.num_heads_k;
  if (nx == 0) return;
  // Both kernels are programmatic dependents of the grid before them (kDecodePdl, sm_90+): the decode blocks
  // become resident while the previous kernel's last blocks run (when it triggers) and wait for it in
  // decode_block; the combine blocks are resident when the decode grid ends.
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  const auto launch = [&](dim3 grid, unsigned threads, size_t smem, auto kernel, const FwdParams& args) {
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid;
    cfg.blockDim = dim3(threads);
    cfg.dynamicSmemBytes = smem;
    cfg.stream = stream;
    cfg.attrs = attr;
    cfg.numAttrs = kDecodePdl && pdl_supported() ? 1 : 0;
    (void)cudaLaunchKernelEx(&cfg, kernel, args);  // errors: cudaGetLastError
  };
  launch(dim3(static_cast<unsigned>(nx), p.num_splits), Policy::kThreads, Policy::kSmemBytes, kern, q);
  if (p.num_splits <= 1) return;
  const int64_t items = static_cast<int64_t>(p.seqlen_q) * p.num_heads;
  launch(dim3(static_cast<unsigned>(items), p.batch), combine_threads(p), 0, fwd_combine_kernel<Problem::kFp8>, p);
}

}  // namespace fp8attn
