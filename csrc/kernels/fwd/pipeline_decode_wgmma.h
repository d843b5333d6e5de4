// The decode pipeline on Hopper's FP8 tensor cores (sm_90a): the decode ring of pipeline_decode.h
// (its copies, page boxes, block-table reads and split plan), but K and V enter the MMAs as FP8
// instead of being widened to f16 per byte -- what bounds the mma.sync decode kernel at 16 rows.
// The block's 4 warps are one warpgroup; the packed rows are the N side of wgmma:
//   S^T(64 keys x R rows) = K . Q^T            SS: K straight from the ring (the page boxes land in
//                                              the operand swizzle), Q8 in the same swizzle
//   O^T(D x R rows) += V^T . P8^T              RS: V^T from registers, P8 from shared memory
//   l^T(64 x R rows) += 1 . P8^T               RS: the row sums of P8, every M row alike
// Warp w's S^T rows are keys 16w .. 16w + 15 of the tile, the keys it copies (as in the mma.sync
// kernel: the same S layout, DecodeSLayout, and the same shared-max step). P.V needs every key of
// the tile in every warp: warp w holds the O^T rows of d chunks 4h + w (16 bytes each; h < D / 64),
// read as ldmatrix.trans of the V rows of all 64 keys. So a ring slot is refilled after the next tile's
// block barrier (every warp is done with it then), and the block waits for all four warps' copies.
// Serves paged caches whose pages are whole 16-key boxes (block size a multiple of 16; D 64 in the 64-byte
// swizzle, D 128 in the 128-byte one, D 256 as two 128-byte column blocks): every KV tile lands as TMA
// boxes in the wgmma operand swizzle. Keys at or past k_len in a box are
// whatever the cache holds there: their scores are masked (tile_needs_mask covers k_len) and their V
// rows zeroed before P.V (P = 0 times a NaN would be NaN).
//
// Fragments (lane = 4g + t, warp w):
//   Vt (A, m64k32 in registers, e4m3): ldmatrix.x4.trans of 4 x 8 keys at one 16-byte d chunk gives
//     lane (g, t) the bytes (key 2t, 2t + 1) x (d 2g, 2g + 1) of each 8-key group X, Y, Z, W; the A
//     word a0 = A[m = g][k 4t..4t+3] is bytes (X, Y) at d 2g, a1 the same at d 2g + 1, a2 / a3 from
//     (Z, W). So M row m is d 2 (m % 8) + m / 8 of the chunk, and k slot 16 hi + 4t + i of the k32
//     step is key 16 hi + 8 (i / 2) + 2t + i % 2.
//   P8^T (B, [R rows][64 k slots] in the 64-byte swizzle): the S^T lane holds keys 16w + g (+ 8) for
//     rows 2t, 2t + 1; in slot order that is slot 16w + 4 (g / 2) + 2 (key / 8 % 2) + g % 2, so lanes
//     g and g ^ 1 exchange their codes and each writes one row's 4 slots as a word.
//   O^T accumulator: acc[h][4n + i] is d 64h + 16w + 2g + i / 2, row 8n + 2t + i % 2.
#pragma once
#include "pipeline_decode.h"

namespace fp8attn {

template <class Problem, int kRowTiles_,
          class Cfg = DecodeConfig<decode_wg_blocks_per_sm(8 * kRowTiles_, Problem::kHeadDim)>>
struct FwdPolicyNvDecodeWg : FwdPolicyNvDecode<Problem, kRowTiles_, Cfg> {
  using Base = FwdPolicyNvDecode<Problem, kRowTiles_, Cfg>;
  using Fallback = FwdPolicyNvDecode<Problem, kRowTiles_>;  // (a cache without page maps: launch_decode_with)
  static constexpr int kD = Problem::kHeadDim;
  static_assert((kD == 64 || kD == 128 || kD == 256) && Problem::kFp8 == Fp8Kind::E4M3FN,
                "the wgmma decode kernel: D 64 / 128 / 256 in the operand swizzle, e4m3 operands");
  static constexpr int kBlockM = Base::kBlockM;
  // K, V, Q8 tiles: rows of D bytes in the wgmma operand swizzle of kSw bytes (D 256: two column blocks of
  // 128), what the page boxes of kSw bytes land as.
  static constexpr int kSw = kD == 64 ? 64 : 128;
  static constexpr int kBoxBytes = kSw, kBoxSwizzle = kSw;  // (the page maps: launch_decode_with)
  static constexpr int kStageBytes = 2 * Base::kBlockN * kD;
  // Shared memory from a 1024-byte aligned base: ring [kStages][K, V] | Q8 [kBlockM rows] | P8 [kBlockM][64]
  // (64-byte swizzle) | row maxima [2][4][16] f32 | ring mbarriers [4 warps][8].
  static constexpr int kOffRing = 0;
  static constexpr int kFixed = kBlockM * kD + kBlockM * 64 + 2 * 4 * 16 * 4 + 4 * 8 * 8;
  static constexpr int kFit = (nv::Sm89::kSmemLimit / Cfg::kBlocksPerSm - 1024 - 1024 - kFixed) / kStageBytes;
  static constexpr int kStages = Cfg::kStages ? Cfg::kStages : kFit < 2 ? 2 : kFit > 8 ? 8 : kFit;
  static_assert(kStages <= 8, "a warp has 8 ring mbarriers");
  static constexpr int kOffQ = kOffRing + kStages * kStageBytes;
  static constexpr int kOffP = kOffQ + kBlockM * kD;
  static constexpr int kOffRed = kOffP + kBlockM * 64;
  static constexpr int kOffBar = kOffRed + 2 * 4 * 16 * 4;
  // The final gather of O^T into warp 0's rows, in the ring: O [kBlockM][kOStride] f32, l, m [kBlockM].
  static constexpr int kSumBytes = 4 * (kBlockM * Base::kOStride + 2 * kBlockM);
  static_assert(kSumBytes <= kStages * kStageBytes, "the gather fits the ring");
  static constexpr int kSmemBytes = 1024 + kOffBar + 4 * 8 * 8;  // (+ the base's alignment slack)
};

template <class Problem, class Policy>
struct FwdPipelineNvDecodeWg : FwdPipelineNvDecode<Problem, Policy> {
  using Base = FwdPipelineNvDecode<Problem, Policy>;
  using Entries = typename Base::Entries;
  using SL = typename Base::SL;
  static constexpr int kBN = Policy::kBlockN;
  static constexpr int kNR = Policy::kRowTiles;
  static constexpr int kR = 2 * kNR;
  static constexpr int kN = 8 * kNR;  // wgmma N: the block's rows
  static constexpr int kAcc = 4 * kNR;
  static constexpr int kStages = Policy::kStages;
  static constexpr int kKW = Policy::kKeysPerWarp;
  static constexpr int kD = Policy::kD;
  static constexpr int kMB = kD / 64;  // M blocks of O^T (64 d each; warp w holds d chunks 4h + w)
  using Sw = nv::SwizzledTile<Policy::kSw>;  // K, V, Q8
  using Sw64 = nv::SwizzledTile<64>;         // P8
  static constexpr bool kPageBoxes = true;  // (launch_decode_with: p.kv_tma, or the mma.sync pipeline)

  // This warp's 16 keys of KV tile `tile` into `stage`: lane 0 loads the boxes of page `entry` for K and
  // for V (one per column block), keys past k_len included (step masks their scores and zeroes their V rows); a warp
  // without keys in the tile copies nothing and only arrives.
  FP8ATTN_DEVICE static void load_kv(const FwdParams& p, const BlockCtx& c, int tile, uint8_t* stage, uint64_t* bar,
                                     int32_t entry) {
    if (threadIdx.x % 32 != 0) return;
    const int warp = threadIdx.x / 32;
    const int32_t key0 = tile * kBN + kKW * warp;
    if (key0 >= c.seq.k_len) {
      nv::mbar_arrive(bar);
      return;
    }
    const int32_t blk = SeqInfo::valid_block(p, entry);
    const int32_t row = key0 - p.div_page.div(key0) * p.page_block_size;
    nv::mbar_arrive_expect_tx(bar, 2 * kKW * kD);
#pragma unroll
    for (int cb = 0; cb < kD / Policy::kSw; ++cb) {
      uint8_t* dst = stage + Sw::offset(kBN, kKW * warp, cb * Policy::kSw);
      nv::tma_load_4d(dst, p.k_tmap, cb * Policy::kSw, c.hkv, row, blk, bar);
      nv::tma_load_4d(dst + kBN * kD, p.v_tmap, cb * Policy::kSw, c.hkv, row, blk, bar);
    }
  }

  // The block's q rows -> Q8 [kBlockM rows] in the operand swizzle (rows past the block: zeros), then
  // published to the async proxy.
  FP8ATTN_DEVICE static void load_q8(const FwdParams& p, const BlockCtx& c, uint8_t* sQ) {
    for (int i = threadIdx.x; i < Policy::kBlockM * (kD / 16); i += Policy::kThreads) {
      const int r = i / (kD / 16), ch = i % (kD / 16);
      *reinterpret_cast<uint4*>(sQ + Sw::offset(Policy::kBlockM, r, 16 * ch)) = load_q_chunk<Problem::kFp8>(p, c, r, ch);
    }
    nv::fence_proxy_async();
  }

#if FP8ATTN_NV_WGMMA
  using Wg = nv::Wgmma<kN>;

  // One KV tile: S^T, the shared row max (block barrier), the refill of the previous tile's slot
  // (refill()), P8 -> shared memory, l and O^T.
  template <class Refill>
  FP8ATTN_DEVICE static void step(int tile, int32_t k_len, bool need_mask, const LogitsTransform (&logits)[kR],
                                  const RowKeys<Problem::kHasMask> (&keys)[kR], const typename Policy::PQuant& pq,
                                  const uint8_t* sQ, uint8_t* sP, uint8_t* stage, float* sRed, float (&acc)[kMB][kAcc],
                                  float (&lacc)[kAcc], float (&m)[kR], Refill refill) {
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    const uint8_t* sK = stage;
    uint8_t* sV = stage + kBN * kD;

    float s[kAcc];
    nv::wgmma_fence();
#pragma unroll
    for (int ks = 0; ks < kD / 32; ++ks) {
      const uint64_t a = Sw::desc(sK, kBN, 0, 32 * ks), b = Sw::desc(sQ, Policy::kBlockM, 0, 32 * ks);
      if (ks == 0)
        Wg::ss_first(s, a, b);
      else
        Wg::ss(s, a, b, 1);
    }
    nv::wgmma_commit();
    // Keys at or past k_len: this warp's V rows -> zeros (their scores are masked below), before the
    // barrier that lets the other warps read them.
    const int32_t key_lo = tile * kBN + kKW * warp;
    if (key_lo + kKW > k_len && lane < kKW && key_lo + lane >= k_len) {
#pragma unroll
      for (int ch = 0; ch < kD / 16; ++ch)
        *reinterpret_cast<uint4*>(sV + Sw::offset(kBN, kKW * warp + lane, 16 * ch)) = make_uint4(0, 0, 0, 0);
      nv::fence_proxy_async();  // (before the slot's next TMA write, after the barriers)
    }
    nv::wgmma_wait<0>();
    nv::fence_operands(s);

    float offset[kR], alpha[kR];
    const bool moved = Base::tile_max(tile, need_mask, logits, keys, s, sRed, m, offset, alpha);
    refill();
    if (moved) {
#pragma unroll
      for (int e = 0; e < kAcc; ++e) {
        const float a = alpha[SL::s_row(e)];
        lacc[e] *= a;
#pragma unroll
        for (int h = 0; h < kMB; ++h) acc[h][e] *= a;
      }
    }

    // P8 codes -> sP, in the k-slot order of the Vt fragments.
#pragma unroll
    for (int n = 0; n < kNR; ++n) {
      float x[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) x[i] = nv::exp2_approx(s[4 * n + i] - offset[2 * n + (i & 1)]) * pq.inv_p_scale;
      const uint32_t own = pq.quantize4_scaled(x);  // bytes: (key g, rows 2t, 2t+1), (key g + 8, same rows)
      const uint32_t other = __shfl_xor_sync(0xffffffffu, own, 4);
      const uint32_t word = g & 1 ? __byte_perm(own, other, 0x3715) : __byte_perm(own, other, 0x6240);
      const int row = 8 * n + 2 * t + (g & 1);
      *reinterpret_cast<uint32_t*>(sP + Sw64::offset(Policy::kBlockM, row, 16 * warp + 4 * (g >> 1))) = word;
    }
    nv::fence_proxy_async();

    // Vt fragments of this warp's d chunks (4h + warp), both k32 steps.
    uint32_t va[kMB][2][4];
    const int kr = lane & 7, grp = lane >> 3;
#pragma unroll
    for (int h = 0; h < kMB; ++h)
#pragma unroll
      for (int ks = 0; ks < 2; ++ks) {
        uint32_t x[4];
        const int key = 32 * ks + 8 * grp + kr;
        nv::ldmatrix_x4_trans(x, sV + Sw::offset(kBN, key, 16 * (4 * h + warp)));
        va[h][ks][0] = __byte_perm(x[0], x[1], 0x6420);
        va[h][ks][1] = __byte_perm(x[0], x[1], 0x7531);
        va[h][ks][2] = __byte_perm(x[2], x[3], 0x6420);
        va[h][ks][3] = __byte_perm(x[2], x[3], 0x7531);
      }
    __syncthreads();  // P8 complete (and every warp's zeroed V rows were before the max barrier)

    // The tile's O^T and l in fresh accumulators, added to acc / lacc in fp32: the tensor cores sum FP8
    // products with ~14 bits kept, so sums fed back across a long row lose the small terms of each tile
    // (both fed back, 64 tiles per block: twice the error against fp64 at 32 x 8k, measured; the prefill
    // pipeline found l the sensitive one, docs/hopper-pipeline.md) -- promoted every 64 keys, the error is
    // the mma.sync kernel's.
    const uint32_t ones[4] = {nv::kOnesE4m3x4, nv::kOnesE4m3x4, nv::kOnesE4m3x4, nv::kOnesE4m3x4};
    float o[kMB][kAcc], l[kAcc];
    nv::wgmma_fence();
#pragma unroll
    for (int ks = 0; ks < 2; ++ks) {
      const uint64_t b = Sw64::desc(sP, Policy::kBlockM, 0, 32 * ks);
      if (ks == 0) {
#pragma unroll
        for (int h = 0; h < kMB; ++h) Wg::rs_first(o[h], va[h][ks], b);
        Wg::rs_first(l, ones, b);
      } else {
#pragma unroll
        for (int h = 0; h < kMB; ++h) Wg::rs(o[h], va[h][ks], b, 1);
        Wg::rs(l, ones, b, 1);
      }
    }
    nv::wgmma_commit();
    nv::wgmma_wait<0>();
#pragma unroll
    for (int h = 0; h < kMB; ++h) nv::fence_operands(o[h]);
    nv::fence_operands(l);
#pragma unroll
    for (int e = 0; e < kAcc; ++e) {
#pragma unroll
      for (int h = 0; h < kMB; ++h) acc[h][e] += o[h][e];
      lacc[e] += l[e];
    }
  }

  // O^T, l, m -> warp 0's FwdState in the Sm89Tile layout (rows g, g + 8; columns 8j + 2t), through the ring.
  FP8ATTN_DEVICE static void gather(uint8_t* ring, const float (&acc)[kMB][kAcc], const float (&lacc)[kAcc],
                                    const float (&m)[kR], FwdState<Policy>& st) {
    constexpr int kM = Policy::kBlockM, kS = Policy::kOStride;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    float* sO = reinterpret_cast<float*>(ring);
    float* sL = sO + kM * kS;
    float* sM = sL + kM;
    __syncthreads();  // every warp is done with the ring
#pragma unroll
    for (int n = 0; n < kNR; ++n)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int row = 8 * n + 2 * t + e;
#pragma unroll
        for (int h = 0; h < kMB; ++h)
          *reinterpret_cast<float2*>(sO + row * kS + 64 * h + 16 * warp + 2 * g) =
              make_float2(acc[h][4 * n + e], acc[h][4 * n + 2 + e]);
        if (warp == 0 && g == 0) {
          sL[row] = lacc[4 * n + e];
          sM[row] = m[2 * n + e];
        }
      }
    __syncthreads();
    if (warp == 0) Base::template read_rows<1>(sO, sL, sM, st);
  }
#endif  // FP8ATTN_NV_WGMMA

  FP8ATTN_DEVICE static void run(const FwdParams& p, const BlockCtx& c, const typename Policy::PQuant& pq,
                                 uint8_t* smem, FwdState<Policy>& st, const Entries& en) {
#if FP8ATTN_NV_WGMMA
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    uint8_t* base = smem + (1024 - nv::smem_addr(smem) % 1024) % 1024;
    uint8_t* ring = base + Policy::kOffRing;
    uint8_t* sQ = base + Policy::kOffQ;
    uint8_t* sP = base + Policy::kOffP;
    float* sRed = reinterpret_cast<float*>(base + Policy::kOffRed);
    uint64_t* bars = reinterpret_cast<uint64_t*>(base + Policy::kOffBar);  // [warp][8]
    if (p.num_splits > 1) pdl_launch_dependents();  // (see FwdPipelineNvDecode::run)
    if (lane == 0) {
      for (int s = 0; s < kStages; ++s) nv::mbar_init(&bars[8 * warp + s], 1);
      nv::fence_mbarrier_init();
    }
    __syncwarp();
    const int tiles = c.tile_end - c.tile_begin;
    int32_t ahead = en.e[kStages];
#pragma unroll
    for (int i = 0; i < kStages; ++i)
      if (i < tiles) load_kv(p, c, c.tile_begin + i, ring + i * Policy::kStageBytes, &bars[8 * warp + i], en.e[i]);
    load_q8(p, c, sQ);
    ThreadRows<DecodeRows<kNR>> rows;
    rows.init(p, c, warp, lane);
    RowKeys<Problem::kHasMask> keys[kR];
    rows.keys(c, keys);

    float acc[kMB][kAcc], lacc[kAcc], m[kR];
#pragma unroll
    for (int e = 0; e < kAcc; ++e) {
      lacc[e] = 0.f;
#pragma unroll
      for (int h = 0; h < kMB; ++h) acc[h][e] = 0.f;
    }
#pragma unroll
    for (int ri = 0; ri < kR; ++ri) m[ri] = -INFINITY;
    __syncthreads();  // Q8 and the ring's mbarriers published to every warp

    int slot = 0;
    for (int i = 0; i < tiles; ++i) {
      const int tile = c.tile_begin + i;
      const uint32_t parity = (i / kStages) & 1;
      nv::mbar_wait2(&bars[slot], parity, &bars[8 + slot], parity);
      nv::mbar_wait2(&bars[16 + slot], parity, &bars[24 + slot], parity);
      // The slot of tile - 1 is free once every warp has passed this tile's max barrier.
      const int prev = slot == 0 ? kStages - 1 : slot - 1;
      const auto refill = [&] {
        if (i >= 1 && i - 1 + kStages < tiles) {
          nv::fence_proxy_async();
          load_kv(p, c, tile - 1 + kStages, ring + prev * Policy::kStageBytes, &bars[8 * warp + prev], ahead);
          ahead = Base::entry_of(p, c, tile + kStages);
        }
      };
      step(tile, c.seq.k_len, kv_tile_needs_mask<Problem, kBN>(c, tile), rows.logits, keys, pq, sQ, sP,
           ring + slot * Policy::kStageBytes, sRed, acc, lacc, m, refill);
      slot = slot + 1 == kStages ? 0 : slot + 1;
    }
    gather(ring, acc, lacc, m, st);
#else
    (void)p, (void)c, (void)pq, (void)smem, (void)st, (void)en;
#endif
  }
};

}  // namespace fp8attn
