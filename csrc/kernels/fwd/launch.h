// Launchers of the forward kernels, instantiated once per generated instance file.
#pragma once
#include <cuda_runtime.h>

#include "api.h"
#include "kernel.h"
#include "policy.h"

namespace fp8attn {

// The NVIDIA-only f16 pipeline (pipeline_f16.h) is included by the generated sm90 instance files
// only: declared here so that launch_fwd below compiles for every atom family.
template <class Problem, int kWarps_>
struct FwdPolicyNvF16;
template <class Problem, class Policy>
struct FwdPipelineNvF16;

// One (Problem, Policy, Pipeline) combination.
template <class Problem, class Policy, class Pipe>
void launch_with(const FwdParams& p, cudaStream_t stream) {
  auto* kern = &fwd_kernel<Problem, Policy, Pipe>;
  // Once per instance and process (not a stream operation: fine during graph capture).
  static const cudaError_t attr_err =
      cudaFuncSetAttribute(reinterpret_cast<const void*>(kern), cudaFuncAttributeMaxDynamicSharedMemorySize,
                           Policy::kSmemBytes);
  (void)attr_err;
  const int64_t group = p.num_heads / p.num_heads_k;
  const int64_t m_blocks = (static_cast<int64_t>(p.seqlen_q) * group + Policy::kBlockM - 1) / Policy::kBlockM;
  const int64_t nx = m_blocks * p.batch * p.num_heads_k;
  if (nx == 0) return;
  kern<<<dim3(static_cast<unsigned>(nx), p.num_splits), Policy::kThreads, Policy::kSmemBytes, stream>>>(p);
  if (p.num_splits > 1) {
    const int64_t items = static_cast<int64_t>(p.seqlen_q) * p.num_heads;
    const dim3 grid(static_cast<unsigned>((items + kCombineWarps - 1) / kCombineWarps), p.batch);
    fwd_combine_kernel<Problem::kFp8><<<grid, kCombineLanes * kCombineWarps, 0, stream>>>(p);
  }
}

// The instance entry point: picks the policy for the call's shape.
//   kE4M3: fp8 operands straight into the atom of this compiler's family (policy.h): e4m3
//          mma.sync on NVIDIA (native on sm_89), FP8 MFMA on AMD gfx942 / gfx950.
//   kF16:  operands widened to f16 in shared memory (sm_90), 4 warps x 16 rows; when a (batch,
//          kv head) has at most 16 packed rows (decode: q_len * H/H_kv <= 16) one warp per block,
//          so that no MMA rows are wasted and 4x more blocks stream the KV cache.
template <class Problem, NvPipe kPipe>
void launch_fwd(const FwdParams& p, cudaStream_t stream) {
  if constexpr (kPipe == NvPipe::kE4M3) {
    using Policy = FwdPolicyFp8<Problem>;
    launch_with<Problem, Policy, FwdPipeline<Problem, Policy>>(p, stream);
  } else {
    const int64_t rows = static_cast<int64_t>(p.seqlen_q) * (p.num_heads / p.num_heads_k);
    if (rows <= 16) {
      using Policy = FwdPolicyNvF16<Problem, 1>;
      launch_with<Problem, Policy, FwdPipelineNvF16<Problem, Policy>>(p, stream);
    } else {
      using Policy = FwdPolicyNvF16<Problem, 4>;
      launch_with<Problem, Policy, FwdPipelineNvF16<Problem, Policy>>(p, stream);
    }
  }
}

}  // namespace fp8attn
