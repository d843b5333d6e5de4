#include "cpu/isa.h"

#include <c10/util/Exception.h>
#include <torch/library.h>

#include <array>
#include <atomic>
#include <cstdlib>
#include <cstring>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>
#define FP8ATTN_CPU_X86 1
#else
#define FP8ATTN_CPU_X86 0
#endif
#ifndef FP8ATTN_CPU_AMX
#define FP8ATTN_CPU_AMX 0  // the compiler had no AMX: no kernel_amx.cpp in this build
#endif

namespace fp8attn::cpu {
namespace {

constexpr const char* kNames[kNumIsas] = {"scalar", "avx2", "avx512", "avx512_bf16", "avx512_vbmi", "amx"};

std::array<std::atomic<int64_t>, kNumIsas> g_calls{};

#if FP8ATTN_CPU_X86
uint64_t xcr0() {
  uint32_t eax, edx;
  __asm__ volatile("xgetbv" : "=a"(eax), "=d"(edx) : "c"(0));
  return (static_cast<uint64_t>(edx) << 32) | eax;
}

// Linux hands a process the AMX tile state only on request (arch_prctl ARCH_REQ_XCOMP_PERM for XTILEDATA).
bool amx_permitted() {
#if defined(__linux__) && defined(SYS_arch_prctl)
  static const bool ok = syscall(SYS_arch_prctl, 0x1023 /* ARCH_REQ_XCOMP_PERM */, 18 /* XFEATURE_XTILEDATA */) == 0;
  return ok;
#else
  return false;
#endif
}

bool cpu_has(Isa isa) {
  uint32_t a, b, c, d;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return false;
  const bool fma = c & (1u << 12), osxsave = c & (1u << 27), avx = c & (1u << 28), f16c = c & (1u << 29);
  if (!(osxsave && avx && fma && f16c) || (xcr0() & 0x6) != 0x6) return false;
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return false;
  const bool avx2 = b & (1u << 5);
  if (isa == Isa::Avx2) return avx2;
  const bool avx512 = (b & (1u << 16)) && (b & (1u << 17)) && (b & (1u << 30)) && (b & (1u << 31)) &&  // F DQ BW VL
                      (xcr0() & 0xe0) == 0xe0;  // opmask and zmm state saved by the OS
  if (isa == Isa::Avx512) return avx2 && avx512;
  const bool vbmi = c & (1u << 1);
  if (isa == Isa::Avx512Vbmi) return avx2 && avx512 && vbmi;
  if (isa == Isa::Amx) {
    if (!FP8ATTN_CPU_AMX) return false;
    const bool amx = (d & (1u << 22)) && (d & (1u << 24));  // AMX-BF16, AMX-TILE
    return avx2 && avx512 && vbmi && amx && (xcr0() & 0x60000) == 0x60000 && amx_permitted();
  }
  __get_cpuid_count(7, 1, &a, &b, &c, &d);
  const bool bf16 = a & (1u << 5);
  return avx2 && avx512 && vbmi && bf16;  // Isa::Avx512Bf16
}

bool is_intel() {
  uint32_t a, b, c, d;
  if (!__get_cpuid(0, &a, &b, &c, &d)) return false;
  return b == 0x756e6547 && d == 0x49656e69 && c == 0x6c65746e;  // "GenuineIntel"
}
#endif

bool runnable(Isa isa) {
  if (isa == Isa::Scalar) return true;
#if FP8ATTN_CPU_X86
  return cpu_has(isa);
#else
  return false;
#endif
}

}  // namespace

const char* isa_name(Isa isa) { return kNames[static_cast<int>(isa)]; }

std::vector<Isa> runnable_isas() {
  static const std::vector<Isa> isas = [] {
    // Both AVX-512 kernels with byte lookups compute the same bits; they differ in the dot-product step.
    // vdpbf16ps (the BF16 kernel) does two FMAs' work per instruction where it runs at the FMA rate (AMD);
    // on Intel CPUs it takes both vector ports for two cycles, and the VBMI kernel's fp32 FMAs run faster.
    bool intel = false;
#if FP8ATTN_CPU_X86
    intel = is_intel();
#endif
    // AMX's tile products run several times the FMA rate (docs/cpu.md); they come first where the CPU has them.
    const Isa fast[2] = {intel ? Isa::Avx512Vbmi : Isa::Avx512Bf16, intel ? Isa::Avx512Bf16 : Isa::Avx512Vbmi};
    std::vector<Isa> v;
    for (const Isa isa : {Isa::Amx, fast[0], fast[1], Isa::Avx512, Isa::Avx2, Isa::Scalar})
      if (runnable(isa)) v.push_back(isa);
    return v;
  }();
  return isas;
}

Isa selected_isa() {
  const std::vector<Isa> isas = runnable_isas();
  const char* env = std::getenv("FP8ATTN_CPU_ISA");
  if (!env || !*env) return isas.front();
  std::string can;
  for (const Isa isa : isas) {
    if (std::strcmp(env, isa_name(isa)) == 0) return isa;
    can += (can.empty() ? "" : ", ") + std::string(isa_name(isa));
  }
  TORCH_CHECK_VALUE(false, "FP8ATTN_CPU_ISA=", env, " is not an instruction set this build and CPU can run (", can, ")");
}

Kernel kernel_of(Isa isa) {
  switch (isa) {
#if FP8ATTN_CPU_X86
    case Isa::Avx2: return avx2_kernel();
    case Isa::Avx512: return avx512_kernel();
    case Isa::Avx512Bf16: return avx512bf16_kernel();
    case Isa::Avx512Vbmi: return avx512vbmi_kernel();
#if FP8ATTN_CPU_AMX
    case Isa::Amx: return amx_kernel();
#endif
#endif
    default: return scalar_kernel();
  }
}

void count_call(Isa isa) { g_calls[static_cast<int>(isa)].fetch_add(1, std::memory_order_relaxed); }

namespace {

std::string cpu_isa() { return isa_name(selected_isa()); }

std::vector<std::string> cpu_isas() {
  std::vector<std::string> names;
  for (const Isa isa : runnable_isas()) names.emplace_back(isa_name(isa));
  return names;
}

int64_t cpu_isa_calls(const std::string& name) {
  for (int i = 0; i < kNumIsas; ++i)
    if (name == kNames[i]) return g_calls[i].load();
  TORCH_CHECK_VALUE(false, "unknown CPU instruction set '", name, "' (scalar, avx2, avx512, avx512_bf16, avx512_vbmi, amx)");
}

}  // namespace

// Introspection of the CPU dispatch, used by the tests to prove which kernel ran.
TORCH_LIBRARY_FRAGMENT(fp8attn, m) {
  m.def("cpu_isa() -> str", &cpu_isa);
  m.def("cpu_isas() -> str[]", &cpu_isas);
  m.def("cpu_isa_calls(str isa) -> int", &cpu_isa_calls);
}

}  // namespace fp8attn::cpu
