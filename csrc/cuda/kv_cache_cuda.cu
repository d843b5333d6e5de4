// Paged KV-cache write: copy (same dtype) or quantize sat(x / scale) (16-bit into FP8), bit-exact
// with the CPU implementation (the shared numeric/ encoders).
#include "cuda/kv_cache_cuda.h"

#include "kernels/numeric/half.h"

namespace fp8attn {
namespace {
__global__ void write_kv_kernel(const KvWriteArgs a) {
  const int64_t t = blockIdx.x;
  const int64_t slot = a.slots[t];
  if (slot < 0 || slot >= a.num_slots) return;
  const float inv = a.scale ? 1.f / *a.scale : 1.f;
  const int64_t row = (slot / a.block_size) * a.c_block_stride + (slot % a.block_size) * a.c_row_stride;
  for (int i = threadIdx.x; i < a.heads * a.dim; i += blockDim.x) {
    const int h = i / a.dim, d = i % a.dim;
    const int64_t so = t * a.src_t_stride + h * a.src_h_stride + d;
    const int64_t co = row + h * a.c_head_stride + d;
    if (a.src_bytes == a.cache_bytes) {
      if (a.src_bytes == 1)
        static_cast<uint8_t*>(a.cache)[co] = static_cast<const uint8_t*>(a.src)[so];
      else
        static_cast<uint16_t*>(a.cache)[co] = static_cast<const uint16_t*>(a.src)[so];
    } else {
      const uint16_t bits = static_cast<const uint16_t*>(a.src)[so];
      const float x = (a.src_bf16 ? bf16_decode(bits) : fp16_decode(bits)) * inv;
      static_cast<uint8_t*>(a.cache)[co] =
          a.kind == Fp8Kind::E4M3FN ? fp8_encode<Fp8Kind::E4M3FN>(x) : fp8_encode<Fp8Kind::E4M3FNUZ>(x);
    }
  }
}

}  // namespace

void launch_write_kv(const KvWriteArgs& a, int64_t tokens, cudaStream_t stream) {
  if (tokens > 0) write_kv_kernel<<<static_cast<unsigned>(tokens), 256, 0, stream>>>(a);
}

}  // namespace fp8attn
