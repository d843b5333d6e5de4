#include "fwd_args.h"

#include <utility>

namespace fp8attn {

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
  a.cu_seqlens_q = arg("cu_seqlens_q").toOptional<at::Tensor>();
  a.cu_seqlens_k = arg("cu_seqlens_k").toOptional<at::Tensor>();
  a.seqused_k = arg("seqused_k").toOptional<at::Tensor>();
  a.max_seqlen_q = arg("max_seqlen_q").toInt();
  a.max_seqlen_k = arg("max_seqlen_k").toInt();
  a.block_table = arg("block_table").toOptional<at::Tensor>();
  a.softmax_scale = arg("softmax_scale").toDouble();
  a.causal = arg("causal").toBool();
  a.window_left = arg("window_left").toInt();
  a.window_right = arg("window_right").toInt();
  a.softcap = arg("softcap").toDouble();
  a.q_descale = arg("q_descale").toOptional<at::Tensor>();
  a.k_descale = arg("k_descale").toOptional<at::Tensor>();
  a.v_descale = arg("v_descale").toOptional<at::Tensor>();
  a.p_scale = arg("p_scale").toOptional<at::Tensor>();
  a.out_scale = arg("out_scale").toOptional<at::Tensor>();
  a.return_softmax_lse = arg("return_softmax_lse").toBool();
  a.kv_tile = arg("kv_tile").toInt();
  a.sinks = arg("sinks").toOptional<at::Tensor>();
  TORCH_INTERNAL_ASSERT(read == n, schema.name(), " has ", n, " arguments, FwdArgs reads ", read);
  return a;
}

std::vector<NamedTensor> named_tensors(const FwdArgs& a) {
  std::vector<NamedTensor> t = {{"q", &a.q}, {"k", &a.k}, {"v", &a.v}, {"out", &a.out}};
  const std::pair<const char*, const std::optional<at::Tensor>*> opt[] = {
      {"cu_seqlens_q", &a.cu_seqlens_q}, {"cu_seqlens_k", &a.cu_seqlens_k}, {"seqused_k", &a.seqused_k},
      {"block_table", &a.block_table},   {"q_descale", &a.q_descale},       {"k_descale", &a.k_descale},
      {"v_descale", &a.v_descale},       {"p_scale", &a.p_scale},           {"out_scale", &a.out_scale},
      {"sinks", &a.sinks}};
  for (const auto& [name, o] : opt)
    if (o->has_value()) t.emplace_back(name, &o->value());
  return t;
}

}  // namespace fp8attn
