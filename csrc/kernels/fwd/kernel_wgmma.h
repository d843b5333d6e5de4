// The Kernel of the Hopper warp-specialized pipeline: the same work items, addressing, rows and
// epilogue as fwd_kernel (kernel.h), run by persistent blocks (at most one per SM), with
// warpgroup 0 producing KV tiles and warpgroups 1.. each consuming them for 64 packed query rows. Compiled for sm_90a only (an empty body elsewhere; the
// host picks this pipeline on compute capability 9.0 only).
#pragma once
#include <cuda_runtime.h>

#include "../arch/nv_tma.h"
#include "epilogue_wgmma.h"
#include "launch.h"
#include "pipeline_wgmma.h"

namespace fp8attn {

// A persistent block's work items, walked by its producer, which publishes each non-empty one to the
// consumers (Producer::publish). Static: rounds of gridDim.x items in launch order, every other round in
// reverse block order (under a mask launch order is longest first, so plain round robin hands the low
// blocks the longer item of every round: at 1 x 8192 causal the last block ended ~6 % after the mean).
// Dynamic (p.item_counter, zeroed by the launcher: varlen, whose launch order follows the longest
// sequence and leaves static rounds ~10-20 % unbalanced, and masked calls, where some blocks of the
// static order take one item of every length, ~3 %): the first item is blockIdx.x, each next one
// gridDim.x + the counter's next value, fetched by producer thread 0 and broadcast to the producer
// warpgroup through shared memory (a named barrier; two slots, so one barrier per fetch).
// kBarrier: a named barrier id the block uses for nothing else (Policy::kBarItemFetch).
template <int kBarrier>
struct ItemSource {
  int32_t total, base = 0, fetches = 0;
  bool odd = false;
  FP8ATTN_DEVICE int32_t first() const { return static_cast<int32_t>(blockIdx.x); }
  // The next item; >= total: none left.
  FP8ATTN_DEVICE int32_t next(const FwdParams& p, int32_t* fetched, int ptid) {
    if (p.item_counter == nullptr) {
      base += static_cast<int32_t>(gridDim.x);
      odd = !odd;
      return base + static_cast<int32_t>(odd ? gridDim.x - 1 - blockIdx.x : blockIdx.x);
    }
    const int i = fetches++ & 1;
    if (ptid == 0) fetched[i] = static_cast<int32_t>(gridDim.x) + atomicAdd(p.item_counter, 1);
    nv::named_barrier_sync(kBarrier, 128);
    return *const_cast<const volatile int32_t*>(&fetched[i]);
  }
};

template <class Problem, class Policy, class Pipe>
__global__ void __launch_bounds__(Policy::kThreads, 1) fwd_kernel_wgmma(const __grid_constant__ FwdParams p) {
#if FP8ATTN_NV_WGMMA
  using Epilogue = EpilogueNvWgmma<Problem, Policy>;
  extern __shared__ __align__(1024) uint8_t smem_raw[];
  // Swizzled operand tiles need 1024-byte alignment (the policy reserves the slack).
  uint8_t* smem = smem_raw + ((1024 - nv::smem_addr(smem_raw) % 1024) % 1024);
  auto* bars = reinterpret_cast<typename Pipe::Barriers*>(smem + Policy::kOffBar);
  Pipe::init(smem, bars);
  __syncthreads();
  // The warpgroup index through a shuffle: ptxas then knows the role branch is warp-uniform
  // (a divergent path around wgmma makes it serialize every wgmma, info C7520).
  const int wg_idx = __shfl_sync(0xffffffffu, static_cast<int>(threadIdx.x / 128), 0);
  if (wg_idx == 0) {
    if constexpr (Policy::kProducerRegs > 0) nv::regs_dealloc<Policy::kProducerRegs>();
    typename Pipe::Producer prod(static_cast<int>(threadIdx.x), smem);
    // (items are (x, split) in launch order, ItemSource; the x extent is with_divisors' WorkGrid, read in each
    // role's branch: values live across the register reallocation spilled at D 256)
    const int32_t nx = static_cast<int32_t>(p.div_items.d), total = nx * p.num_splits;
    ItemSource<Policy::kBarItemFetch> src{total};
    for (int32_t item = src.first(); item < total; item = src.next(p, bars->fetched, prod.ptid)) {
      BlockCtx c;
      const int32_t split = p.div_items.div(item);
      if (make_block<Problem, Policy>(p, item - split * nx, split, c)) prod.item(p, c, item, smem, bars);
    }
    prod.finish(smem, bars);
  } else {
    if constexpr (Policy::kConsumerRegs > 0) nv::regs_alloc<Policy::kConsumerRegs>();
    int warp = threadIdx.x / 32 - 4, lane = threadIdx.x % 32;
    typename Epilogue::Scalars sc = Epilogue::kernel_scalars(p);
    const typename Policy::PQuant pq{1.f / sc.p_scale};
    typename Pipe::Consumer cons(warp / 4, smem);
    const int32_t nx = static_cast<int32_t>(p.div_items.d);
    for (int32_t item; (item = cons.next_item(bars)) >= 0;) {
      BlockCtx c;
      ThreadRows<typename Policy::Tile> tr;
      const auto block = [&]() {
        const int32_t split = p.div_items.div(item);
        make_block<Problem, Policy>(p, item - split * nx, split, c);  // (the producer publishes no empty item)
        sc.v_descale = v_descale_of(p, c.hkv);  // used after the KV loop: its load latency is hidden
        tr.init(p, c, warp, lane);
      };
      block();
      FwdState<Policy> st;
      init_state(st);
      cons.item(p, c, tr, pq, smem, bars, st);
      if constexpr (Policy::kSlots > 1) {
        // (D 256, 128-key steps) The block, rows and thread indices computed again for the epilogue,
        // from an opaque item index and a fresh thread-index read (the compiler cannot reuse the
        // first ones): live across the KV loop they spilled the consumers' registers.
        asm volatile("" : "+r"(item));
        const uint32_t tid = nv::fresh_tid();
        warp = static_cast<int>(tid / 32) - 4;
        lane = static_cast<int>(tid % 32);
        block();
      }
      if (Epilogue::staged(p))
        Epilogue::store(p, c, tr, st, sc, pq.inv_p_scale, Pipe::q_buf(smem, cons.qs), warp / 4, warp, lane);
      else
        store_rows<Problem, Policy>(p, c, tr, st, pq.inv_p_scale, lane);
      cons.release_q(bars);
      FP8ATTN_TRACE(kTraceConsumerStored);
    }
  }
#endif
}

// The K and V tensor maps of a call (pipeline_wgmma.h, load_kv_tma), in K's swizzle: dense or varlen,
// boxes of kSw bytes of d x 1 kv head x kRingN keys; a paged cache, boxes of 128 bytes of d x 1 kv
// head x 16 keys of one block (nv_tma.h, encode_kv_page_maps: blocks of a multiple of 16 keys). None
// for a layout TMA does not allow (other block sizes, unaligned strides, varlen rows unknown):
// every tile then takes cp.async.
template <class Policy>
bool encode_kv_maps(FwdParams& q) {
  if (q.block_table) return Policy::kSw == 128 && nv::encode_kv_page_maps(q, 128, 128);
  if (q.cu_seqlens_k && q.total_k <= 0) return false;
  const CUtensorMapSwizzle sw = Policy::kSw == 128 ? CU_TENSOR_MAP_SWIZZLE_128B : CU_TENSOR_MAP_SWIZZLE_64B;
  const auto encode = [&](void* map, const void* base, int64_t head, int64_t row, int64_t batch) {
    if (q.cu_seqlens_k) {
      const int64_t dims[3] = {q.head_dim, q.num_heads_k, q.total_k};
      const int64_t strides[2] = {head, row};
      const int box[3] = {Policy::kSw, 1, Policy::kRingN};
      return nv::encode_tiled_map(map, base, 3, dims, strides, box, sw);
    }
    const int64_t dims[4] = {q.head_dim, q.num_heads_k, q.seqlen_k, q.batch};
    const int64_t strides[3] = {head, row, batch};
    const int box[4] = {Policy::kSw, 1, Policy::kRingN, 1};
    return nv::encode_tiled_map(map, base, 4, dims, strides, box, sw);
  };
  return encode(q.k_tmap, q.k, q.k_head_stride, q.k_row_stride, q.k_batch_stride) &&
         encode(q.v_tmap, q.v, q.v_head_stride, q.v_row_stride, q.v_batch_stride);
}

template <class Problem, int kKvTile>
void launch_fwd_wgmma(const FwdParams& p, cudaStream_t stream) {
  using Policy = FwdPolicyNvWgmma<Problem, kKvTile>;
  FwdParams q = p;
  q.kv_tma = Policy::kTmaKV && encode_kv_maps<Policy>(q) ? 1 : 0;
  if (q.item_counter) (void)cudaMemsetAsync(q.item_counter, 0, sizeof(int32_t), stream);  // errors: the launch check
  launch_kernel<Problem, Policy, &fwd_kernel_wgmma<Problem, Policy, FwdPipelineNvWgmma<Problem, Policy>>>(q, stream);
}

}  // namespace fp8attn
