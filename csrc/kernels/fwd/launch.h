// Launch helpers of the forward kernels, used by the generated instance files (generate.py: each
// kernel's launcher is one of these or a pipeline's own, launch_decode_with / launch_fwd_wgmma).
#pragma once
#include <cuda_runtime.h>

#include <algorithm>
#include <type_traits>

#include "kernel.h"
#include "policy.h"

namespace fp8attn {

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

// The portable kernel (fwd_kernel) of one (Problem, Policy, Pipeline).
template <class Problem, class Policy, class Pipe>
void launch_with(const FwdParams& p, cudaStream_t stream) {
  launch_kernel<Problem, Policy, &fwd_kernel<Problem, Policy, Pipe>>(p, stream);
}

}  // namespace fp8attn
