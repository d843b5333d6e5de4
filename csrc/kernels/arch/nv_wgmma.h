// Hopper (sm_90a) atoms of the warp-specialized pipeline (fwd/pipeline_wgmma.h): warpgroup FP8
// MMAs (wgmma, QGMMA in SASS), shared-memory matrix descriptors and their swizzled layouts,
// mbarriers, the generic -> async proxy fence, named barriers and register reallocation.
// Hand-written PTX rather than CuTe: the pipeline needs four wgmma shapes and one descriptor
// form, which is less code than the CuTe layout algebra and keeps the build free of CUTLASS.
//
// wgmma shapes used (fp8 operands must be K-major in shared memory; A may come from registers):
//   m64nNk32   SS  S(64 rows x N keys) += Q(64 x 32 of d) . K(N keys x 32 of d)^T, N = the KV tile (64, 128)
//   m64nDk32   RS  O(64 rows x D)       += P(64 x 32 keys, registers) . Vt(D x 32 keys)^T
//   m64n8k32   RS  L(64 rows x 8)       += P . ones: the row sums of P8 (l) on the tensor cores
// and those of the decode pipeline (fwd/pipeline_decode_wgmma.h), the query rows on the N side:
//   m64nRk32   SS  S^T(64 keys x R rows) += K(64 keys x 32 of d) . Q(R rows x 32 of d)^T, R = 8, 16
//   m64nRk32   RS  O^T(64 of d x R rows) += Vt(64 of d x 32 keys, registers) . P(R rows x 32 keys)^T
// Accumulator of warp w of the warpgroup, lane (g, t): d[4j + i] = row 16w + g + 8(i >> 1),
// column 8j + 2t + (i & 1) -- the m16n8 fragment layout of mma.sync repeated over n8 blocks, so
// the kernel's Sm89Tile row / column mapping and epilogue apply unchanged.
// A fragment (registers) of m64k32 fp8 for lane (g, t): a[0] = A[g][4t..4t+3], a[1] = A[g+8][4t..],
// a[2] = A[g][16+4t..], a[3] = A[g+8][16+4t..] (as mma.sync m16n8k32).
#pragma once
#include <cstdint>

#include "nv_mma.h"

// wgmma and setmaxnreg exist only in the sm_90a feature set; other device passes (e.g. sm_89 of a
// multi-arch build) compile the kernel with an empty body, and the host never launches it there.
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define FP8ATTN_NV_WGMMA 1
#else
#define FP8ATTN_NV_WGMMA 0
#endif

namespace fp8attn {
namespace nv {

// Four e4m3fn 1.0 codes (0x38 each): the ones operand that sums P8's rows into l (the layout needs no
// swizzle: every byte is the same).
constexpr uint32_t kOnesE4m3x4 = 0x38383838u;

// ---- swizzled K-major tiles ----------------------------------------------------------------
// A [rows][cols] byte tile whose rows are split into column blocks of kSw bytes (kSw = 64 or 128,
// the descriptor's swizzle width). Each column block is a dense [rows][kSw] array in which the
// 16-byte chunk c of row r is stored at chunk c ^ ((r % 8) >> (3 - log2(kSw / 16))): the
// hardware's 64B / 128B swizzle, which makes the 8 rows of a core matrix hit distinct banks.
template <int kSw>
struct SwizzledTile {
  static_assert(kSw == 64 || kSw == 128, "swizzle width");
  static constexpr int kShift = kSw == 128 ? 0 : 1;
  // Byte offset of byte `col` (a multiple of 16 for whole chunks) of row `row` in a tile of `rows` rows.
  FP8ATTN_HD static constexpr int offset(int rows, int row, int col) {
    return (col / kSw) * rows * kSw + row * kSw + ((((col % kSw) >> 4) ^ ((row & 7) >> kShift)) << 4) + (col & 15);
  }
  // wgmma descriptor of the k32 step starting at byte column `col` of row `row0` (row0 % 8 == 0):
  // start address, LBO (unused for swizzled K-major), SBO = one 8-row core-matrix group, swizzle mode.
  FP8ATTN_DEVICE static uint64_t desc(const uint8_t* tile, int rows, int row0, int col) {
    const uint32_t addr = smem_addr(tile + (col / kSw) * rows * kSw + row0 * kSw + (col % kSw));
    constexpr uint64_t kMode = kSw == 128 ? 1 : 2;
    return static_cast<uint64_t>((addr & 0x3ffff) >> 4) | (uint64_t{1} << 16) |
           (static_cast<uint64_t>((8 * kSw) >> 4) << 32) | (kMode << 62);
  }
};

// ---- synchronization -----------------------------------------------------------------------
FP8ATTN_DEVICE void mbar_init(uint64_t* bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_addr(bar)), "r"(count) : "memory");
}
FP8ATTN_DEVICE void mbar_arrive(uint64_t* bar) {
  asm volatile("{\n.reg .b64 st;\nmbarrier.arrive.shared::cta.b64 st, [%0];\n}\n" ::"r"(smem_addr(bar)) : "memory");
}
// Blocks until the phase with the given parity has completed.
FP8ATTN_DEVICE void mbar_wait(uint64_t* bar, uint32_t parity) {
  asm volatile(
      "{\n.reg .pred done;\nWAIT:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra WAIT;\n}\n" ::"r"(smem_addr(bar)),
      "r"(parity)
      : "memory");
}
// mbar_wait for two barriers at once: both tested before one branch, so the two round trips to the
// barriers overlap instead of following each other.
FP8ATTN_DEVICE void mbar_wait2(uint64_t* a, uint32_t parity_a, uint64_t* b, uint32_t parity_b) {
  asm volatile(
      "{\n.reg .pred da, db;\nWAIT2:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 da, [%0], %1;\n"
      "mbarrier.try_wait.parity.shared::cta.b64 db, [%2], %3;\n"
      "@!da bra WAIT2;\n@!db bra WAIT2;\n}\n" ::"r"(smem_addr(a)),
      "r"(parity_a), "r"(smem_addr(b)), "r"(parity_b)
      : "memory");
}
// Arrives on `bar` and raises the phase's expected transaction count by `bytes` (sm_90+).
FP8ATTN_DEVICE void mbar_arrive_expect_tx(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem_addr(bar)), "r"(bytes) : "memory");
}
// Makes mbarrier initializations visible to the async proxy (bulk copies complete on them).
FP8ATTN_DEVICE void fence_mbarrier_init() { asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory"); }
// Bulk copy by the TMA engine (sm_90+): `bytes` (a multiple of 16; both addresses 16-byte aligned)
// from global to shared memory, completed on `bar`'s transaction count.
FP8ATTN_DEVICE void bulk_copy_g2s(void* smem, const void* gmem, uint32_t bytes, uint64_t* bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(
                   smem_addr(smem)),
               "l"(gmem), "r"(bytes), "r"(smem_addr(bar))
               : "memory");
}
// Makes this thread's generic-proxy shared-memory writes (st.shared, cp.async) visible to the
// async proxy (wgmma operand reads).
FP8ATTN_DEVICE void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }
FP8ATTN_DEVICE void named_barrier_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

#if FP8ATTN_NV_WGMMA
// Four 8x8 b16 matrices to shared memory (stmatrix, sm_90; the inverse of nv_mma.h's ldmatrix_x4):
// lane 8m + r gives the shared-window address of row r of matrix m, which gets r[m] of lanes
// 4r .. 4r + 3.
FP8ATTN_DEVICE void stmatrix_x4(uint32_t row, const uint32_t (&r)[4]) {
  asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(row), "r"(r[0]), "r"(r[1]),
               "r"(r[2]), "r"(r[3])
               : "memory");
}

template <int kRegs>
FP8ATTN_DEVICE void regs_dealloc() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kRegs));
}
template <int kRegs>
FP8ATTN_DEVICE void regs_alloc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kRegs));
}

// threadIdx.x read afresh (volatile: not merged with earlier reads), for values the compiler would
// otherwise keep live, or spill, across a long loop.
FP8ATTN_DEVICE uint32_t fresh_tid() {
  uint32_t t;
  asm volatile("mov.u32 %0, %%tid.x;\n" : "=r"(t));
  return t;
}

// ---- warpgroup MMA ------------------------------------------------------------------------
FP8ATTN_DEVICE void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
FP8ATTN_DEVICE void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
// Pins registers at this point of the program: no CUDA-core write of a wgmma operand or
// accumulator may move into the asynchronous stage between wgmma.fence and wgmma.wait (ptxas
// would otherwise serialize every wgmma, C7513).
template <int N>
FP8ATTN_DEVICE void fence_operands(float (&r)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(r[i])::"memory");
}
template <int N>
FP8ATTN_DEVICE void fence_operands(uint32_t (&r)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+r"(r[i])::"memory");
}
template <int kPending>
FP8ATTN_DEVICE void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(kPending) : "memory");
}

// Operand lists: "%0, ..., %(N-1)" and the matching "+f" accumulator constraints.
#define FP8ATTN_R10(p) "%" #p "0, %" #p "1, %" #p "2, %" #p "3, %" #p "4, %" #p "5, %" #p "6, %" #p "7, %" #p "8, %" #p "9"
#define FP8ATTN_R0_9 "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9"
#define FP8ATTN_REGS4 "%0, %1, %2, %3"
#define FP8ATTN_REGS8 "%0, %1, %2, %3, %4, %5, %6, %7"
#define FP8ATTN_REGS32 FP8ATTN_R0_9 ", " FP8ATTN_R10(1) ", " FP8ATTN_R10(2) ", %30, %31"
#define FP8ATTN_REGS64 \
  FP8ATTN_R0_9 ", " FP8ATTN_R10(1) ", " FP8ATTN_R10(2) ", " FP8ATTN_R10(3) ", " FP8ATTN_R10(4) ", " FP8ATTN_R10(5) ", %60, %61, %62, %63"
#define FP8ATTN_REGS128                                                                                               \
  FP8ATTN_R0_9 ", " FP8ATTN_R10(1) ", " FP8ATTN_R10(2) ", " FP8ATTN_R10(3) ", " FP8ATTN_R10(4) ", " FP8ATTN_R10(5) \
               ", " FP8ATTN_R10(6) ", " FP8ATTN_R10(7) ", " FP8ATTN_R10(8) ", " FP8ATTN_R10(9) ", " FP8ATTN_R10(10) \
               ", " FP8ATTN_R10(11) ", %120, %121, %122, %123, %124, %125, %126, %127"
#define FP8ATTN_F4(d) "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
#define FP8ATTN_F8(d, i)                                                                                    \
  "+f"(d[(i) + 0]), "+f"(d[(i) + 1]), "+f"(d[(i) + 2]), "+f"(d[(i) + 3]), "+f"(d[(i) + 4]), "+f"(d[(i) + 5]), \
      "+f"(d[(i) + 6]), "+f"(d[(i) + 7])
#define FP8ATTN_F32(d, i) FP8ATTN_F8(d, i), FP8ATTN_F8(d, (i) + 8), FP8ATTN_F8(d, (i) + 16), FP8ATTN_F8(d, (i) + 24)
#define FP8ATTN_F64(d, i) FP8ATTN_F32(d, i), FP8ATTN_F32(d, (i) + 32)
#define FP8ATTN_F128(d, i) FP8ATTN_F64(d, i), FP8ATTN_F64(d, (i) + 64)
// Output-only accumulators (scale-d = 0): the registers are not inputs, so CUDA-core code may
// overwrite them while other wgmmas are in flight without ptxas serializing anything.
#define FP8ATTN_O4(d) "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
#define FP8ATTN_O8(d, i)                                                                                    \
  "=f"(d[(i) + 0]), "=f"(d[(i) + 1]), "=f"(d[(i) + 2]), "=f"(d[(i) + 3]), "=f"(d[(i) + 4]), "=f"(d[(i) + 5]), \
      "=f"(d[(i) + 6]), "=f"(d[(i) + 7])
#define FP8ATTN_O32(d, i) FP8ATTN_O8(d, i), FP8ATTN_O8(d, (i) + 8), FP8ATTN_O8(d, (i) + 16), FP8ATTN_O8(d, (i) + 24)
#define FP8ATTN_O64(d, i) FP8ATTN_O32(d, i), FP8ATTN_O32(d, (i) + 32)
#define FP8ATTN_O128(d, i) FP8ATTN_O64(d, i), FP8ATTN_O64(d, (i) + 64)

// d(64 x N) (+)= A(64 x 32) . B(N x 32)^T, e4m3 operands, fp32 accumulators; accumulate = 0 overwrites d.
// ss: A and B from shared memory (descriptors); rs: A from registers (the m64k32 fragment, 4 words).
// *_first: d = A . B^T, d only written. One definition per shape N (R = N / 2 accumulators per
// thread); o0..o5 are the operand numbers after the accumulators (R, R + 1, ...), as tokens.
template <int N>
struct Wgmma;

#define FP8ATTN_WGMMA_SHAPE(N, R, REGS, O, F, o0, o1, o2, o3, o4, o5)                                          \
  template <>                                                                                                \
  struct Wgmma<N> {                                                                                          \
    FP8ATTN_DEVICE static void ss_first(float (&d)[R], uint64_t a, uint64_t b) {                             \
      asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %" #o2 ", 0;\n"                                         \
                   "wgmma.mma_async.sync.aligned.m64n" #N "k32.f32.e4m3.e4m3 {" REGS "}, %" #o0 ", %" #o1      \
                   ", p, 1, 1;\n}\n"                                                                         \
                   : O(d, 0)                                                                                 \
                   : "l"(a), "l"(b), "r"(0));                                                                \
    }                                                                                                        \
    FP8ATTN_DEVICE static void ss(float (&d)[R], uint64_t a, uint64_t b, int accumulate) {                   \
      asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %" #o2 ", 0;\n"                                         \
                   "wgmma.mma_async.sync.aligned.m64n" #N "k32.f32.e4m3.e4m3 {" REGS "}, %" #o0 ", %" #o1      \
                   ", p, 1, 1;\n}\n"                                                                         \
                   : F(d, 0)                                                                                 \
                   : "l"(a), "l"(b), "r"(accumulate));                                                       \
    }                                                                                                        \
    FP8ATTN_DEVICE static void rs_first(float (&d)[R], const uint32_t a[4], uint64_t b) {                    \
      asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %" #o5 ", 0;\n"                                         \
                   "wgmma.mma_async.sync.aligned.m64n" #N "k32.f32.e4m3.e4m3 {" REGS "}, {%" #o0 ", %" #o1     \
                   ", %" #o2 ", %" #o3 "}, %" #o4 ", p, 1, 1;\n}\n"                                          \
                   : O(d, 0)                                                                                 \
                   : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(0));                            \
    }                                                                                                        \
    FP8ATTN_DEVICE static void rs(float (&d)[R], const uint32_t a[4], uint64_t b, int accumulate) {          \
      asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %" #o5 ", 0;\n"                                         \
                   "wgmma.mma_async.sync.aligned.m64n" #N "k32.f32.e4m3.e4m3 {" REGS "}, {%" #o0 ", %" #o1     \
                   ", %" #o2 ", %" #o3 "}, %" #o4 ", p, 1, 1;\n}\n"                                          \
                   : F(d, 0)                                                                                 \
                   : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(accumulate));                   \
    }                                                                                                        \
  };
#define FP8ATTN_O4_(d, i) FP8ATTN_O4(d)
#define FP8ATTN_F4_(d, i) FP8ATTN_F4(d)
FP8ATTN_WGMMA_SHAPE(8, 4, FP8ATTN_REGS4, FP8ATTN_O4_, FP8ATTN_F4_, 4, 5, 6, 7, 8, 9)
FP8ATTN_WGMMA_SHAPE(16, 8, FP8ATTN_REGS8, FP8ATTN_O8, FP8ATTN_F8, 8, 9, 10, 11, 12, 13)
FP8ATTN_WGMMA_SHAPE(64, 32, FP8ATTN_REGS32, FP8ATTN_O32, FP8ATTN_F32, 32, 33, 34, 35, 36, 37)
FP8ATTN_WGMMA_SHAPE(128, 64, FP8ATTN_REGS64, FP8ATTN_O64, FP8ATTN_F64, 64, 65, 66, 67, 68, 69)
FP8ATTN_WGMMA_SHAPE(256, 128, FP8ATTN_REGS128, FP8ATTN_O128, FP8ATTN_F128, 128, 129, 130, 131, 132, 133)

#undef FP8ATTN_WGMMA_SHAPE
#undef FP8ATTN_O4_
#undef FP8ATTN_F4_
#undef FP8ATTN_REGS4
#undef FP8ATTN_REGS8
#undef FP8ATTN_F4
#undef FP8ATTN_O4
#undef FP8ATTN_O128
#undef FP8ATTN_R10
#undef FP8ATTN_R0_9
#undef FP8ATTN_REGS32
#undef FP8ATTN_REGS64
#undef FP8ATTN_REGS128
#undef FP8ATTN_F8
#undef FP8ATTN_O8
#undef FP8ATTN_O32
#undef FP8ATTN_O64
#undef FP8ATTN_F32
#undef FP8ATTN_F64
#undef FP8ATTN_F128
#endif  // FP8ATTN_NV_WGMMA

}  // namespace nv
}  // namespace fp8attn
