// Paged KV-cache write kernel (torch-free; launched from csrc/cuda/ops_cuda.cpp).
#pragma once
#include <cstdint>

#include <cuda_runtime.h>

#include "kernels/params.h"

namespace fp8attn {

struct KvWriteArgs {
  const void* src;
  void* cache;
  const int64_t* slots;
  const float* scale;  // null: 1
  int64_t src_t_stride, src_h_stride, c_block_stride, c_row_stride, c_head_stride;
  int64_t num_slots;  // num_blocks * block_size: the cache's slots
  int32_t heads, dim, block_size, src_bytes, cache_bytes;
  bool src_bf16;
  Fp8Kind kind;
};

// One block per token; tokens with a negative slot (padding) or one past the cache are skipped: a device
// slot_mapping is not validated on the host (no sync), and a write must never land outside the cache.
void launch_write_kv(const KvWriteArgs& a, int64_t tokens, cudaStream_t stream);

}  // namespace fp8attn
