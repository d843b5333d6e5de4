// CPU entry points of the ops.
#include <torch/library.h>

#include "cpu/attention_cpu.h"
#include "ops.h"

namespace fp8attn {

FP8ATTN_FORWARD_SIGNATURE(forward_cpu) {
  FwdPlan plan = make_fwd_params(pack_forward_args(FP8ATTN_FORWARD_ARGS));
  cpu::run_forward(plan.params);
  return plan.lse;
}

// The CPU has one implementation; the arguments are validated as forward validates them.
std::string forward_kernel_cpu(FP8ATTN_FORWARD_PARAMS) {
  make_fwd_params(pack_forward_args(FP8ATTN_FORWARD_ARGS));
  return "cpu";
}

TORCH_LIBRARY_IMPL(fp8attn, CPU, m) {
  m.impl("forward", &forward_cpu);
  m.impl("forward_kernel", &forward_kernel_cpu);
  m.impl("write_kv_cache", &write_kv_cache_cpu);
}

}  // namespace fp8attn
