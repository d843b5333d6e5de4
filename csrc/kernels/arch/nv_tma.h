// TMA tensor copies of whole cache pages (sm_90): the host encodes a 4D tensor map of a paged
// K or V cache [num_blocks, block_size, Hkv, D] (bytes) whose box is 16 tokens x 1 kv head x
// `box_width` bytes of d, and the device loads one box with one instruction. A box wider than D
// reads zeros past D (out-of-bounds fill): the rows land padded in shared memory, as the decode
// ring's bank-conflict-free layout wants. The driver entry point is looked up at run time, so
// the build needs no libcuda.
#pragma once
#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "../common.h"

namespace fp8attn {
namespace nv {

// Encodes `map` for the cache at `base` (strides in bytes: head, row, block); false when the
// driver or the layout does not allow it (the caller keeps the per-row copies).
inline bool encode_page_map(void* map, const void* base, int d, int hkv, int block_size, int num_blocks,
                            int64_t head_stride, int64_t row_stride, int64_t block_stride, int box_width) {
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
  if (encode == nullptr || box_width > 256 || box_width % 16 || block_size % 16 ||
      reinterpret_cast<uintptr_t>(base) % 16 || head_stride % 16 || row_stride % 16 || block_stride % 16)
    return false;
  const cuuint64_t dims[4] = {static_cast<cuuint64_t>(d), static_cast<cuuint64_t>(hkv),
                              static_cast<cuuint64_t>(block_size), static_cast<cuuint64_t>(num_blocks)};
  const cuuint64_t strides[3] = {static_cast<cuuint64_t>(head_stride), static_cast<cuuint64_t>(row_stride),
                                 static_cast<cuuint64_t>(block_stride)};
  const cuuint32_t box[4] = {static_cast<cuuint32_t>(box_width), 1, 16, 1};
  const cuuint32_t unit[4] = {1, 1, 1, 1};
  return encode(static_cast<CUtensorMap*>(map), CU_TENSOR_MAP_DATA_TYPE_UINT8, 4, const_cast<void*>(base), dims,
                strides, box, unit, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_NONE,
                CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

// One box of `map` (a kernel parameter: __grid_constant__) at element coordinates (d, head, row
// in block, block) into shared memory (128-byte aligned), completed on `bar` (sm_90+: callers
// branch on the architecture, like those of nv_wgmma.h's bulk copies).
FP8ATTN_DEVICE void tma_load_page(void* smem, const void* map, int32_t c0, int32_t c1, int32_t c2, int32_t c3,
                                  uint64_t* bar) {
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4, %5}], "
      "[%6];\n" ::"r"(static_cast<uint32_t>(__cvta_generic_to_shared(smem))),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(c3),
      "r"(static_cast<uint32_t>(__cvta_generic_to_shared(bar)))
      : "memory");
}

}  // namespace nv
}  // namespace fp8attn
