#include "fwd_args.h"

#include <array>
#include <utility>

namespace fp8attn {
namespace {

// The tensor arguments that may be absent (Tensor?), by name, in the schema's order (A: FwdArgs, const or not).
template <class A>
auto optional_tensors(A& a) {
  using Field = decltype(&a.sinks);
  return std::array<std::pair<const char*, Field>, 10>{{{"cu_seqlens_q", &a.cu_seqlens_q},
                                                        {"cu_seqlens_k", &a.cu_seqlens_k},
                                                        {"seqused_k", &a.seqused_k},
                                                        {"block_table", &a.block_table},
                                                        {"q_descale", &a.q_descale},
                                                        {"k_descale", &a.k_descale},
                                                        {"v_descale", &a.v_descale},
                                                        {"p_scale", &a.p_scale},
                                                        {"out_scale", &a.out_scale},
                                                        {"sinks", &a.sinks}}};
}

}  // namespace

FwdArgs forward_args(const c10::FunctionSchema& schema, const torch::jit::Stack& stack) {
  const size_t n = schema.arguments().size();
  const auto args = torch::jit::last(stack, n);
  size_t read = 0;
  auto arg = [&](const char* name) -> const c10::IValue& {
    const auto i = schema.argumentIndexWithName(name);
    TORCH_INTERNAL_ASSERT(i.has_value(), schema.name(), " has no argument ", name);
    ++read;
    return args[*i];
  };
  FwdArgs a;
  a.q = arg("q").toTensor();
  a.k = arg("k").toTensor();
  a.v = arg("v").toTensor();
  a.out = arg("out").toTensor();
  for (const auto& [name, t] : optional_tensors(a)) *t = arg(name).toOptional<at::Tensor>();
  a.max_seqlen_q = arg("max_seqlen_q").toInt();
  a.max_seqlen_k = arg("max_seqlen_k").toInt();
  a.softmax_scale = arg("softmax_scale").toDouble();
  a.causal = arg("causal").toBool();
  a.window_left = arg("window_left").toInt();
  a.window_right = arg("window_right").toInt();
  a.softcap = arg("softcap").toDouble();
  a.return_softmax_lse = arg("return_softmax_lse").toBool();
  a.kv_tile = arg("kv_tile").toInt();
  TORCH_INTERNAL_ASSERT(read == n, schema.name(), " has ", n, " arguments, FwdArgs reads ", read);
  return a;
}

std::vector<NamedTensor> named_tensors(const FwdArgs& a) {
  std::vector<NamedTensor> t = {{"q", &a.q}, {"k", &a.k}, {"v", &a.v}, {"out", &a.out}};
  for (const auto& [name, o] : optional_tensors(a))
    if (o->has_value()) t.emplace_back(name, &o->value());
  return t;
}

}  // namespace fp8attn
