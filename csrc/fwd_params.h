// A forward call's FwdParams, filled once from its checked arguments (fwd_checks) for every implementation.
#pragma once
#include <ATen/ATen.h>

#include "fwd_args.h"
#include "kernels/params.h"

namespace fp8attn {

struct FwdPlan {
  FwdParams params;
  at::Tensor lse;  // [B, H, Sq] or [H, T]; empty when not requested
  // No query row or no query head (B, Sq, T or H = 0): the outputs are empty and no kernel runs.
  bool empty = false;
};

// Checks every argument (fwd_checks: c10::ValueError / c10::TypeError naming it), allocates the lse and
// fills the params.
FwdPlan make_fwd_params(const FwdArgs& a);

}  // namespace fp8attn
