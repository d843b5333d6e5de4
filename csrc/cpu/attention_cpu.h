// The CPU implementation of the forward pass: the same tiled online-softmax algorithm and
// quantization points as the GPU pipelines (docs/design.md §1). It is the oracle GPU results are
// compared with, and what machines without a GPU run.
#pragma once
#include "kernels/params.h"

namespace fp8attn::cpu {

void run_forward(const FwdParams& p);

// The KV tile run_forward quantizes P at: p.kv_tile, or kDefaultKvTile for 0.
inline int32_t kv_tile_of(const FwdParams& p) { return p.kv_tile > 0 ? p.kv_tile : kDefaultKvTile; }

}  // namespace fp8attn::cpu
