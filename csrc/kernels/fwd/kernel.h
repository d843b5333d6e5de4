// The Kernel of the forward pass: grid mapping, per-sequence addressing (dense / varlen / paged
// through SeqInfo), GQA row packing, split-KV, and the combine kernel of flash-decoding.
//
// Grid: x = m_blocks * (batch * kv_heads), y = KV split. Masked (causal / window) problems put the
// (batch, kv head) fastest with m reversed, so that the longest blocks of every head start first
// (blocks are dispatched in x order); unmasked ones put m fastest, so that the blocks streaming the
// same K/V run together (L2 reuse).
// Rows: a block owns Policy::kBlockM "packed" rows of one (batch, kv head): packed row m is query row m / G of
// q head hkv*G + m % G (G = H / H_kv), so GQA/MQA heads share each K/V tile load, and decode
// (q_len 1..16) still fills the MMA rows.
#pragma once
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "epilogue.h"
#include "pipeline.h"

namespace fp8attn {

template <class Problem, class Policy, class Pipe>
__global__ void __launch_bounds__(Policy::kThreads) fwd_kernel(const __grid_constant__ FwdParams p) {
  using Tile = typename Policy::Tile;
  constexpr int kR = Tile::kRows;
  extern __shared__ __align__(128) uint8_t smem[];
  const int warp = threadIdx.x / Tile::kWarpSize, lane = threadIdx.x % Tile::kWarpSize;

  BlockCtx c;
  c.group = p.num_heads / p.num_heads_k;
  const int32_t m_blocks = (p.seqlen_q * c.group + Policy::kBlockM - 1) / Policy::kBlockM;
  const int32_t n_bh = p.batch * p.num_heads_k;
  const int32_t bh = Problem::kHasMask ? blockIdx.x % n_bh : blockIdx.x / m_blocks;
  const int32_t mb = Problem::kHasMask ? blockIdx.x / n_bh : blockIdx.x % m_blocks;
  c.b = bh / p.num_heads_k;
  c.hkv = bh % p.num_heads_k;
  c.seq = SeqInfo::make(p, c.b);
  c.rows = c.seq.q_len * c.group;
  c.m0 = (m_blocks - 1 - mb) * Policy::kBlockM;
  if (c.m0 >= c.rows) return;
  c.qrow0 = c.m0 / c.group;
  c.qrow1 = (min(c.m0 + Policy::kBlockM, c.rows) - 1) / c.group + 1;
  c.mask = Mask::make(p.window_left, p.window_right, p.is_causal, c.seq.q_len, c.seq.k_len);
  int32_t kb = 0, ke = c.seq.k_len;
  if (Problem::kHasMask) c.mask.key_range(c.qrow0, c.qrow1, &kb, &ke);
  const int32_t t_lo = kb / Policy::kBlockN, t_hi = ke > kb ? (ke + Policy::kBlockN - 1) / Policy::kBlockN : t_lo;
  const int32_t per = (t_hi - t_lo + p.num_splits - 1) / p.num_splits;
  c.tile_begin = min(t_hi, t_lo + static_cast<int32_t>(blockIdx.y) * per);
  c.tile_end = min(t_hi, c.tile_begin + per);

  // The thread's rows, their heads and logits transforms (scales are per q head / kv head). The
  // atom's products may come out scaled by a power of two (Tile::kInvProductScale undoes it,
  // exactly: see arch/amd_mfma.h); it is folded into the QK scale here and the O scale below.
  const float k_descale = p.k_descale ? p.k_descale[c.hkv * p.k_descale_head_stride] : 1.f;
  int32_t mrow[kR], qrow[kR], head[kR];
  LogitsTransform logits[kR];
#pragma unroll
  for (int ri = 0; ri < kR; ++ri) {
    mrow[ri] = c.m0 + warp * Tile::kRowsPerWarp + Tile::row_in_warp(lane, ri);
    const int32_t mr = min(mrow[ri], c.rows - 1);
    qrow[ri] = mr / c.group;
    head[ri] = c.hkv * c.group + mr % c.group;
    const float q_descale = p.q_descale ? p.q_descale[head[ri] * p.q_descale_head_stride] : 1.f;
    logits[ri] = LogitsTransform::make(p.softmax_scale, q_descale * k_descale * Tile::kInvProductScale, p.softcap);
  }
  const float p_scale = p.p_scale_ptr ? *p.p_scale_ptr : p.p_scale_default;
  const typename Policy::PQuant pq{1.f / p_scale};

  Pipe::load_q(p, c, smem);
  Pipe::prepare(smem);

  FwdState<Policy> st;
#pragma unroll
  for (int n = 0; n < Policy::kNTilesO; ++n) st.acc[n][0] = st.acc[n][1] = st.acc[n][2] = st.acc[n][3] = 0.f;
#pragma unroll
  for (int ri = 0; ri < kR; ++ri) {
    st.m[ri] = -INFINITY;
    st.l[ri] = 0.f;
  }
  Pipe::run(p, c, qrow, logits, pq, smem, st);  // its first barrier publishes Q and the K pad

  // ---- epilogue
  const float v_descale = p.v_descale ? p.v_descale[c.hkv * p.v_descale_head_stride] : 1.f;
  const OutputTransform<Problem::kFp8> ot = OutputTransform<Problem::kFp8>::make(p);
  const bool split = p.num_splits > 1;
  // The O tile may cover columns past D (the AMD tile's 32-wide d blocks): those are not stored.
  constexpr bool kPadCols = Tile::o_cols(Problem::kHeadDim) != Problem::kHeadDim;
#pragma unroll
  for (int ri = 0; ri < kR; ++ri) {
    const float l = Tile::row_sum(st.l[ri]);
    if (mrow[ri] >= c.rows) continue;
    const bool empty = st.m[ri] == -INFINITY;
    const float o_scale = empty ? 0.f : v_descale * Tile::kInvProductScale / l;
    const float lse = empty ? -INFINITY : lse_of(st.m[ri], l, p_scale);
    if (!split) {
      const int64_t off = out_offset(p, c.b, qrow[ri], head[ri]);
      // One loop per output type, each small enough to unroll completely, so that the accumulator
      // stays in registers (a type switch inside the loop does not unroll at D = 256: scratch).
      const auto store_row = [&](auto type) {
#pragma unroll
        for (int n = 0; n < Policy::kNTilesO; ++n) {
#pragma unroll
          for (int i = 0; i < 4; ++i) {
            const int d = Tile::o_col(lane, 4 * n + i);
            if (Tile::o_row(4 * n + i) == ri && (!kPadCols || d < Problem::kHeadDim))
              ot.template store_as<decltype(type)::value>(p.out, off + d, st.acc[n][i] * o_scale);
          }
        }
      };
      switch (ot.type) {
        case ElemType::BF16: store_row(std::integral_constant<ElemType, ElemType::BF16>{}); break;
        case ElemType::FP16: store_row(std::integral_constant<ElemType, ElemType::FP16>{}); break;
        default: store_row(std::integral_constant<ElemType, ElemType::FP8>{});
      }
      if (p.lse && Tile::row_leader(lane))
        p.lse[c.seq.lse_offset + static_cast<int64_t>(head[ri]) * p.lse_head_stride +
              static_cast<int64_t>(qrow[ri]) * p.lse_row_stride] = lse;
    } else {
      const int64_t row = (static_cast<int64_t>(blockIdx.y) * flat_rows(p) + flat_row(p, c.b, qrow[ri])) * p.num_heads +
                          head[ri];
      float* o = p.o_accum + row * p.head_dim;
#pragma unroll
      for (int n = 0; n < Policy::kNTilesO; ++n) {
#pragma unroll
        for (int i = 0; i < 4; i += 2) {  // elements (i, i + 1) are adjacent columns of one row
          const int d = Tile::o_col(lane, 4 * n + i);
          if (Tile::o_row(4 * n + i) == ri && (!kPadCols || d < Problem::kHeadDim))
            *reinterpret_cast<float2*>(o + d) = make_float2(st.acc[n][i] * o_scale, st.acc[n][i + 1] * o_scale);
        }
      }
      if (Tile::row_leader(lane)) p.lse_accum[row] = lse;
    }
  }
}

// Flash-decoding combine: one block of kCombineLanes threads per (query row, head) merges the
// splits' normalized partial outputs with weights exp(lse_s - max lse) (computed once, in shared
// memory), then applies the output transform and writes lse. Threads run over d, so the partial
// outputs are read coalesced and every load of the sum over splits is independent.
constexpr int kCombineWarps = 1;    // (row, head) items per block
constexpr int kCombineLanes = 128;  // threads per item
constexpr int kMaxSplits = 128;     // choose_num_splits and the entry point keep num_splits <= this

template <Fp8Kind K>
__global__ void __launch_bounds__(kCombineLanes * kCombineWarps) fwd_combine_kernel(const __grid_constant__ FwdParams p) {
  __shared__ float w[kMaxSplits];
  __shared__ float stat[2];
  const int tid = threadIdx.x;
  const int32_t b = blockIdx.y;
  const int64_t idx = blockIdx.x;
  const SeqInfo seq = SeqInfo::make(p, b);
  if (idx >= static_cast<int64_t>(seq.q_len) * p.num_heads) return;  // uniform over the block
  const int32_t qrow = static_cast<int32_t>(idx / p.num_heads), h = static_cast<int32_t>(idx % p.num_heads);
  const int64_t split_stride = flat_rows(p) * p.num_heads;
  const int64_t row0 = flat_row(p, b, qrow) * p.num_heads + h;
  const int S = p.num_splits < kMaxSplits ? p.num_splits : kMaxSplits;

  for (int s = tid; s < S; s += kCombineLanes) w[s] = p.lse_accum[s * split_stride + row0];
  __syncthreads();
  if (tid == 0) {
    float mx = -INFINITY, sum = 0.f;
    for (int s = 0; s < S; ++s) mx = fmaxf(mx, w[s]);
    if (mx != -INFINITY)
      for (int s = 0; s < S; ++s) sum += expf(w[s] - mx);
    stat[0] = mx;
    stat[1] = sum;
  }
  __syncthreads();
  const float mx = stat[0], wsum = stat[1];
  for (int s = tid; s < S; s += kCombineLanes) w[s] = (mx == -INFINITY || w[s] == -INFINITY) ? 0.f : expf(w[s] - mx);
  __syncthreads();

  const OutputTransform<K> ot = OutputTransform<K>::make(p);
  const int64_t off = out_offset(p, b, qrow, h);
  const float inv_wsum = mx == -INFINITY ? 0.f : 1.f / wsum;
  for (int d = tid; d < p.head_dim; d += kCombineLanes) {
    float o = 0.f;
    for (int s = 0; s < S; ++s) o += w[s] * p.o_accum[(s * split_stride + row0) * p.head_dim + d];
    ot.store(p.out, off + d, o * inv_wsum);
  }
  if (p.lse && tid == 0)
    p.lse[seq.lse_offset + static_cast<int64_t>(h) * p.lse_head_stride + static_cast<int64_t>(qrow) * p.lse_row_stride] =
        mx == -INFINITY ? -INFINITY : mx + logf(wsum);
}

}  // namespace fp8attn
