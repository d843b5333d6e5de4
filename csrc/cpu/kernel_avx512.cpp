// The AVX-512 kernel (F, DQ, BW, VL): kernel_simd.h on 16-lane fp32 vectors.
#include "cpu/simd_avx512.h"
#include "cpu/kernel_simd.h"

namespace fp8attn::cpu {
namespace {
using Rows = RowsKernel<Avx512Ops, Fp32Pairs<Avx512Ops>, 8, 8>;
}  // namespace

Kernel avx512_kernel() { return {&Rows::scratch_bytes, &Rows::run}; }

}  // namespace fp8attn::cpu
