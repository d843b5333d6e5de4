// Argument checks and params construction for fp8attn::forward: the one place where tensors are
// validated (each message names the argument) and turned into the torch-free FwdParams.
#pragma once
#include <optional>

#include <ATen/ATen.h>

#include "kernels/params.h"

namespace fp8attn {

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
};

struct FwdPlan {
  FwdParams params;
  at::Tensor lse;  // [B, H, Sq] or [H, T]; empty when not requested
};

// Head dims every implementation supports.
bool is_supported_head_dim(int64_t d);

// Validates every argument (values of host-resident index and scale tensors too) and fills the
// params. Throws c10::ValueError / c10::TypeError naming the argument.
FwdPlan make_fwd_params(const FwdArgs& a);

// The FP8 kind of an FP8 dtype (TypeError otherwise).
Fp8Kind fp8_kind_of(at::ScalarType t, const char* arg);
bool is_fp8(at::ScalarType t);

}  // namespace fp8attn
