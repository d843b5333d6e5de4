#include "arg_checks.h"

#include <cmath>
#include <limits>

namespace fp8attn {

bool is_fp8(at::ScalarType t) { return t == at::kFloat8_e4m3fn || t == at::kFloat8_e4m3fnuz; }

Fp8Kind fp8_kind_of(at::ScalarType t, const char* arg) {
  TORCH_CHECK_TYPE(is_fp8(t), arg, " must be float8_e4m3fn or float8_e4m3fnuz, got ", t);
  return t == at::kFloat8_e4m3fn ? Fp8Kind::E4M3FN : Fp8Kind::E4M3FNUZ;
}

void check_one_device(const std::vector<NamedTensor>& tensors) {
  const auto& [first, t0] = tensors.front();
  for (const auto& [name, t] : tensors)
    TORCH_CHECK_VALUE(t->device() == t0->device(), name, " must be on ", first, "'s device (", t0->device(),
                      "), got ", t->device());
}

void check_scale_value(float x, const char* name) {
  TORCH_CHECK_VALUE(std::isfinite(x) && x > 0.f, name, " must be positive and finite, got ", x);
}

void check_scale_reciprocal(float x, const char* name) {
  TORCH_CHECK_VALUE(std::isfinite(1.f / x), name, " = ", x, " has no finite float32 reciprocal (the kernels ",
                    "multiply by 1 / ", name, "): it must be at least ", 1.f / std::numeric_limits<float>::max());
}

}  // namespace fp8attn
