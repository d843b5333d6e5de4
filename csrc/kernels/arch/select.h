// The atom family of this compiler: NVIDIA (nvcc: nv_mma.h) or AMD (hip clang after hipify:
// amd_mfma.h). This file and the atom headers are the only places that test the platform; the
// pipeline, policy, kernel and epilogue use DefaultArch / its Tile and the helpers below.
//   DefaultArch::Tile<K>   the warp tile of the fp8-operand pipeline (see nv::Sm89Tile's comment)
//   DefaultArch::kSmemLimit the shared memory (LDS) one block may use
//   FP8ATTN_NV_ATOMS       1 when the NVIDIA atoms (and the NVIDIA-only pipelines) are available
//   lane_xor(x, mask)      exchange with lane ^ mask inside a group of 32 consecutive threads
//                          (mask < 32: on a 64-lane wavefront the two halves stay independent)
//   pdl_launch_dependents / pdl_wait   Programmatic Dependent Launch (NVIDIA sm_90+; no-ops elsewhere)
#pragma once

#if defined(__HIP__) || defined(__HIP_PLATFORM_AMD__)
#include "amd_mfma.h"
#define FP8ATTN_NV_ATOMS 0
namespace fp8attn {
using DefaultArch = amd::Gfx9;
FP8ATTN_DEVICE float lane_xor(float x, int mask) { return amd::shfl_xor(x, mask); }
using amd::pdl_launch_dependents;
using amd::pdl_wait;
}  // namespace fp8attn
#else
#include "nv_mma.h"
#define FP8ATTN_NV_ATOMS 1
namespace fp8attn {
using DefaultArch = nv::Sm89;
FP8ATTN_DEVICE float lane_xor(float x, int mask) { return nv::shfl_xor(x, mask); }
using nv::pdl_launch_dependents;
using nv::pdl_wait;
}  // namespace fp8attn
#endif
