// The CPU implementation of the forward pass: the same tiled online-softmax algorithm and
// quantization points as the GPU pipelines (docs/design.md §1). It is the oracle GPU results are
// compared with, and what machines without a GPU run.
#pragma once
#include "kernels/params.h"

namespace fp8attn::cpu {

void run_forward(const FwdParams& p);

}  // namespace fp8attn::cpu
