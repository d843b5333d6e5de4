// Launchers of the forward kernels, instantiated once per generated instance file.
#pragma once
#include <cuda_runtime.h>

#include <algorithm>
#include <type_traits>

#include "api.h"
#include "kernel.h"
#include "policy.h"

namespace fp8attn {

// The NVIDIA-only f16 pipeline (pipeline_f16.h) is included by the generated sm90 instance files
// only: declared here so that launch_fwd below compiles for every atom family.
template <class Problem>
struct FwdPolicyNvF16;
template <class Problem, class Policy>
struct FwdPipelineNvF16;
// The decode path (pipeline_decode.h, included by pipeline_f16.h).
template <class Problem>
void launch_fwd_decode(const FwdParams& p, cudaStream_t stream);
// The Hopper warp-specialized kernel (kernel_wgmma.h), included by the sm90a instance files only.
template <class Problem, int kKvTile>
void launch_fwd_wgmma(const FwdParams& p, cudaStream_t stream);

// Policy::kPersistent (optional): the kernel loops over work items on at most one block per SM.
template <class P, class = void>
struct IsPersistent : std::false_type {};
template <class P>
struct IsPersistent<P, std::void_t<decltype(P::kPersistent)>> : std::bool_constant<P::kPersistent> {};

// One kernel of a (Problem, Policy): the forward grid, then the combine kernel when split.
template <class Problem, class Policy, auto kKernel>
void launch_kernel(const FwdParams& params, cudaStream_t stream) {
  const FwdParams p = with_divisors<Policy>(params);
  // Once per kernel and process (not a stream operation: fine during graph capture).
  static const cudaError_t attr_err =
      cudaFuncSetAttribute(reinterpret_cast<const void*>(kKernel), cudaFuncAttributeMaxDynamicSharedMemorySize,
                           Policy::kSmemBytes);
  (void)attr_err;
  const int64_t nx = WorkGrid::of<Policy>(p).items();
  if (nx == 0) return;
  // Persistent kernels loop over the (x, split) work items: one block per multiprocessor at most.
  const dim3 grid = IsPersistent<Policy>::value
                        ? dim3(static_cast<unsigned>(std::min<int64_t>(nx * p.num_splits, std::max(p.num_sm, 1))))
                        : dim3(static_cast<unsigned>(nx), p.num_splits);
  kKernel<<<grid, Policy::kThreads, Policy::kSmemBytes, stream>>>(p);
  if (p.num_splits > 1) {
    const int64_t items = static_cast<int64_t>(p.seqlen_q) * p.num_heads;
    fwd_combine_kernel<Problem::kFp8><<<dim3(static_cast<unsigned>(items), p.batch), combine_threads(p), 0, stream>>>(p);
  }
}

// One (Problem, Policy, Pipeline) combination of the portable kernel.
template <class Problem, class Policy, class Pipe>
void launch_with(const FwdParams& p, cudaStream_t stream) {
  launch_kernel<Problem, Policy, &fwd_kernel<Problem, Policy, Pipe>>(p, stream);
}

// The instance entry point: picks the policy for the call's shape.
//   kE4M3: fp8 operands straight into the atom of this compiler's family (policy.h): e4m3
//          mma.sync on NVIDIA (native on sm_89), FP8 MFMA on AMD gfx942 / gfx950.
//   kWgmma: the Hopper warp-specialized wgmma pipeline (sm_90a; kernel_wgmma.h), KV tile kKvTile.
//   kF16:  operands widened to f16 in shared memory (sm_90), 4 warps x 16 rows; when a (batch,
//          kv head) has at most 16 packed rows (decode: q_len * H/H_kv <= 16) the decode pipeline
//          (pipeline_decode.h: rows on the n8 side of the MMA, one n8 tile per 8 rows, FP8 K/V
//          ring widened in registers).
template <class Problem, NvPipe kPipe, int kKvTile = kDefaultKvTile>
void launch_fwd(const FwdParams& p, cudaStream_t stream) {
  static_assert(kKvTile == kDefaultKvTile || kPipe == NvPipe::kWgmma, "only the wgmma pipeline has other KV tiles");
  if constexpr (kPipe == NvPipe::kWgmma) {
    launch_fwd_wgmma<Problem, kKvTile>(p, stream);
  } else if constexpr (kPipe == NvPipe::kE4M3) {
    using Policy = FwdPolicyFp8<Problem>;
    launch_with<Problem, Policy, FwdPipeline<Problem, Policy>>(p, stream);
  } else {
    const int64_t rows = static_cast<int64_t>(p.seqlen_q) * (p.num_heads / p.num_heads_k);
    if (rows <= 16) {
      launch_fwd_decode<Problem>(p, stream);
    } else {
      using Policy = FwdPolicyNvF16<Problem>;
      launch_with<Problem, Policy, FwdPipelineNvF16<Problem, Policy>>(p, stream);
    }
  }
}

}  // namespace fp8attn
