// The AVX-512 kernel (F, DQ, BW, VL): kernel_simd.h on 16-lane fp32 vectors.
#include "cpu/simd_avx512.h"
#include "cpu/kernel_simd.h"

namespace fp8attn::cpu {
namespace {
using Kernel16 = SimdKernel<RowsKernel<Avx512Ops, Fp32Pairs<Avx512Ops>, 8, 8>,
                            KeysKernel<Avx512Ops, Fp32Pairs<Avx512Ops>, 4, 4, 4>, 16>;
}  // namespace

Kernel avx512_kernel() { return Kernel16::kernel(); }

}  // namespace fp8attn::cpu
