// The Epilogue of the Hopper pipeline for FP8 output without split (the serving case): O is
// converted to e4m3 codes by the hardware conversion, staged in the warpgroup's own 64 rows of the
// Q buffer (free once its last S = Q.K^T has retired), and written with 16-byte coalesced stores.
// The per-element byte stores of store_rows (kernel.h) took ~15k cycles per work item at D = 128,
// a third of a short causal item (docs/hopper-pipeline.md). Other outputs take store_rows.
#pragma once
#include <cstdint>

#include "../arch/nv_wgmma.h"
#include "kernel.h"

namespace fp8attn {

template <class Problem, class Policy>
struct EpilogueNvWgmma {
  using Tile = typename Policy::Tile;
  using QK = typename Policy::QK;

  // FP8 out, no split workspace, every row start 16-byte aligned.
  FP8ATTN_DEVICE static bool staged(const FwdParams& p) {
    const uint64_t bits = reinterpret_cast<uintptr_t>(p.out) | static_cast<uint64_t>(p.o_row_stride) |
                          static_cast<uint64_t>(p.o_head_stride) | static_cast<uint64_t>(p.o_batch_stride);
    return p.out_type == ElemType::FP8 && p.num_splits == 1 && (bits & 15) == 0;
  }

  // The scalars it reads from memory, loaded ahead of the item's end (their latency otherwise sits
  // in every item's epilogue): p_scale and 1 / out_scale once per kernel, v_descale per item.
  struct Scalars {
    float p_scale, inv_out_scale, v_descale;
  };
  FP8ATTN_DEVICE static Scalars kernel_scalars(const FwdParams& p) {
    return {p_scale_of<Problem::kFp8>(p), OutputTransform<Problem::kFp8>::make(p).inv_out_scale, 1.f};
  }

  // wg: the consumer warpgroup, warp: the consumer warp in the block (rows 16 * warp ..), sQ: the
  // item's Q buffer (its rows 64 * wg .. belong to this warpgroup); inv_p_scale: the PQuant's (RowScales).
  FP8ATTN_DEVICE static void store(const FwdParams& p, const BlockCtx& c, const ThreadRows<Tile>& tr,
                                   const FwdState<Policy>& st, const Scalars& sc, float inv_p_scale, uint8_t* sQ,
                                   int wg, int warp, int lane) {
#if FP8ATTN_NV_WGMMA
    static_assert(Problem::kFp8 == Fp8Kind::E4M3FN, "the hardware conversion writes e4m3fn");
    const RowScales<Policy> rs(p, tr, st, sc.p_scale, inv_p_scale, sc.v_descale);
    const float inv_out_scale = sc.inv_out_scale;
#pragma unroll
    for (int ri = 0; ri < Tile::kRows; ++ri) {
      const int r = warp * Tile::kRowsPerWarp + Tile::row_in_warp(lane, ri);
      const float f = rs.o_scale[ri] * inv_out_scale;
#pragma unroll
      for (int n = 0; n < Policy::kNTilesO; ++n) {  // elements 2ri, 2ri + 1: adjacent columns of row slot ri
        const int d = Tile::o_col(lane, 4 * n + 2 * ri);
        *reinterpret_cast<uint16_t*>(sQ + QK::offset(Policy::kBlockM, r, d)) =
            nv::e4m3x2(out_value(st.acc[n][2 * ri], f), out_value(st.acc[n][2 * ri + 1], f));
      }
      store_lse(p, c, tr, ri, rs.lse[ri], lane);
    }
    nv::named_barrier_sync(Policy::kBarEpilogue + wg, 128);
    // Row 0 of the kv head's first q head, once (the sequence's offset is a load when varlen); per
    // chunk only its row and its head within the group.
    uint8_t* const out0 = static_cast<uint8_t*>(p.out) + out_offset(p, c.b, 0, c.hkv * c.group);
    for (int i = threadIdx.x % 128; i < 64 * Policy::kChunks; i += 128) {
      const int r = 64 * wg + i / Policy::kChunks, ch = i % Policy::kChunks;
      const int32_t m = c.m0 + r;
      if (m >= c.rows) continue;
      const int32_t qrow = c.q_row(p, m);
      const int64_t off = qrow * p.o_row_stride + (m - qrow * c.group) * p.o_head_stride + 16 * ch;
      *reinterpret_cast<uint4*>(out0 + off) =
          *reinterpret_cast<const uint4*>(sQ + QK::offset(Policy::kBlockM, r, 16 * ch));
    }
#endif
  }
};

}  // namespace fp8attn
