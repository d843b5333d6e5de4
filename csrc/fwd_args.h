// The arguments of fp8attn::forward: their list (the schema's), FwdArgs, and reading a call's by name.
// fwd_checks validates them, fwd_params turns them into the torch-free FwdParams.
#pragma once
#include <optional>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/core/function_schema.h>
#include <ATen/core/stack.h>

#include "arg_checks.h"

namespace fp8attn {

// The arguments of fp8attn::forward, written once: the schemas of forward and forward_kernel are made
// of this list (torch_bindings.cpp), FwdArgs is read from a call by these names (forward_args), and
// the fake implementation and the Python wrapper bind them by name from the registered schema
// (fp8attn/_fake.py, fp8attn/ops.py). Arguments added later come last, with a default, so that
// positional callers of the older list keep working.
inline constexpr char kForwardArgs[] =
    "Tensor q, Tensor k, Tensor v, Tensor(a!) out, Tensor? cu_seqlens_q, Tensor? cu_seqlens_k, Tensor? seqused_k, "
    "int max_seqlen_q, int max_seqlen_k, Tensor? block_table, float softmax_scale, bool causal, int window_left, "
    "int window_right, float softcap, Tensor? q_descale, Tensor? k_descale, Tensor? v_descale, Tensor? p_scale, "
    "Tensor? out_scale, bool return_softmax_lse, int kv_tile, Tensor? sinks=None";

struct FwdArgs {
  at::Tensor q, k, v, out;
  std::optional<at::Tensor> cu_seqlens_q, cu_seqlens_k, seqused_k, block_table;
  int64_t max_seqlen_q = 0, max_seqlen_k = 0;
  double softmax_scale = 1.0;
  bool causal = false;
  int64_t window_left = -1, window_right = -1;
  double softcap = 0.0;
  std::optional<at::Tensor> q_descale, k_descale, v_descale, p_scale, out_scale;
  bool return_softmax_lse = false;
  int64_t kv_tile = 0;
  std::optional<at::Tensor> sinks;  // float32 [H]: one attention-sink logit per q head (docs/numerics.md)
};

// FwdArgs from the arguments of a boxed call of an op whose arguments are kForwardArgs, by name
// (the stack is left as it is).
FwdArgs forward_args(const c10::FunctionSchema& schema, const torch::jit::Stack& stack);

// Every tensor argument given, with its name: q first (the device the others must share), then in the
// schema's order.
std::vector<NamedTensor> named_tensors(const FwdArgs& a);

}  // namespace fp8attn
