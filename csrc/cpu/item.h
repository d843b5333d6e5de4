// The contract between the CPU driver (attention_cpu.cpp) and the kernels that compute one work
// item: the scalar oracle (kernel_scalar.cpp) and the SIMD kernels (kernel_simd.h, compiled once per
// instruction set). Plain data only: the per-ISA translation units share no code with the rest.
//
// A work item is a set of query rows ("lanes": q rows x q heads of one kv head of one sequence)
// that share one pass over the keys. For each lane the kernel quantizes q, runs docs/design.md §1's online
// softmax over KV tiles aligned at multiples of `tile` from key 0, and writes the lane's output row
// and lse. Every vector kernel computes the same bits (kernel_scalar.cpp fixes the order of every sum); the
// AMX kernel's tile products sum in the hardware's order (kernel_amx.cpp).
#pragma once
#include <cstddef>
#include <cstdint>

#include "kernels/params.h"

namespace fp8attn::cpu {

// Instruction sets with a kernel (isa.cpp orders them by preference).
enum class Isa : int32_t { Scalar = 0, Avx2 = 1, Avx512 = 2, Avx512Bf16 = 3, Avx512Vbmi = 4, Amx = 5 };
constexpr int kNumIsas = 6;

// Where the keys of one (sequence, kv head) live: row j at k + j*k_row (dense, varlen), or in cache
// block blocks[j / page] at row j % page (paged).
struct KeySource {
  const uint8_t* k = nullptr;  // FP8 codes, already offset to the kv head (and the sequence when not paged)
  const uint8_t* v = nullptr;
  int64_t k_row = 0, v_row = 0;
  const int32_t* blocks = nullptr;  // paged: the sequence's block-table row
  int64_t k_block = 0, v_block = 0;
  int32_t page = 0, num_blocks = 0;
};

struct ItemArgs {
  int32_t head_dim = 0;
  int32_t tile = 0;   // keys per online-softmax step
  int32_t lanes = 0;  // rows of this item
  // Lane r sees exactly the keys [lo[r], hi[r]) (empty when lo >= hi); key_begin / key_end bound them all.
  const int32_t* lo = nullptr;
  const int32_t* hi = nullptr;
  int32_t key_begin = 0, key_end = 0;
  // Lane r's q row: head_dim elements of q_type at q + q_off[r]; a 16-bit q becomes sat(q · inv_q_descale[r]).
  const void* q = nullptr;
  ElemType q_type = ElemType::FP8;
  const int64_t* q_off = nullptr;
  const float* inv_q_descale = nullptr;
  const float* logit_scale = nullptr;  // [lanes]: log2-unit logit = dot·scale, or softcap_log2·tanh(dot·scale)
  float softcap_log2 = 0.f;            // 0: no softcap
  float inv_p_scale = 1.f;             // p8 = sat(p · inv_p_scale)
  Fp8Kind kind = Fp8Kind::E4M3FN;
  // The lanes form `groups` equal groups (consecutive lanes); group g reads the keys of `keys` offset by
  // g·k_group_stride / g·v_group_stride (several kv heads of one sequence in one pass over its cache).
  KeySource keys;
  int32_t groups = 1;
  int64_t k_group_stride = 0, v_group_stride = 0;
  // Lane r's output row at out + o_off[r] (elements of out_type): O = acc · v_descale[r] / l, stored as
  // sat(O · inv_out_scale) (FP8) or O (16-bit); lse[lse_off[r]] = m·ln2 + ln(l·p_scale) when lse is
  // not null. A lane that saw no key writes 0 and -inf. With sinks (not null: lane r's sink logit in
  // log2 units), m and l first take the sink (softmax.h, add_sink; inv_p_scale).
  void* out = nullptr;
  ElemType out_type = ElemType::BF16;
  const int64_t* o_off = nullptr;
  const float* v_descale = nullptr;
  float inv_out_scale = 1.f, p_scale = 1.f;
  const float* sink = nullptr;
  float* lse = nullptr;
  const int64_t* lse_off = nullptr;
  void* scratch = nullptr;  // the kernel's scratch_bytes(head_dim, tile, lanes) bytes, 64-byte aligned
};

struct Kernel {
  size_t (*scratch_bytes)(int32_t head_dim, int32_t tile, int32_t lanes);
  void (*run)(const ItemArgs& a);
  // The KV cache write's quantization: n 16-bit values (bf16 or fp16) -> the FP8 codes of sat(x · inv_scale),
  // fp8_encode's bits.
  void (*encode)(const uint16_t* src, bool bf16, float inv_scale, Fp8Kind kind, uint8_t* dst, int32_t n);
};

// The kernels, defined in their translation units (the SIMD ones are only called where the CPU runs them).
Kernel scalar_kernel();
Kernel avx2_kernel();
Kernel avx512_kernel();
Kernel avx512bf16_kernel();
Kernel avx512vbmi_kernel();
Kernel amx_kernel();

}  // namespace fp8attn::cpu
