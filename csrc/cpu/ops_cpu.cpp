// CPU entry points of the ops.
#include <torch/library.h>

#include "cpu/attention_cpu.h"
#include "ops.h"

namespace fp8attn {

at::Tensor forward_cpu(const FwdArgs& a) {
  FwdPlan plan = make_fwd_params(a);
  if (!plan.empty) cpu::run_forward(plan.params);
  return plan.lse;
}

// The CPU has one implementation; the arguments are validated as forward validates them.
std::string forward_kernel_cpu(const FwdArgs& a) {
  make_fwd_params(a);
  return "cpu";
}

TORCH_LIBRARY_IMPL(fp8attn, CPU, m) {
  m.impl("forward", boxed<forward_cpu>());
  m.impl("forward_kernel", boxed<forward_kernel_cpu>());
  m.impl("write_kv_cache", &write_kv_cache_cpu);
}

}  // namespace fp8attn
