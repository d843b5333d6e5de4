// Launchers of the forward kernels, instantiated once per generated instance file.
#pragma once
#include <cuda_runtime.h>

#include "api.h"
#include "kernel.h"
#include "policy.h"

namespace fp8attn {

template <class Problem>
void launch_fwd(const FwdParams& p, cudaStream_t stream) {
  using Policy = FwdPolicyNvMma<Problem>;
  auto* kern = &fwd_kernel<Problem, Policy>;
  // Once per instance and process (not a stream operation: fine during graph capture).
  static const cudaError_t attr_err =
      cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, Policy::kSmemBytes);
  (void)attr_err;
  const int64_t group = p.num_heads / p.num_heads_k;
  const int64_t m_blocks = (static_cast<int64_t>(p.seqlen_q) * group + Policy::kBlockM - 1) / Policy::kBlockM;
  const int64_t nx = m_blocks * p.batch * p.num_heads_k;
  if (nx == 0) return;
  kern<<<dim3(static_cast<unsigned>(nx), p.num_splits), Policy::kThreads, Policy::kSmemBytes, stream>>>(p);
  if (p.num_splits > 1) {
    const int64_t items = static_cast<int64_t>(p.seqlen_q) * p.num_heads;
    const dim3 grid(static_cast<unsigned>((items + kCombineWarps - 1) / kCombineWarps), p.batch);
    fwd_combine_kernel<Problem::kFp8><<<grid, 32 * kCombineWarps, 0, stream>>>(p);
  }
}

}  // namespace fp8attn
