// Checks shared by the ops' argument validation (fwd_checks, kv_cache_args). Each throws c10::ValueError /
// c10::TypeError naming the argument.
#pragma once
#include <utility>
#include <vector>

#include <ATen/ATen.h>

#include "kernels/numeric/fp8_kind.h"

namespace fp8attn {

using NamedTensor = std::pair<const char*, const at::Tensor*>;

bool is_fp8(at::ScalarType t);
// The FP8 kind of an FP8 dtype (TypeError otherwise).
Fp8Kind fp8_kind_of(at::ScalarType t, const char* arg);

// Every tensor on the first one's device. (A meta tensor among real ones never gets here: the dispatcher
// sends such a call to the fake implementation, which refuses it the same way, fp8attn/_fake.py.)
void check_one_device(const std::vector<NamedTensor>& tensors);

// A scale's value, read on the host: positive and finite.
void check_scale_value(float x, const char* name);
// A scale the kernels divide by, as every implementation does, by multiplying with its float32 reciprocal
// (kernels/scales.h): that reciprocal is finite.
void check_scale_reciprocal(float x, const char* name);

}  // namespace fp8attn
