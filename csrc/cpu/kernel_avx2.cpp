// The AVX2 + FMA kernel: kernel_simd.h on 8-lane fp32 vectors.
#include "cpu/simd_avx2.h"
#include "cpu/kernel_simd.h"

namespace fp8attn::cpu {
namespace {
using Rows = RowsKernel<Avx2Ops, Fp32Pairs<Avx2Ops>, 4, 4>;
}  // namespace

Kernel avx2_kernel() { return {&Rows::scratch_bytes, &Rows::run}; }

}  // namespace fp8attn::cpu
