// The AVX2 + FMA kernel: kernel_simd.h on 8-lane fp32 vectors.
#include "cpu/simd_avx2.h"
#include "cpu/kernel_simd.h"

namespace fp8attn::cpu {
namespace {
using Kernel8 = SimdKernel<RowsKernel<Avx2Ops, Fp32Pairs<Avx2Ops>, 4, 4>, KeysKernel<Avx2Ops, Fp32Pairs<Avx2Ops>, 4, 2, 2>, 8>;
}  // namespace

Kernel avx2_kernel() { return Kernel8::kernel(); }

}  // namespace fp8attn::cpu
