// Argument checks and params construction for fp8attn::forward: the one place where tensors are
// validated (each message names the argument) and turned into the torch-free FwdParams.
#pragma once
#include <optional>
#include <utility>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/core/function_schema.h>
#include <ATen/core/stack.h>

#include "kernels/params.h"

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

struct FwdPlan {
  FwdParams params;
  at::Tensor lse;  // [B, H, Sq] or [H, T]; empty when not requested
  // No query row or no query head (B, Sq, T or H = 0): the outputs are empty and no kernel runs.
  bool empty = false;
};

// Head dims every implementation supports.
bool is_supported_head_dim(int64_t d);

// Validates every argument (values of host-resident index and scale tensors too) and fills the
// params. Throws c10::ValueError / c10::TypeError naming the argument.
FwdPlan make_fwd_params(const FwdArgs& a);

// The written tensor dst (named dst_name) must not overlap itself nor any of the inputs (ATen's
// overlap status; strided views of one storage, which it leaves undecided, are compared exactly when
// they share a layout, else by their byte ranges). Throws c10::ValueError naming both.
void check_no_overlap(const at::Tensor& dst, const char* dst_name,
                      const std::vector<std::pair<const char*, const at::Tensor*>>& inputs);

// The FP8 kind of an FP8 dtype (TypeError otherwise).
Fp8Kind fp8_kind_of(at::ScalarType t, const char* arg);
bool is_fp8(at::ScalarType t);

}  // namespace fp8attn
