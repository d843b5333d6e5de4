// CUDA (and, hipified, HIP) entry points of the ops, compiled by the host C++ compiler (the .cu
// files stay torch-free): argument checks and params come from make_fwd_params (shared with the
// CPU); this file only picks the kernel (choose_fwd_kernel over the generated table, for the
// device's target), sizes the split-KV workspace and launches on the current stream. No host synchronisation: safe under
// CUDA graph capture.
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include <algorithm>
#include <cstdlib>
#include <string>
#include <utility>

#include "cuda/kv_cache_cuda.h"
#include "kernels/fwd/api.h"
#include "kernels/fwd/decode_config.h"
#include "kernels/fwd/epilogue.h"
#include "kv_cache_args.h"
#include "ops.h"

namespace fp8attn {
namespace {

// FP8ATTN_NUM_SPLITS=N forces the split count (tests use 1 to compare with the CPU tile for tile).
int32_t split_override() {
  const char* e = std::getenv("FP8ATTN_NUM_SPLITS");
  return e && *e ? std::atoi(e) : 0;
}

// FP8ATTN_PIPELINE=<pipeline> prefers that pipeline where it has a kernel for a call (read once).
int32_t preferred_pipe() {
  static const char* const name = std::getenv("FP8ATTN_PIPELINE");
  static const int32_t pipe = fwd_pipe_index(fwd_table(), name);
  if (pipe == -2) {
    std::string known;
    for (int i = 0; i < fwd_table().num_pipes; ++i) known += std::string(i ? ", " : "") + fwd_table().pipes[i];
    TORCH_CHECK_VALUE(false, "fp8attn.forward on CUDA: FP8ATTN_PIPELINE=", name, " names no pipeline (known: ",
                      known, ")");
  }
  return pipe;
}

std::pair<int, int> device_cc(c10::DeviceIndex dev) {
  static std::pair<int, int> cache[64];
  if (dev < 0 || dev >= 64) return {0, 0};
  if (cache[dev].first == 0) {
    int major = 0, minor = 0;
    C10_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
    C10_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev));
    cache[dev] = {major, minor};
  }
  return cache[dev];
}

int32_t multiprocessors(c10::DeviceIndex dev) {
  static int32_t cache[64] = {0};
  if (dev < 0 || dev >= 64) return 0;
  if (cache[dev] == 0) {
    int n = 0;
    C10_CUDA_CHECK(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev));
    cache[dev] = n;
  }
  return cache[dev];
}

void check_supported(const FwdParams& p, const FwdKernel* k) {
  if (const char* why = fwd_unsupported_reason(fwd_table(), p, k))
    TORCH_CHECK_VALUE(false, "fp8attn.forward on CUDA: ", why);
}

// The kernel of a call (the one it runs and forward_kernel names), after the checks.
const FwdKernel& kernel_for(const at::Tensor& q, const FwdParams& p) {
  const FwdTable& t = fwd_table();
  check_supported(p, nullptr);
  const auto cc = device_cc(q.device().index());
  const FwdTarget& target = fwd_target(t, cc.first, cc.second);
  const FwdKernel* k = choose_fwd_kernel(t, p, target, preferred_pipe());
  if (k == nullptr) {
    std::string pipes, built;
    for (int i = 0; i < target.num_pipes; ++i) pipes += std::string(i ? ", " : "") + t.pipes[target.pipes[i]];
    for (int i = 0; i < t.num_kernels; ++i)
      if (t.kernels[i].head_dim == p.head_dim) built += std::string(built.empty() ? "" : ", ") + t.kernels[i].name;
    std::string tile;
    for (int i = 0; i < t.num_kv_tiles; ++i)
      if (p.kv_tile != 0 && t.kv_tiles[i] == p.kv_tile && p.kv_tile != kDefaultKvTile)
        tile = std::string("; kv_tile=") + std::to_string(p.kv_tile) + " kernels: " + t.kv_tile_notes[i];
    TORCH_CHECK_VALUE(false, "fp8attn.forward on CUDA: no kernel for head_dim=", p.head_dim, ", ",
                      p.fp8_kind == Fp8Kind::E4M3FN ? "e4m3fn" : "e4m3fnuz",
                      mask_kind_of(p) == MaskKind::kBand ? ", masked" : ", unmasked", ", kv_tile=", p.kv_tile,
                      " on this device (", target.name, ", compute capability ", cc.first, ".", cc.second,
                      ": pipelines ", pipes, ")", tile, "; this build's head_dim=", p.head_dim, " kernels: ",
                      built.empty() ? "none (FP8ATTN_HEAD_DIMS / FP8ATTN_FP8_KINDS / FP8ATTN_ARCHS filter builds)"
                                    : built);
  }
  check_supported(p, k);
  return *k;
}

}  // namespace

FwdKernelInfo forward_kernel_cuda(const FwdArgs& a) {
  const at::Tensor& q = a.q;
  const c10::cuda::CUDAGuard guard(q.device());
  FwdPlan plan = make_fwd_params(a);
  const FwdKernel& k = kernel_for(q, plan.params);
  return {k.name, fwd_table().pipes[k.pipe], k.kv_tile};
}

at::Tensor forward_cuda(const FwdArgs& a) {
  const at::Tensor& q = a.q;
  const c10::cuda::CUDAGuard guard(q.device());
  FwdPlan plan = make_fwd_params(a);
  FwdParams& p = plan.params;
  if (plan.empty) {
    check_supported(p, nullptr);
    return plan.lse;
  }
  const FwdKernel& kern = kernel_for(q, p);
  p.kv_tile = kern.kv_tile;
  p.num_sm = multiprocessors(q.device().index());
  p.num_splits = split_override() > 0 ? std::min(split_override(), kDecodeMaxSplits) : choose_num_splits(p, kern, p.num_sm);
  at::Tensor o_accum, lse_accum;
  if (p.num_splits > 1) {
    const auto opts = q.options().dtype(at::kFloat);
    o_accum = at::empty({p.num_splits, flat_rows(p), p.num_heads, p.head_dim}, opts);
    lse_accum = at::empty({p.num_splits, flat_rows(p), p.num_heads}, opts);
    p.o_accum = o_accum.data_ptr<float>();
    p.lse_accum = lse_accum.data_ptr<float>();
  }
  // Kernels that balance varlen and masked work items through a counter (their dynamic order).
  at::Tensor item_counter;
  if (kern.item_counter && (p.cu_seqlens_q || kern.mask == MaskKind::kBand)) {
    item_counter = at::empty({1}, q.options().dtype(at::kInt));
    p.item_counter = item_counter.data_ptr<int32_t>();
  }
  fwd_launcher(kern)(p, c10::cuda::getCurrentCUDAStream());
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return plan.lse;
}

// ---- write_kv_cache ---------------------------------------------------------------------------
namespace {

void write_one_cuda(const at::Tensor& src, const at::Tensor& cache, const at::Tensor& slots,
                    const std::optional<at::Tensor>& scale) {
  if (src.size(0) == 0) return;
  KvWriteArgs a;
  a.src = src.data_ptr();
  a.cache = cache.data_ptr();
  a.slots = slots.data_ptr<int64_t>();
  a.scale = scale ? scale->data_ptr<float>() : nullptr;
  a.src_t_stride = src.stride(0);
  a.src_h_stride = src.stride(1);
  a.c_block_stride = cache.stride(0);
  a.c_row_stride = cache.stride(1);
  a.c_head_stride = cache.stride(2);
  a.heads = static_cast<int32_t>(src.size(1));
  a.dim = static_cast<int32_t>(src.size(2));
  a.block_size = static_cast<int32_t>(cache.size(1));
  a.num_slots = cache.size(0) * cache.size(1);
  a.src_bytes = static_cast<int32_t>(src.element_size());
  a.cache_bytes = static_cast<int32_t>(cache.element_size());
  a.src_bf16 = src.scalar_type() == at::kBFloat16;
  a.kind = cache.scalar_type() == at::kFloat8_e4m3fnuz ? Fp8Kind::E4M3FNUZ : Fp8Kind::E4M3FN;
  launch_write_kv(a, src.size(0), c10::cuda::getCurrentCUDAStream());
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

}  // namespace

void write_kv_cache_cuda(const at::Tensor& key, const at::Tensor& value, at::Tensor& key_cache, at::Tensor& value_cache,
                         const at::Tensor& slot_mapping, const std::optional<at::Tensor>& k_scale,
                         const std::optional<at::Tensor>& v_scale) {
  const c10::cuda::CUDAGuard guard(key.device());
  check_write_kv_cache(key, value, key_cache, value_cache, slot_mapping, k_scale, v_scale);
  const at::Tensor slots = slot_mapping.slice(0, 0, key.size(0)).to(at::kLong).contiguous();
  write_one_cuda(key, key_cache, slots, k_scale);
  write_one_cuda(value, value_cache, slots, v_scale);
}

TORCH_LIBRARY_IMPL(fp8attn, CUDA, m) {
  m.impl("forward", boxed<forward_cuda>());
  m.impl("forward_kernel", boxed<forward_kernel_cuda>());
  m.impl("write_kv_cache", &write_kv_cache_cuda);
}

}  // namespace fp8attn
