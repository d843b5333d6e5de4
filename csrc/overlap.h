// Whether a tensor an op writes overlaps itself or a tensor it reads: ATen's overlap status, and for strided
// views of one storage (which ATen leaves undecided) an exact search over their index sets.
#pragma once
#include <vector>

#include <ATen/ATen.h>

#include "arg_checks.h"

namespace fp8attn {

// The written tensor dst (named dst_name) must not overlap itself nor any of the inputs (ATen's overlap
// status; strided views of one storage, which it leaves undecided, are compared exactly when they share a
// layout, else by their byte ranges). Throws c10::ValueError naming both.
void check_no_overlap(const at::Tensor& dst, const char* dst_name, const std::vector<NamedTensor>& inputs);

}  // namespace fp8attn
