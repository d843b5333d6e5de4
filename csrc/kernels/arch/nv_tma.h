// TMA tensor copies (sm_90): the host encodes a tiled tensor map of a K or V tensor (bytes, rank
// <= 4) and the device loads one box with one instruction, completed on an mbarrier's transaction
// count; out-of-bounds elements read as zeros. The decode ring loads cache pages (a box wider than
// D lands rows padded, as its bank-conflict-free layout wants); the Hopper prefill producer loads K
// and V tiles in the wgmma operand swizzle. The driver entry point is looked up at run time, so the
// build needs no libcuda.
#pragma once
#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "../common.h"
#include "../params.h"

namespace fp8attn {
namespace nv {

// Whether this device pass has the TMA engine's bulk copies (sm_90+; the host pass: no).
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
constexpr bool kBulkCopy = true;
#else
constexpr bool kBulkCopy = false;
#endif

// Encodes `map`, a tiled tensor map of bytes of rank `rank` (<= 4): dims innermost first, strides
// (bytes) of dims 1.., box extents; OOB elements of a box read as zeros. False when the driver
// entry point is missing or the layout breaks TMA's rules (16-byte aligned base and strides).
inline bool encode_tiled_map(void* map, const void* base, int rank, const int64_t* dims, const int64_t* strides,
                             const int* box, CUtensorMapSwizzle swizzle) {
  using EncodeFn = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*,
                                const cuuint64_t*, const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave,
                                CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);
  static EncodeFn encode = [] {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult found{};
#if CUDART_VERSION >= 12050
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &found) != cudaSuccess)
      fn = nullptr;
#else
    if (cudaGetDriverEntryPoint("cuTensorMapEncodeTiled", &fn, cudaEnableDefault, &found) != cudaSuccess) fn = nullptr;
#endif
    return found == cudaDriverEntryPointSuccess ? reinterpret_cast<EncodeFn>(fn) : nullptr;
  }();
  if (encode == nullptr || rank < 1 || rank > 4 || reinterpret_cast<uintptr_t>(base) % 16) return false;
  cuuint64_t d[4], st[3];
  cuuint32_t bx[4];
  const cuuint32_t unit[4] = {1, 1, 1, 1};
  for (int i = 0; i < rank; ++i) {
    if (dims[i] <= 0 || box[i] <= 0 || box[i] > 256) return false;
    d[i] = static_cast<cuuint64_t>(dims[i]);
    bx[i] = static_cast<cuuint32_t>(box[i]);
    if (i + 1 < rank) {
      if (strides[i] <= 0 || strides[i] % 16) return false;
      st[i] = static_cast<cuuint64_t>(strides[i]);
    }
  }
  return encode(static_cast<CUtensorMap*>(map), CU_TENSOR_MAP_DATA_TYPE_UINT8, static_cast<cuuint32_t>(rank),
                const_cast<void*>(base), d, st, bx, unit, CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle,
                CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

// The map of a paged K or V cache [num_blocks, block_size, Hkv, D] (strides in bytes: head, row,
// block): boxes of 16 tokens x 1 kv head x `box_width` bytes (past D: zeros, the rows' padding), in
// the operand swizzle of `swizzle` bytes (64 or 128; = box_width) or none (0).
inline bool encode_page_map(void* map, const void* base, int d, int hkv, int block_size, int num_blocks,
                            int64_t head_stride, int64_t row_stride, int64_t block_stride, int box_width,
                            int swizzle) {
  if (box_width % 16 || block_size % 16 || (swizzle && box_width != swizzle)) return false;
  const int64_t dims[4] = {d, hkv, block_size, num_blocks};
  const int64_t strides[3] = {head_stride, row_stride, block_stride};
  const int box[4] = {box_width, 1, 16, 1};
  return encode_tiled_map(map, base, 4, dims, strides, box,
                          swizzle == 128  ? CU_TENSOR_MAP_SWIZZLE_128B
                          : swizzle == 64 ? CU_TENSOR_MAP_SWIZZLE_64B
                                          : CU_TENSOR_MAP_SWIZZLE_NONE);
}

// The page maps of a paged call's K and V caches into q.k_tmap / q.v_tmap (the decode ring's, and the
// wgmma prefill's at box_width 128 in the swizzle); false when either layout does not allow one.
inline bool encode_kv_page_maps(FwdParams& q, int box_width, int swizzle) {
  return encode_page_map(q.k_tmap, q.k, q.head_dim, q.num_heads_k, q.page_block_size, q.num_cache_blocks,
                         q.k_head_stride, q.k_row_stride, q.k_batch_stride, box_width, swizzle) &&
         encode_page_map(q.v_tmap, q.v, q.head_dim, q.num_heads_k, q.page_block_size, q.num_cache_blocks,
                         q.v_head_stride, q.v_row_stride, q.v_batch_stride, box_width, swizzle);
}

// One box of the rank-4 `map` (a kernel parameter: __grid_constant__) at element coordinates
// (c0 innermost .. c3) into shared memory (128-byte aligned; 1024 for the 128B swizzle), completed
// on `bar` (sm_90+: callers branch on the architecture, like those of nv_wgmma.h's bulk copies).
FP8ATTN_DEVICE void tma_load_4d(void* smem, const void* map, int32_t c0, int32_t c1, int32_t c2, int32_t c3,
                                uint64_t* bar) {
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4, %5}], "
      "[%6];\n" ::"r"(static_cast<uint32_t>(__cvta_generic_to_shared(smem))),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(c3),
      "r"(static_cast<uint32_t>(__cvta_generic_to_shared(bar)))
      : "memory");
}

// The same for a rank-3 map (coordinates d, head, row).
FP8ATTN_DEVICE void tma_load_3d(void* smem, const void* map, int32_t c0, int32_t c1, int32_t c2, uint64_t* bar) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4}], "
      "[%5];\n" ::"r"(static_cast<uint32_t>(__cvta_generic_to_shared(smem))),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(c2),
      "r"(static_cast<uint32_t>(__cvta_generic_to_shared(bar)))
      : "memory");
}

}  // namespace nv
}  // namespace fp8attn
