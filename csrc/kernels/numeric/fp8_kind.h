// The FP8 storage types the library computes with (numeric/fp8.h has their numerics).
#pragma once
#include <cstdint>

namespace fp8attn {

// FP8 storage type of k, v (and q when it is FP8, and out when out_scale is given).
enum class Fp8Kind : int32_t { E4M3FN = 0, E4M3FNUZ = 1 };

}  // namespace fp8attn
