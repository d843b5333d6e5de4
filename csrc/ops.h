// The per-device entry points of the ops. forward and forward_kernel take their arguments by name
// (FwdArgs, read from the call by boxed<F>); write_kv_cache takes its seven.
#pragma once
#include <optional>
#include <string>
#include <utility>

#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/library.h>

#include "fwd_args.h"
#include "fwd_params.h"

namespace fp8attn {

// What forward_kernel returns: the kernel a call runs, as the dispatch that chose it describes it.
struct FwdKernelInfo {
  std::string name;      // the instance (generate.py's name), or "cpu"
  std::string pipeline;  // its pipeline, or "cpu"
  int64_t kv_tile;       // keys per online-softmax tile (where P is quantized)
};

inline void push_result(torch::jit::Stack& stack, at::Tensor lse) { torch::jit::push(stack, std::move(lse)); }
inline void push_result(torch::jit::Stack& stack, FwdKernelInfo k) {
  torch::jit::push(stack, std::move(k.name), std::move(k.pipeline), k.kv_tile);
}

// The boxed kernel of an entry point F(const FwdArgs&) of forward / forward_kernel, for m.impl.
template <auto F>
void boxed_forward(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  auto result = F(forward_args(op.schema(), *stack));
  torch::jit::drop(*stack, op.schema().arguments().size());
  push_result(*stack, std::move(result));
}
template <auto F>
torch::CppFunction boxed() {
  return torch::CppFunction::makeFromBoxedFunction<&boxed_forward<F>>();
}

at::Tensor forward_cpu(const FwdArgs& a);
FwdKernelInfo forward_kernel_cpu(const FwdArgs& a);

void write_kv_cache_cpu(const at::Tensor& key, const at::Tensor& value, at::Tensor& key_cache, at::Tensor& value_cache,
                        const at::Tensor& slot_mapping, const std::optional<at::Tensor>& k_scale,
                        const std::optional<at::Tensor>& v_scale);

}  // namespace fp8attn
