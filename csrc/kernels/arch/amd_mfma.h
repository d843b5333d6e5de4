// AMD CDNA atoms of the fp8-operand pipeline (pipeline.h): gfx942 (MI300, FP8 = e4m3fnuz) and
// gfx950 (MI350, FP8 = OCP e4m3fn). 64-lane wavefronts, MFMA 32x32x16, LDS copies, packed FP8
// conversion. The interface is the one documented at nv::Sm89Tile (nv_mma.h); this file never
// assumes the FP8 kind: it comes from the tensor dtype (template parameter K) and is matched
// against what the hardware of the target being compiled reads.
//
// Warp tile: one wavefront owns 32 packed query rows; S^T = K . Q^T is computed (keys on the MFMA
// M axis, queries on N) so that a lane owns one query row: lane l (i = l % 32, h = l / 32).
//  * v_mfma_f32_32x32x16_fp8_fp8: A (32 x 16) lane l holds A[i][8h .. 8h+7] (8 codes, 64 bits),
//    B (16 x 32) lane l holds B[8h .. 8h+7][i]; D (32 x 32, f32) lane l, register r holds
//    D[8*(r/4) + 4h + r%4][i] (16 floats). Any consistent permutation of k between A and B leaves
//    the sum unchanged, so only the A/B symmetry and the D layout matter.
//  * Q.K^T: B = Q^T (lane: q row i, codes d = 16ks + 8h ..), A = K rows of the 32-key block. MFMA
//    row m = 8rg + 4h' + e (rg = m/8, h' = (m/4)%2, e = m%4) reads key 16*(rg/2) + 8h' + 4*(rg%2) + e,
//    so that accumulator register r of lane (i, h) is key 16*(r/8) + 8h + r%8: registers 0..7 are
//    keys 8h .. 8h+7 and 8..15 keys 16+8h .. 16+8h+7 -- exactly the lane's B operand (P^T) of the
//    two k16 steps of P.V, with no data movement. S element 16*kb + r: key 32*kb + 16*(r/8) + 8h + r%8.
//  * P.V: O^T = V^T . P^T; A = Vt rows d = 32*db + i (keys 16kk + 8h ..), B = P^T words 2kk, 2kk+1.
//    O element 16*db + r: column d = 32*db + 8*(r/4) + 4h + r%4 of row i. D is padded to 32: the
//    columns >= D are computed from unwritten Vt rows and never stored.
//  * Row reductions: the 64 keys of a row live in lanes i and i + 32: one exchange (lane ^ 32).
//  * gfx950 + fn: the f8f6f4 form v_mfma_scale_f32_32x32x64_f8f6f4 takes four of the 8-code
//    chunks above per operand (k = 64): the same fragments, half the MFMA instructions.
//
// FP8 kinds (chosen per compiled target and K; every path is exact, NaN codes included):
//  * native (gfx942 + fnuz, gfx950 + fn): FP8 MFMA on the codes; P quantized by
//    v_cvt_pk_fp8_f32 (after clamping to +-max: same bits as numeric/fp8.h's fp8_encode).
//  * reinterpret (gfx942 + fn): an fn code read as fnuz is worth exactly half (bias 8 vs 7, for
//    normals and subnormals), so FP8 MFMA products are exactly 1/4 of the true ones and the kernel
//    multiplies the QK and O scales by kInvProductScale = 4 (exact). The codes that change
//    meaning, fn -0 (0x80) = fnuz NaN and fn NaN (0x7f / 0xff) = fnuz +-240, become fnuz +0 and
//    NaN as K / V / Q enter the operands (fn_as_fnuz). P codes come from the software encoder (the
//    hardware conversion writes fnuz).
//  * f16 (gfx950 + fnuz): OCP hardware reads 0x7f / 0xff (fnuz +-240) as NaN and no power-of-two
//    rescaling maps fnuz onto fn, so each code is widened exactly to f16 and
//    v_mfma_f32_32x32x16_f16 runs (same operand layout as the fp8 form; every product exact in f32).
#pragma once
#include <cstdint>

#include "../common.h"
#include "../numeric/fp8.h"
#include "../variant.h"
#include "scalar.h"

// CUDA's __grid_constant__ (kernel parameter in constant memory) has no HIP spelling: kernel
// arguments are in constant memory (the kernarg segment) on AMD anyway.
#ifndef __grid_constant__
#define __grid_constant__
#endif

// The FP8 format the MFMA / conversion instructions of the target being compiled read and write.
#if defined(__gfx950__)
#define FP8ATTN_AMD_HW_FP8 2  // OCP e4m3fn
#elif defined(__gfx940__) || defined(__gfx941__) || defined(__gfx942__)
#define FP8ATTN_AMD_HW_FP8 1  // e4m3fnuz
#else
#define FP8ATTN_AMD_HW_FP8 0  // host pass, or a target without FP8 MFMA (not built: see cmake/gpu.cmake)
#endif

namespace fp8attn {
namespace amd {

typedef float f32x16 __attribute__((ext_vector_type(16)));
typedef int i32x8 __attribute__((ext_vector_type(8)));
typedef _Float16 f16x2 __attribute__((ext_vector_type(2)));
typedef _Float16 f16x8 __attribute__((ext_vector_type(8)));

enum class MfmaPath { kNative, kReinterpret, kF16 };

template <Fp8Kind K>
constexpr MfmaPath path_of() {
#if FP8ATTN_AMD_HW_FP8 == 1
  return K == Fp8Kind::E4M3FNUZ ? MfmaPath::kNative : MfmaPath::kReinterpret;
#elif FP8ATTN_AMD_HW_FP8 == 2
  return K == Fp8Kind::E4M3FN ? MfmaPath::kNative : MfmaPath::kF16;
#else
  return MfmaPath::kNative;  // host pass: unused
#endif
}

FP8ATTN_DEVICE float shfl_xor(float x, int mask) { return __shfl_xor(x, mask); }

// Programmatic Dependent Launch is NVIDIA's (nv_mma.h): nothing here.
FP8ATTN_DEVICE void pdl_launch_dependents() {}
FP8ATTN_DEVICE void pdl_wait() {}

FP8ATTN_DEVICE uint64_t lds_load64(const uint8_t* p) { return *reinterpret_cast<const uint64_t*>(p); }

// 0x80 in the bytes of x that are 0 (exact per byte: no carries between bytes).
FP8ATTN_HD uint32_t zero_bytes(uint32_t x) { return ~(((x & 0x7f7f7f7fu) + 0x7f7f7f7fu) | x) & 0x80808080u; }

// fn codes as the fnuz codes of half their value: 0x80 (fn -0) -> 0x00, 0x7f / 0xff (fn NaN) -> 0x80
// (fnuz NaN), the others unchanged (read as fnuz they are worth exactly half).
FP8ATTN_DEVICE uint32_t fn_as_fnuz(uint32_t x) {
  const uint32_t z = zero_bytes(x ^ 0x80808080u);                  // 0x80 where x's byte is 0x80
  const uint32_t n = zero_bytes((x & 0x7f7f7f7fu) ^ 0x7f7f7f7fu);  // 0x80 where it is 0x7f / 0xff
  return (x & ~z & ~((n >> 7) * 0xffu)) | n;
}
FP8ATTN_DEVICE uint64_t fn_as_fnuz(uint64_t x) {
  return static_cast<uint64_t>(fn_as_fnuz(static_cast<uint32_t>(x))) |
         (static_cast<uint64_t>(fn_as_fnuz(static_cast<uint32_t>(x >> 32))) << 32);
}

// Exact e4m3 -> f16 of the two low bytes of x: the code's exponent/mantissa bits placed in f16
// position read as value * 2^(bias - 15) (normals and subnormals alike); one exact multiply by
// 2^(15 - bias) restores the value (fn: 2^8, fnuz: 2^7).
template <Fp8Kind K>
FP8ATTN_DEVICE f16x2 fp8x2_to_f16x2(uint32_t x) {
  const uint32_t v = (x & 0xffu) | ((x & 0xff00u) << 8);  // [b0, 0, b1, 0]
  const uint32_t h = ((v & 0x007f007fu) << 7) | ((v & 0x00800080u) << 8);
  const _Float16 s = K == Fp8Kind::E4M3FN ? static_cast<_Float16>(256.f) : static_cast<_Float16>(128.f);
  const f16x2 r = __builtin_bit_cast(f16x2, h) * f16x2{s, s};
  // The NaN codes (fn: exponent and mantissa all ones; fnuz: 0x80), finite after the shift -> f16 NaN.
  const uint32_t lo = v & 0xffffu, hi = v >> 16;
  const auto is_nan = [](uint32_t b) { return K == Fp8Kind::E4M3FN ? (b & 0x7fu) == 0x7fu : b == 0x80u; };
  const uint32_t nan = (is_nan(lo) ? 0x7e00u : 0u) | (is_nan(hi) ? 0x7e000000u : 0u);
  return __builtin_bit_cast(f16x2, __builtin_bit_cast(uint32_t, r) | nan);
}
template <Fp8Kind K>
FP8ATTN_DEVICE f16x8 fp8x8_to_f16x8(uint64_t x) {
  const f16x2 a = fp8x2_to_f16x2<K>(static_cast<uint32_t>(x)), b = fp8x2_to_f16x2<K>(static_cast<uint32_t>(x >> 16));
  const f16x2 c = fp8x2_to_f16x2<K>(static_cast<uint32_t>(x >> 32)), d = fp8x2_to_f16x2<K>(static_cast<uint32_t>(x >> 48));
  return f16x8{a[0], a[1], b[0], b[1], c[0], c[1], d[0], d[1]};
}

// c += A . B for one 32x32x16 step on 8-code operands (layout above), in the path of (target, K).
template <Fp8Kind K>
FP8ATTN_DEVICE f32x16 mfma_32x32x16(uint64_t a, uint64_t b, f32x16 c) {
#if FP8ATTN_AMD_HW_FP8 == 2
  if constexpr (path_of<K>() == MfmaPath::kF16) {
    return __builtin_amdgcn_mfma_f32_32x32x16_f16(fp8x8_to_f16x8<K>(a), fp8x8_to_f16x8<K>(b), c, 0, 0, 0);
  } else {
    return __builtin_amdgcn_mfma_f32_32x32x16_fp8_fp8(static_cast<long>(a), static_cast<long>(b), c, 0, 0, 0);
  }
#elif FP8ATTN_AMD_HW_FP8 == 1
  return __builtin_amdgcn_mfma_f32_32x32x16_fp8_fp8(static_cast<long>(a), static_cast<long>(b), c, 0, 0, 0);
#else
#if defined(__HIP_DEVICE_COMPILE__)
  __builtin_trap();  // a device target without FP8 MFMA: not a supported PYTORCH_ROCM_ARCH
#endif
  (void)a;
  (void)b;
  return c;
#endif
}

// c += A . B over k = 64 (gfx950 v_mfma_scale_f32_32x32x64_f8f6f4, e4m3 x e4m3, E8M0 scales 127 =
// 1.0): operand chunk j (8 codes) of lane half h pairs with chunk j of the other operand's lane
// half h, exactly as four 32x32x16 steps on the chunks do -- which is what other targets (and the
// host emulation) compute instead.
template <Fp8Kind K>
FP8ATTN_DEVICE f32x16 mfma_32x32x64(const uint64_t a[4], const uint64_t b[4], f32x16 c) {
#if FP8ATTN_AMD_HW_FP8 == 2
  if constexpr (path_of<K>() == MfmaPath::kNative) {
    i32x8 av, bv;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      av[2 * j] = static_cast<int>(a[j]);
      av[2 * j + 1] = static_cast<int>(a[j] >> 32);
      bv[2 * j] = static_cast<int>(b[j]);
      bv[2 * j + 1] = static_cast<int>(b[j] >> 32);
    }
    return __builtin_amdgcn_mfma_scale_f32_32x32x64_f8f6f4(av, bv, c, 0, 0, 0, 127, 0, 127);
  }
#endif
#pragma unroll
  for (int j = 0; j < 4; ++j) c = mfma_32x32x16<K>(a[j], b[j], c);
  return c;
}

// The conversion of PQuantize (variant.h) on AMD: the codes of sat(x[i]) packed little-endian
// (byte i = x[i]) and their values; hardware conversion where the target writes kind K, else the
// shared software encoder (bit-exact by construction).
template <Fp8Kind K>
struct Fp8Cvt {
  FP8ATTN_DEVICE static uint32_t encode4(const float x[4], float xq[4]) {
#if FP8ATTN_AMD_HW_FP8 != 0
    if constexpr (path_of<K>() == MfmaPath::kNative) {
      // v_cvt_pk_fp8_f32 rounds to nearest even but does not saturate: clamp first (NaN kept).
      constexpr float kMax = Fp8Traits<K>::kMax;
      float y[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) y[i] = x[i] > kMax ? kMax : (x[i] < -kMax ? -kMax : x[i]);
      int w = __builtin_amdgcn_cvt_pk_fp8_f32(y[0], y[1], 0, false);  // bytes 0, 1
      w = __builtin_amdgcn_cvt_pk_fp8_f32(y[2], y[3], w, true);        // bytes 2, 3
      xq[0] = __builtin_amdgcn_cvt_f32_fp8(w, 0);
      xq[1] = __builtin_amdgcn_cvt_f32_fp8(w, 1);
      xq[2] = __builtin_amdgcn_cvt_f32_fp8(w, 2);
      xq[3] = __builtin_amdgcn_cvt_f32_fp8(w, 3);
      return static_cast<uint32_t>(w);
    } else
#endif
    {
      return fp8_encode4<K>(x, xq);
    }
  }
};
template <Fp8Kind K>
using PQuant = PQuantize<K, Fp8Cvt<K>>;

// The gfx950 f8f6f4 (k = 64) form pays where the kind is native there (fn): twice the k per MFMA.
template <Fp8Kind K>
constexpr bool use_k64() {
#if FP8ATTN_AMD_HW_FP8 == 2
  return path_of<K>() == MfmaPath::kNative;
#else
  return false;
#endif
}

// kK64: Q.K^T in 64-wide d steps (16-wide tail) and P.V in one 64-key step per d block, on
// mfma_32x32x64; same fragments, same sums (the emulation runs both forms).
template <Fp8Kind K, bool kK64 = use_k64<K>()>
struct MfmaTile {
  static constexpr int kWarpSize = 64;
  static constexpr int kRowsPerWarp = 32;
  static constexpr int kRows = 1;
  static constexpr int kSElems = 32;  // 2 key blocks of 32 x 16 registers
  static constexpr int kPWords = 8;   // 4 k16 steps x 2 words
  static constexpr int kDAlign = 32;  // 32-wide d blocks of O
  static constexpr bool kReinterpret = path_of<K>() == MfmaPath::kReinterpret;
  static constexpr float kInvProductScale = kReinterpret ? 4.f : 1.f;
  using PQuant = amd::PQuant<K>;

  FP8ATTN_HD static constexpr int o_frags(int d) { return (d + 31) / 32 * 4; }
  FP8ATTN_HD static constexpr int o_cols(int d) { return (d + 31) / 32 * 32; }
  FP8ATTN_DEVICE static int row_in_warp(int lane, int) { return lane & 31; }
  FP8ATTN_DEVICE static bool row_leader(int lane) { return lane < 32; }
  FP8ATTN_HD static constexpr int s_row(int) { return 0; }
  FP8ATTN_DEVICE static int s_key_base(int lane) { return 8 * (lane >> 5); }
  FP8ATTN_HD static constexpr int s_key_off(int i) { return 16 * (i >> 3) + (i & 7); }
  FP8ATTN_DEVICE static int s_key(int lane, int i) { return s_key_base(lane) + s_key_off(i); }
  FP8ATTN_HD static constexpr int p_row(int) { return 0; }
  FP8ATTN_HD static constexpr int p_src(int w, int b) { return 4 * w + b; }
  FP8ATTN_HD static constexpr int o_row(int) { return 0; }
  FP8ATTN_DEVICE static int o_col(int lane, int e) {
    return 32 * (e >> 4) + 8 * ((e >> 2) & 3) + 4 * (lane >> 5) + (e & 3);
  }
  FP8ATTN_DEVICE static float row_max(float x) { return max_nan(x, shfl_xor(x, 32)); }
  FP8ATTN_DEVICE static float row_sum(float x) { return x + shfl_xor(x, 32); }
  FP8ATTN_HD static int k_row(int r) { return r; }

  // Global -> LDS, 16 bytes, synchronous (the pipeline's barriers order it); zero when !pred.
  FP8ATTN_DEVICE static void copy16(void* smem, const void* gmem, bool pred) {
    uint4 v = make_uint4(0, 0, 0, 0);
    if (pred) v = *reinterpret_cast<const uint4*>(gmem);
    if constexpr (kReinterpret) {
      v.x = fn_as_fnuz(v.x);
      v.y = fn_as_fnuz(v.y);
      v.z = fn_as_fnuz(v.z);
      v.w = fn_as_fnuz(v.w);
    }
    *reinterpret_cast<uint4*>(smem) = v;
  }
  FP8ATTN_DEVICE static void copy_commit() {}
  FP8ATTN_DEVICE static void copy_wait_all() {}

  // 4x4 byte transpose: in[r] holds bytes (r, 0..3); out[c] holds bytes (0..3, c).
  FP8ATTN_DEVICE static void transpose4x4_bytes(const uint32_t in[4], uint32_t out[4]) {
#pragma unroll
    for (int c = 0; c < 4; ++c)
      out[c] = ((in[0] >> (8 * c)) & 0xffu) | (((in[1] >> (8 * c)) & 0xffu) << 8) |
               (((in[2] >> (8 * c)) & 0xffu) << 16) | (((in[3] >> (8 * c)) & 0xffu) << 24);
  }

  // s = S^T of the wavefront's 32 rows x the 64 keys of the tile (element order above).
  template <class Policy>
  FP8ATTN_DEVICE static void qk(float s[kSElems], const uint8_t* sQ, const uint8_t* sK, int warp, int lane) {
    const int i = lane & 31, h = lane >> 5;
    const int key = 16 * (i >> 4) + 8 * ((i >> 2) & 1) + 4 * ((i >> 3) & 1) + (i & 3);  // of MFMA row i
    const uint8_t* qp = sQ + (warp * kRowsPerWarp + i) * Policy::kRowStride + 8 * h;
    const uint8_t* kp0 = sK + k_row(key) * Policy::kRowStride + 8 * h;
    const uint8_t* kp1 = sK + k_row(32 + key) * Policy::kRowStride + 8 * h;
    f32x16 c0 = {}, c1 = {};
    constexpr int kK64Steps = kK64 ? Policy::kD / 64 : 0;
#pragma unroll
    for (int ks = 0; ks < kK64Steps; ++ks) {  // d = 64ks + 16j + 8h + (0..7), chunk j of lane half h
      uint64_t b[4], a0[4], a1[4];
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        b[j] = lds_load64(qp + 64 * ks + 16 * j);
        if constexpr (kReinterpret) b[j] = fn_as_fnuz(b[j]);
        a0[j] = lds_load64(kp0 + 64 * ks + 16 * j);
        a1[j] = lds_load64(kp1 + 64 * ks + 16 * j);
      }
      c0 = mfma_32x32x64<K>(a0, b, c0);
      c1 = mfma_32x32x64<K>(a1, b, c1);
    }
#pragma unroll
    for (int ks = 4 * kK64Steps; ks < Policy::kD / 16; ++ks) {
      uint64_t b = lds_load64(qp + 16 * ks);
      if constexpr (kReinterpret) b = fn_as_fnuz(b);
      c0 = mfma_32x32x16<K>(lds_load64(kp0 + 16 * ks), b, c0);
      c1 = mfma_32x32x16<K>(lds_load64(kp1 + 16 * ks), b, c1);
    }
#pragma unroll
    for (int r = 0; r < 16; ++r) {
      s[r] = c0[r];
      s[16 + r] = c1[r];
    }
  }

  // acc += P8 . V8 as O^T = V^T . P^T (pa words 2kk, 2kk+1 = B operand of k16 step kk).
  template <class Policy>
  FP8ATTN_DEVICE static void pv(float (*acc)[4], const uint32_t pa[kPWords], const uint8_t* sVt, int lane) {
    const int i = lane & 31, h = lane >> 5;
    const uint8_t* vp = sVt + i * Policy::kVtStride + 8 * h;
#pragma unroll
    for (int db = 0; db < Policy::kNTilesO / 4; ++db) {
      f32x16 c;
#pragma unroll
      for (int r = 0; r < 16; ++r) c[r] = acc[4 * db + (r >> 2)][r & 3];
      uint64_t a[4], b[4];
#pragma unroll
      for (int kk = 0; kk < 4; ++kk) {
        b[kk] = static_cast<uint64_t>(pa[2 * kk]) | (static_cast<uint64_t>(pa[2 * kk + 1]) << 32);
        a[kk] = lds_load64(vp + 32 * db * Policy::kVtStride + 16 * kk);
      }
      if constexpr (kK64) {
        c = mfma_32x32x64<K>(a, b, c);
      } else {
#pragma unroll
        for (int kk = 0; kk < 4; ++kk) c = mfma_32x32x16<K>(a[kk], b[kk], c);
      }
#pragma unroll
      for (int r = 0; r < 16; ++r) acc[4 * db + (r >> 2)][r & 3] = c[r];
    }
  }
};

// The AMD CDNA family (gfx942, gfx950): the tile above, 64 KiB of LDS per workgroup (gfx942's
// limit; gfx950 has 160 KiB but one fat binary shares one host-side policy).
struct Gfx9 {
  static constexpr int kSmemLimit = 64 * 1024;
  template <Fp8Kind K>
  using Tile = MfmaTile<K>;
};

}  // namespace amd
}  // namespace fp8attn
