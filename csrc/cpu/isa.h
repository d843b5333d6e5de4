// Which CPU kernel runs: the best instruction set that both this build and this CPU (cpuid, and the
// OS's saved register state) support, as ATen chooses its CPU kernels; FP8ATTN_CPU_ISA = scalar,
// avx2, avx512, avx512_vbmi or avx512_bf16 forces one (the tests run every path this machine can run
// with it).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "cpu/item.h"

namespace fp8attn::cpu {

const char* isa_name(Isa isa);
// The instruction sets this build and CPU can run, best first (scalar always last).
std::vector<Isa> runnable_isas();
// The one to run now: FP8ATTN_CPU_ISA if set (a ValueError if it names no runnable set), else the best.
Isa selected_isa();
Kernel kernel_of(Isa isa);
// Forward calls that ran each instruction set's kernel (torch.ops.fp8attn.cpu_isa_calls).
void count_call(Isa isa);

}  // namespace fp8attn::cpu
