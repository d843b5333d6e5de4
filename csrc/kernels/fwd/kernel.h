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

#include "../scales.h"
#include "epilogue.h"
#include "pipeline.h"

namespace fp8attn {

// The work items' x extent of a call (host side): m blocks of Policy::kBlockM packed rows (GQA group
// x seqlen_q, the longest sequence) times (batch, kv head) pairs.
struct WorkGrid {
  int64_t group, m_blocks, n_bh;
  int64_t items() const { return m_blocks * n_bh; }
  template <class Policy>
  static WorkGrid of(const FwdParams& p) {
    const int64_t group = p.num_heads / p.num_heads_k;
    return {group, (static_cast<int64_t>(p.seqlen_q) * group + Policy::kBlockM - 1) / Policy::kBlockM,
            static_cast<int64_t>(p.batch) * p.num_heads_k};
  }
};

// p with the divisors of the per-item code (params.h) for a kernel of Policy::kBlockM rows per block.
template <class Policy>
FwdParams with_divisors(const FwdParams& p) {
  FwdParams q = p;
  const WorkGrid w = WorkGrid::of<Policy>(p);
  const auto of = [](int64_t d) { return FastDiv::of(static_cast<uint32_t>(d > 1 ? d : 1)); };
  q.div_group = of(w.group);
  q.div_heads_k = of(p.num_heads_k);
  q.div_m_blocks = of(w.m_blocks);
  q.div_bh = of(w.n_bh);
  q.div_items = of(w.items());
  q.div_page = of(p.page_block_size);
  return q;
}

// The ids of work item (x, split): batch, kv head, first packed row, split (no memory reads).
template <class Problem, class Policy>
FP8ATTN_DEVICE void block_ids(const FwdParams& p, int32_t x, int32_t split, BlockCtx& c) {
  c.group = static_cast<int32_t>(p.div_group.d);  // (the sizes of with_divisors' WorkGrid)
  const int32_t m_blocks = static_cast<int32_t>(p.div_m_blocks.d), n_bh = static_cast<int32_t>(p.div_bh.d);
  const int32_t hi = Problem::kHasMask ? p.div_bh.div(x) : p.div_m_blocks.div(x);
  const int32_t bh = Problem::kHasMask ? x - hi * n_bh : hi;
  const int32_t mb = Problem::kHasMask ? hi : x - hi * m_blocks;
  c.b = p.div_heads_k.div(bh);
  c.hkv = bh - c.b * p.num_heads_k;
  c.m0 = (m_blocks - 1 - mb) * Policy::kBlockM;
  c.split = split;
}

// c's rows, mask and KV tile range of its split from its sequence's lengths (c.seq.q_len, k_len); false
// when it has no rows (the grid covers the longest sequence).
template <class Problem, class Policy>
FP8ATTN_DEVICE bool block_range(const FwdParams& p, BlockCtx& c) {
  c.rows = c.seq.q_len * c.group;
  if (c.m0 >= c.rows) return false;
  c.qrow0 = c.q_row(p, c.m0);
  c.qrow1 = c.q_row(p, min(c.m0 + Policy::kBlockM, c.rows) - 1) + 1;
  c.mask = Mask::make(p.window_left, p.window_right, p.is_causal, c.seq.q_len, c.seq.k_len);
  int32_t kb = 0, ke = c.seq.k_len;
  if (Problem::kHasMask) c.mask.key_range(c.qrow0, c.qrow1, &kb, &ke);
  const int32_t t_lo = kb / Policy::kBlockN, t_hi = ke > kb ? (ke + Policy::kBlockN - 1) / Policy::kBlockN : t_lo;
  const int32_t per = p.num_splits == 1 ? t_hi - t_lo : (t_hi - t_lo + p.num_splits - 1) / p.num_splits;
  c.tile_begin = min(t_hi, t_lo + c.split * per);
  c.tile_end = min(t_hi, c.tile_begin + per);
  return true;
}

// The BlockCtx of work item (x, split) (sequence, rows, mask, KV tile range of its split); false
// when it has no rows.
template <class Problem, class Policy>
FP8ATTN_DEVICE bool make_block(const FwdParams& p, int32_t x, int32_t split, BlockCtx& c) {
  block_ids<Problem, Policy>(p, x, split, c);
  c.seq = SeqInfo::make(p, c.b);
  return block_range<Problem, Policy>(p, c);
}


template <class Policy>
FP8ATTN_DEVICE void init_state(FwdState<Policy>& st) {
#pragma unroll
  for (int n = 0; n < Policy::kNTilesO; ++n) st.acc[n][0] = st.acc[n][1] = st.acc[n][2] = st.acc[n][3] = 0.f;
#pragma unroll
  for (int ri = 0; ri < Policy::Tile::kRows; ++ri) {
    st.m[ri] = -INFINITY;
    st.l[ri] = 0.f;
  }
}

// Per row of the thread: the factor from acc to O (v_descale / l; 0 for a row with no visible key)
// and lse, after the row's attention sink when the call has sinks (softmax.h, add_sink: once, after
// the KV loop) and is not split (the combine kernel adds it then). tr: the rows of st's layout (their
// heads). Branch-free (a call without sinks takes sink = -inf, which leaves the row as it is): a branch
// here made ptxas rematerialize addresses inside the decodewg KV loop. inv_p_scale: the PQuant's
// 1 / p_scale (a division here spilled the D 256 wgmma consumers).
template <class Policy>
struct RowScales {
  using Tile = typename Policy::Tile;
  float o_scale[Tile::kRows], lse[Tile::kRows];

  FP8ATTN_DEVICE RowScales(const FwdParams& p, const ThreadRows<Tile>& tr, const FwdState<Policy>& st, float p_scale,
                           float inv_p_scale, float v_descale) {
    const float* sinks = p.num_splits == 1 ? p.sinks : nullptr;
#pragma unroll
    for (int ri = 0; ri < Tile::kRows; ++ri) {
      const float sink = sinks ? sinks[tr.head[ri]] * kLog2e : -INFINITY;
      const SinkRow sr = add_sink(st.m[ri], Tile::row_sum(st.l[ri]), sink, inv_p_scale, Exp2Precise{});
      const RowResult r = finish_row(sr.m, sr.l, v_descale * Tile::kInvProductScale * sr.acc_scale, p_scale);
      o_scale[ri] = r.o_scale;
      lse[ri] = r.lse;
    }
  }
};

template <class Tile>
FP8ATTN_DEVICE void store_lse(const FwdParams& p, const BlockCtx& c, const ThreadRows<Tile>& tr, int ri, float lse,
                              int lane) {
  if (p.lse && Tile::row_leader(lane) && tr.mrow[ri] < c.rows)
    p.lse[c.seq.lse_offset + static_cast<int64_t>(tr.head[ri]) * p.lse_head_stride +
          static_cast<int64_t>(tr.qrow[ri]) * p.lse_row_stride] = lse;
}

// The Epilogue call of every pipeline: the thread's rows of O (and lse) to out, or to the split
// workspace when the KV range is split.
// rs, ot: the rows' scales and the output transform (a kernel may have read their inputs ahead).
template <class Problem, class Policy>
FP8ATTN_DEVICE void store_rows(const FwdParams& p, const BlockCtx& c, const ThreadRows<typename Policy::Tile>& tr,
                               const FwdState<Policy>& st, int lane, const RowScales<Policy>& rs,
                               const OutputTransform<Problem::kFp8>& ot) {
  using Tile = typename Policy::Tile;
  const bool split = p.num_splits > 1;
  // The O tile may cover columns past D (the AMD tile's 32-wide d blocks): those are not stored.
  constexpr bool kPadCols = Tile::o_cols(Problem::kHeadDim) != Problem::kHeadDim;
#pragma unroll
  for (int ri = 0; ri < Tile::kRows; ++ri) {
    if (tr.mrow[ri] >= c.rows) continue;
    const float o_scale = rs.o_scale[ri], lse = rs.lse[ri];
    if (!split) {
      const int64_t off = out_offset(p, c.b, tr.qrow[ri], tr.head[ri]);
      // One loop per output type, each small enough to unroll completely, so that the accumulator
      // stays in registers (a type switch inside the loop does not unroll at D = 256: scratch).
      const auto store_row = [&](auto type) {
#pragma unroll
        for (int n = 0; n < Policy::kNTilesO; ++n) {
#pragma unroll
          for (int i = 0; i < 4; ++i) {
            const int d = Tile::o_col(lane, 4 * n + i);
            if (Tile::o_row(4 * n + i) == ri && (!kPadCols || d < Problem::kHeadDim))
              ot.template store_as<decltype(type)::value>(p.out, off + d, out_value(st.acc[n][i], o_scale));
          }
        }
      };
      switch (ot.type) {
        case ElemType::BF16: store_row(std::integral_constant<ElemType, ElemType::BF16>{}); break;
        case ElemType::FP16: store_row(std::integral_constant<ElemType, ElemType::FP16>{}); break;
        default: store_row(std::integral_constant<ElemType, ElemType::FP8>{});
      }
      store_lse(p, c, tr, ri, lse, lane);
    } else {
      const int64_t row =
          (static_cast<int64_t>(c.split) * flat_rows(p) + flat_row(p, c.b, tr.qrow[ri])) * p.num_heads + tr.head[ri];
      float* o = p.o_accum + row * p.head_dim;
#pragma unroll
      for (int n = 0; n < Policy::kNTilesO; ++n) {
#pragma unroll
        for (int i = 0; i < 4; i += 2) {  // elements (i, i + 1) are adjacent columns of one row
          const int d = Tile::o_col(lane, 4 * n + i);
          if (Tile::o_row(4 * n + i) == ri && (!kPadCols || d < Problem::kHeadDim))
            *reinterpret_cast<float2*>(o + d) = make_float2(out_value(st.acc[n][i], o_scale), out_value(st.acc[n][i + 1], o_scale));
        }
      }
      if (Tile::row_leader(lane)) p.lse_accum[row] = lse;
    }
  }
}
// inv_p_scale: the call's PQuant's (RowScales).
template <class Problem, class Policy>
FP8ATTN_DEVICE void store_rows(const FwdParams& p, const BlockCtx& c, const ThreadRows<typename Policy::Tile>& tr,
                               const FwdState<Policy>& st, float inv_p_scale, int lane) {
  store_rows<Problem, Policy>(p, c, tr, st, lane, RowScales<Policy>(p, tr, st, p_scale_of<Problem::kFp8>(p), inv_p_scale, v_descale_of(p, c.hkv)),
                             OutputTransform<Problem::kFp8>::make(p));
}

// One block of the forward pass: the body of fwd_kernel (the decode kernels run the same steps in another
// order: pipeline_decode.h, decode_block).
template <class Problem, class Policy, class Pipe>
FP8ATTN_DEVICE void fwd_block(const FwdParams& p) {
  using Tile = typename Policy::Tile;
  extern __shared__ __align__(128) uint8_t smem[];
  const int warp = threadIdx.x / Tile::kWarpSize, lane = threadIdx.x % Tile::kWarpSize;
  BlockCtx c;
  FP8ATTN_TRACE(kTraceKernelStart);
  if (!make_block<Problem, Policy>(p, blockIdx.x, blockIdx.y, c)) return;
  const typename Policy::PQuant pq{1.f / p_scale_of<Problem::kFp8>(p)};

  Pipe::load_q(p, c, smem);
  Pipe::prepare(smem);
  FwdState<Policy> st;
  init_state(st);
  Pipe::run(p, c, pq, smem, st);  // its first barrier publishes Q and the K pad
  ThreadRows<Tile> tr;  // the rows of st's layout
  tr.init(p, c, warp, lane);
  store_rows<Problem, Policy>(p, c, tr, st, pq.inv_p_scale, lane);
  FP8ATTN_TRACE(kTraceRowsStored);
}

template <class Problem, class Policy, class Pipe>
__global__ void __launch_bounds__(Policy::kThreads) fwd_kernel(const __grid_constant__ FwdParams p) {
  fwd_block<Problem, Policy, Pipe>(p);
}

// Flash-decoding combine: one block per (query row, head) merges the splits' normalized partial
// outputs with weights exp(lse_s - max lse) (warp 0 computes them once, into shared memory), then
// applies the output transform and writes lse; the row's attention sink (natural units, like the
// splits' lse, which do not hold it) is one more term of the weights' sum, added once here. Thread
// (group s0, float4 column j) sums column j over splits s0, s0 + G, ... (G = threads / (D/4) groups):
// the partial outputs are read coalesced, and the first kCombinePre of a thread's loads are issued
// before the weights are known, so that the lse and O reads overlap (one memory round trip instead of
// two); the groups' sums are then added in group order (deterministic).
constexpr int kCombineMaxThreads = 256;
constexpr int kCombinePre = 8;   // partial-output loads per thread issued before the weights
constexpr int kMaxSplits = 128;  // choose_num_splits and the entry point keep num_splits <= this

// Threads of a combine block: the fewest (128 or 256) whose first kCombinePre loads cover every
// split (at D 128: 256 from 33 splits on; 1x32k decode takes 64).
FP8ATTN_HD int combine_threads(const FwdParams& p) {
  return p.num_splits * (p.head_dim / 4) <= kCombinePre * 128 ? 128 : kCombineMaxThreads;
}

template <Fp8Kind K>
__global__ void __launch_bounds__(kCombineMaxThreads) fwd_combine_kernel(const __grid_constant__ FwdParams p) {
  __shared__ float w[kMaxSplits];
  __shared__ float stat[2];
  __shared__ float4 part[kCombineMaxThreads];
  const int tid = threadIdx.x;
  const int32_t b = blockIdx.y;
  const int64_t idx = blockIdx.x;
  const SeqInfo seq = SeqInfo::make(p, b);
  if (idx >= static_cast<int64_t>(seq.q_len) * p.num_heads) return;  // uniform over the block
  const int32_t qrow = static_cast<int32_t>(idx / p.num_heads), h = static_cast<int32_t>(idx % p.num_heads);
  const int64_t split_stride = flat_rows(p) * p.num_heads;
  const int64_t row0 = flat_row(p, b, qrow) * p.num_heads + h;
  const int S = p.num_splits < kMaxSplits ? p.num_splits : kMaxSplits;
  const int cols = p.head_dim / 4, groups = static_cast<int>(blockDim.x) / cols;  // head_dim: a multiple of 16, <= 256
  const int j = tid % cols, s0 = tid / cols;
  const float4* src = reinterpret_cast<const float4*>(p.o_accum + row0 * p.head_dim) + j;
  const int64_t step = split_stride * p.head_dim / 4;
  pdl_wait();  // the forward grid's lse_accum / o_accum (when launched as its programmatic dependent)
  float4 pre[kCombinePre];
#pragma unroll
  for (int i = 0; i < kCombinePre; ++i) {
    const int s = s0 + i * groups;
    pre[i] = s0 < groups && s < S ? src[s * step] : make_float4(0.f, 0.f, 0.f, 0.f);
  }

  if (tid < 32) {
    float mx = -INFINITY, sum = 0.f;
    for (int s = tid; s < S; s += 32) {
      w[s] = p.lse_accum[s * split_stride + row0];
      mx = max_nan(mx, w[s]);  // (a NaN row's splits are NaN: so is its output)
    }
#pragma unroll
    for (int x = 1; x < 32; x *= 2) mx = max_nan(mx, lane_xor(mx, x));
    if (p.sinks) mx = max_nan(mx, p.sinks[h]);  // (read again below: a register less across the loop)
    for (int s = tid; s < S; s += 32) {
      w[s] = (mx == -INFINITY || w[s] == -INFINITY) ? 0.f : expf(w[s] - mx);
      sum += w[s];
    }
#pragma unroll
    for (int x = 1; x < 32; x *= 2) sum += lane_xor(sum, x);
    if (tid == 0) {
      stat[0] = mx;
      stat[1] = p.sinks ? sum + expf(p.sinks[h] - mx) : sum;
    }
  }
  __syncthreads();
  const float mx = stat[0], wsum = stat[1];

  float4 o = make_float4(0.f, 0.f, 0.f, 0.f);
  const auto add = [&](int s, const float4& v) {
    o.x += w[s] * v.x;
    o.y += w[s] * v.y;
    o.z += w[s] * v.z;
    o.w += w[s] * v.w;
  };
  if (s0 < groups) {
#pragma unroll
    for (int i = 0; i < kCombinePre; ++i)
      if (s0 + i * groups < S) add(s0 + i * groups, pre[i]);
#pragma unroll 4
    for (int s = s0 + kCombinePre * groups; s < S; s += groups) add(s, src[s * step]);
  }
  part[tid] = o;
  __syncthreads();
  if (tid < cols) {
    for (int gi = 1; gi < groups; ++gi) {
      const float4 v = part[gi * cols + tid];
      o.x += v.x;
      o.y += v.y;
      o.z += v.z;
      o.w += v.w;
    }
    const OutputTransform<K> ot = OutputTransform<K>::make(p);
    const int64_t off = out_offset(p, b, qrow, h) + 4 * tid;
    const float inv_wsum = mx == -INFINITY ? 0.f : 1.f / wsum;
    ot.store(p.out, off, o.x * inv_wsum);
    ot.store(p.out, off + 1, o.y * inv_wsum);
    ot.store(p.out, off + 2, o.z * inv_wsum);
    ot.store(p.out, off + 3, o.w * inv_wsum);
  }
  if (p.lse && tid == 0)
    p.lse[seq.lse_offset + static_cast<int64_t>(h) * p.lse_head_stride + static_cast<int64_t>(qrow) * p.lse_row_stride] =
        mx == -INFINITY ? -INFINITY : mx + logf(wsum);
}

}  // namespace fp8attn
