// NVIDIA warp-level atoms for the FP8 attention pipeline (sm_89 / sm_90, and a portable fallback).
//
//  * MmaFp8<K>::mma: D(16x8, f32) += A(16x32, fp8, row) * B(32x8, fp8, col), PTX fragment layout
//    of mma.m16n8k32 (lane = 4*g + t): a[0] = A[g][4t..4t+3], a[1] = A[g+8][4t..], a[2] = A[g][16+4t..],
//    a[3] = A[g+8][16+4t..]; b[0] = B[4t..4t+3][g], b[1] = B[16+4t..][g]; c = D[g][2t,2t+1], D[g+8][2t,2t+1].
//    e4m3fn on sm_89+ is the native e4m3 mma.sync. e4m3fnuz (and any arch below sm_89) decodes each
//    byte exactly to fp16 and issues two m16n8k16 f16 mmas: every e4m3 value and every product of two
//    is exact in fp16/fp32, so both paths compute the same products; only fp32 summation order differs.
//    (The k index of the two f16 mmas is permuted, identically for A and B, which leaves the sum alone.)
//  * Fp8Cvt<K>: the conversions of P quantization (PQuant<K> = PQuantize with them, variant.h).
//  * cp.async / ldmatrix wrappers.
#pragma once
#include <cstdint>

#include "../common.h"
#include "../numeric/fp8.h"
#include "../numeric/half.h"
#include "../variant.h"
#include "scalar.h"

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
#define FP8ATTN_NV_FP8_MMA 1
#else
#define FP8ATTN_NV_FP8_MMA 0
#endif

namespace fp8attn {
namespace nv {

FP8ATTN_DEVICE uint32_t smem_addr(const void* p) { return static_cast<uint32_t>(__cvta_generic_to_shared(p)); }

// 16-byte global -> shared copy; when !pred nothing is read and the destination is zero-filled.
FP8ATTN_DEVICE void cp_async_16(void* smem, const void* gmem, bool pred) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(smem)), "l"(gmem),
               "r"(pred ? 16 : 0));
}
FP8ATTN_DEVICE void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
FP8ATTN_DEVICE void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

// Four 8x8 b16 matrices; lanes 8i..8i+7 give the row addresses of matrix i; r[i] = its fragment
// (lane 4g+t holds bytes 4t..4t+3 of row g) -- exactly the fp8 A/B fragment registers above.
FP8ATTN_DEVICE void ldmatrix_x4(uint32_t r[4], const void* smem_row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(smem_row)));
}

FP8ATTN_DEVICE void mma_f16_16816(float c[4], const uint32_t a[4], const uint32_t b[2]) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// Exact e4m3 -> fp16 of the two low (hi = false) or high bytes of x, packed as half2 bits. The
// e4m3 exponent/mantissa bits shifted into fp16 position read as value * 2^(bias - 15) for normals
// and subnormals alike; one exact f16x2 multiply by 2^(15 - bias) restores the value. The NaN codes
// (fn: exponent and mantissa all ones; fnuz: 0x80), finite after the shift, are made f16 NaNs.
template <Fp8Kind K>
FP8ATTN_DEVICE uint32_t fp8x2_to_half2(uint32_t x, bool hi) {
  const uint32_t v = __byte_perm(x, 0u, hi ? 0x4342 : 0x4140);  // [b, 0, b', 0]
  const uint32_t h = ((v & 0x007f007fu) << 7) | ((v & 0x00800080u) << 8);
  constexpr uint32_t kScale = K == Fp8Kind::E4M3FN ? 0x5c005c00u : 0x58005800u;  // 2^8 / 2^7 in f16x2
  uint32_t r;
  asm("mul.rn.f16x2 %0, %1, %2;\n" : "=r"(r) : "r"(h), "r"(kScale));
  const uint32_t nan = K == Fp8Kind::E4M3FN ? __vcmpeq2(v & 0x007f007fu, 0x007f007fu) : __vcmpeq2(v, 0x00800080u);
  return r | (nan & 0x7e007e00u);
}

// Exact e4m3 -> f16x2 of two fp8 codes in the low 16 bits of x (hardware cvt on sm_89+ for fn).
template <Fp8Kind K>
FP8ATTN_DEVICE uint32_t fp8x2_lo_to_half2(uint32_t x) {
#if FP8ATTN_NV_FP8_MMA
  if constexpr (K == Fp8Kind::E4M3FN) {
    uint32_t r;
    asm("cvt.rn.f16x2.e4m3x2 %0, %1;\n" : "=r"(r) : "h"(static_cast<uint16_t>(x)));
    return r;
  } else
#endif
  {
    return fp8x2_to_half2<K>(x, false);
  }
}

// The fp8 codes in bytes (sel & 0xf, sel >> 4) of x -> f16x2 (exact).
template <Fp8Kind K>
FP8ATTN_DEVICE uint32_t fp8_pair_to_half2(uint32_t x, uint32_t sel) {
  return fp8x2_lo_to_half2<K>(__byte_perm(x, 0u, sel));
}

// Transposes the 8x8 b16 matrix whose fragment (lane g, t: row g, columns 2t, 2t+1) is x.
FP8ATTN_DEVICE uint32_t movmatrix_trans(uint32_t x) {
  uint32_t r;
  asm volatile("movmatrix.sync.aligned.m8n8.trans.b16 %0, %1;\n" : "=r"(r) : "r"(x));
  return r;
}

// Programmatic Dependent Launch (sm_90+; no-ops elsewhere): launch_dependents lets the grid
// launched next with the programmatic-serialization attribute start before this one ends (its
// blocks become resident and wait); pdl_wait waits for the preceding grid to complete with its
// memory visible (returns at once when the grid was launched without the attribute).
FP8ATTN_DEVICE void pdl_launch_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}
FP8ATTN_DEVICE void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}

// D(16x8, f32) += A(16x16, f16, row) * B(16x8, f16, col): lane (g, t) holds a[0] = A[g][2t..2t+1],
// a[1] = A[g+8][2t..], a[2] = A[g][8+2t..], a[3] = A[g+8][8+2t..]; b[0] = B[2t..2t+1][g], b[1] = B[8+2t..][g].
struct MmaF16 {
  FP8ATTN_DEVICE static void mma(float c[4], const uint32_t a[4], const uint32_t b[2]) { mma_f16_16816(c, a, b); }
};

// (row: the lane's row as a shared-window address)
FP8ATTN_DEVICE void ldmatrix_x4_trans(uint32_t r[4], uint32_t row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(row));
}
FP8ATTN_DEVICE void ldmatrix_x4_trans(uint32_t r[4], const void* smem_row) { ldmatrix_x4_trans(r, smem_addr(smem_row)); }

template <Fp8Kind K>
struct MmaFp8 {
  FP8ATTN_DEVICE static void mma(float c[4], const uint32_t a[4], const uint32_t b[2]) {
#if FP8ATTN_NV_FP8_MMA
    if constexpr (K == Fp8Kind::E4M3FN) {
      asm volatile(
          "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
          "{%0,%1,%2,%3};\n"
          : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
          : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
    } else
#endif
    {
      mma_via_f16(c, a, b);
    }
  }

  // Portable path: f16 fragment of m16n8k16 for lane (g, t) holds k = {2t, 2t+1, 8+2t, 9+2t} of
  // rows g / g+8 (A) and of column g (B); map them to fp8 bytes {0,1,2,3} of the same register.
  FP8ATTN_DEVICE static void mma_via_f16(float c[4], const uint32_t a[4], const uint32_t b[2]) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const uint32_t ah[4] = {fp8x2_to_half2<K>(a[2 * half], false), fp8x2_to_half2<K>(a[2 * half + 1], false),
                              fp8x2_to_half2<K>(a[2 * half], true), fp8x2_to_half2<K>(a[2 * half + 1], true)};
      const uint32_t bh[2] = {fp8x2_to_half2<K>(b[half], false), fp8x2_to_half2<K>(b[half], true)};
      mma_f16_16816(c, ah, bh);
    }
  }
};

#if FP8ATTN_NV_FP8_MMA
// e4m3fn codes of sat(lo), sat(hi) packed little-endian (lo in the low byte): the hardware
// conversion, bit-identical to numeric/fp8.h's fp8_encode (RNE, saturating, NaN kept).
FP8ATTN_DEVICE uint16_t e4m3x2(float lo, float hi) {
  uint16_t r;
  asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;\n" : "=h"(r) : "f"(hi), "f"(lo));
  return r;
}
#endif

// The conversions of PQuantize (variant.h) on NVIDIA: hardware cvt.rn.satfinite.e4m3x2.f32 on
// sm_89+ for fn (the same bits as numeric/fp8.h's fp8_encode: RNE, saturating, NaN kept), the
// software encoder otherwise.
template <Fp8Kind K>
struct Fp8Cvt {
  // Codes of sat(x[i]) packed little-endian; xq[i] = their values.
  FP8ATTN_DEVICE static uint32_t encode4(const float x[4], float xq[4]) {
#if FP8ATTN_NV_FP8_MMA
    if constexpr (K == Fp8Kind::E4M3FN) {
      const uint16_t lo = e4m3x2(x[0], x[1]), hi = e4m3x2(x[2], x[3]);
      uint32_t h01, h23;
      asm("cvt.rn.f16x2.e4m3x2 %0, %1;\n" : "=r"(h01) : "h"(lo));
      asm("cvt.rn.f16x2.e4m3x2 %0, %1;\n" : "=r"(h23) : "h"(hi));
      asm("{\n.reg .f16 a, b;\nmov.b32 {a, b}, %2;\ncvt.f32.f16 %0, a;\ncvt.f32.f16 %1, b;\n}\n"
          : "=f"(xq[0]), "=f"(xq[1]) : "r"(h01));
      asm("{\n.reg .f16 a, b;\nmov.b32 {a, b}, %2;\ncvt.f32.f16 %0, a;\ncvt.f32.f16 %1, b;\n}\n"
          : "=f"(xq[2]), "=f"(xq[3]) : "r"(h23));
      return static_cast<uint32_t>(lo) | (static_cast<uint32_t>(hi) << 16);
    } else
#endif
    {
      return fp8_encode4<K>(x, xq);
    }
  }
  // Codes only.
  FP8ATTN_DEVICE static uint32_t encode4(const float x[4]) {
#if FP8ATTN_NV_FP8_MMA
    if constexpr (K == Fp8Kind::E4M3FN) {
      const uint16_t lo = e4m3x2(x[0], x[1]), hi = e4m3x2(x[2], x[3]);
      return static_cast<uint32_t>(lo) | (static_cast<uint32_t>(hi) << 16);
    } else
#endif
    {
      float unused[4];
      return fp8_encode4<K>(x, unused);
    }
  }
  // The codes of sat(x0), sat(x1) as their exact f16 values, packed (lo = x0).
  FP8ATTN_DEVICE static uint32_t encode2_f16(float x0, float x1) {
#if FP8ATTN_NV_FP8_MMA
    if constexpr (K == Fp8Kind::E4M3FN) {
      uint32_t h;
      asm("cvt.rn.f16x2.e4m3x2 %0, %1;\n" : "=r"(h) : "h"(e4m3x2(x0, x1)));
      return h;
    } else
#endif
    {
      const uint32_t c = static_cast<uint32_t>(fp8_encode<K>(x0)) | (static_cast<uint32_t>(fp8_encode<K>(x1)) << 8);
      return fp8x2_to_half2<K>(c, false);
    }
  }
};
template <Fp8Kind K>
using PQuant = PQuantize<K, Fp8Cvt<K>>;

// 4x4 byte transpose: in[r] holds bytes (r, 0..3); out[c] holds bytes (0..3, c).
FP8ATTN_DEVICE void transpose4x4_bytes(const uint32_t in[4], uint32_t out[4]) {
  const uint32_t t01lo = __byte_perm(in[0], in[1], 0x5140), t01hi = __byte_perm(in[0], in[1], 0x7362);
  const uint32_t t23lo = __byte_perm(in[2], in[3], 0x5140), t23hi = __byte_perm(in[2], in[3], 0x7362);
  out[0] = __byte_perm(t01lo, t23lo, 0x5410);
  out[1] = __byte_perm(t01lo, t23lo, 0x7632);
  out[2] = __byte_perm(t01hi, t23hi, 0x5410);
  out[3] = __byte_perm(t01hi, t23hi, 0x7632);
}


// 2^x with MUFU.EX2 (ftz; within 2 ulp of exp2f, as the CPU's std::exp2 is within 1): p in [0, 1]
// only feeds the FP8 quantizer, where a 2-ulp difference flips a code once in ~10^5 elements.
FP8ATTN_DEVICE float exp2_approx(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}
// The same as the online softmax's exp2 (softmax.h).
struct Exp2Approx {
  FP8ATTN_DEVICE float operator()(float x) const { return exp2_approx(x); }
};

// Lanes of one 32-lane group exchange values (NVIDIA: the whole warp).
FP8ATTN_DEVICE float shfl_xor(float x, int mask) { return __shfl_xor_sync(0xffffffffu, x, mask); }

// The maximum / sum over the 4 lanes of a quad (the lanes that share an m16n8 accumulator row); the
// maximum is NaN-propagating (the running max's, fwd/softmax.h).
FP8ATTN_DEVICE float quad_max(float x) {
  x = max_nan(x, shfl_xor(x, 1));
  return max_nan(x, shfl_xor(x, 2));
}
FP8ATTN_DEVICE float quad_sum(float x) {
  x += shfl_xor(x, 1);
  return x + shfl_xor(x, 2);
}

// The warp tile of the fp8-operand pipeline (pipeline.h) on NVIDIA: one warp computes 16 packed
// query rows x the 64-key KV tile with MmaFp8 (m16n8k32). The interface every atom family's Tile
// provides (the AMD one is amd_mfma.h) -- the pipeline and the kernel use nothing else:
//   kWarpSize, kRowsPerWarp, kRows (query rows owned by one thread), kSElems (S values per thread
//   per KV tile), kPWords (u32 words of P8 per thread), kDAlign (head-dim padding of the tiles),
//   kInvProductScale (1 / value of one atom product relative to the true product of the codes),
//   o_frags(D) / o_cols(D) (4-float groups of the O accumulator / columns it covers, >= D), row_in_warp(lane, ri), row_leader(lane),
//   s_row(i) / s_key(lane, i) = s_key_base(lane) + s_key_off(i) (row slot / key in the tile of S
//   element i: the S layout of fwd/softmax.h), p_row(w) / p_src(w, b)
//   (row slot of P word w; S element quantized into its byte b), o_row(e) / o_col(lane, e)
//   (row slot / column d of O element e), row_max / row_sum (over the lanes sharing a row),
//   k_row(r) (LDS row of key r), copy16 / copy_commit / copy_wait (global -> LDS),
//   transpose4x4_bytes, qk<Policy>(s, sQ, sK, warp, lane), pv<Policy>(acc, pa, sVt, lane), PQuant.
template <Fp8Kind K>
struct Sm89Tile {
  static constexpr int kWarpSize = 32;
  static constexpr int kRowsPerWarp = 16;
  static constexpr int kRows = 2;  // lane (g, t) owns rows g and g + 8
  static constexpr int kSElems = 32;  // 8 n8 tiles x 4
  static constexpr int kPWords = 8;
  static constexpr int kDAlign = 32;  // k32 steps of Q.K^T
  static constexpr float kInvProductScale = 1.f;
  using PQuant = nv::PQuant<K>;
  using Mma = MmaFp8<K>;

  FP8ATTN_HD static constexpr int o_frags(int d) { return d / 8; }  // n8 tiles
  FP8ATTN_HD static constexpr int o_cols(int d) { return d; }       // columns the O tile covers
  FP8ATTN_DEVICE static int row_in_warp(int lane, int ri) { return lane / 4 + 8 * ri; }
  FP8ATTN_DEVICE static bool row_leader(int lane) { return lane % 4 == 0; }
  // S element i = 4j + c of n8 tile j: row slot c >> 1, key key_of(j, 2t + (c & 1)).
  FP8ATTN_HD static constexpr int s_row(int i) { return (i & 3) >> 1; }
  // = key_of(i >> 2, 2t + (i & 1)), folded: s_key_base(lane) + s_key_off(i).
  FP8ATTN_DEVICE static int s_key_base(int lane) { return 4 * (lane % 4); }
  FP8ATTN_HD static constexpr int s_key_off(int i) {
    return 32 * ((i >> 2) >> 2) + 16 * (((i >> 2) >> 1) & 1) + 2 * ((i >> 2) & 1) + (i & 1);
  }
  FP8ATTN_DEVICE static int s_key(int lane, int i) { return s_key_base(lane) + s_key_off(i); }
  // P word w = 4q + 2hh + ri is A register (ri + 2hh) of P.V k32 step q: S tiles j = 4q + 2hh, j + 1.
  FP8ATTN_HD static constexpr int p_row(int w) { return w & 1; }
  FP8ATTN_HD static constexpr int p_src(int w, int b) { return ((w & ~1) + (b >> 1)) * 4 + 2 * (w & 1) + (b & 1); }
  FP8ATTN_HD static constexpr int o_row(int e) { return (e & 3) >> 1; }
  FP8ATTN_DEVICE static int o_col(int lane, int e) { return 8 * (e >> 2) + 2 * (lane % 4) + (e & 1); }
  FP8ATTN_DEVICE static float row_max(float x) { return quad_max(x); }
  FP8ATTN_DEVICE static float row_sum(float x) { return quad_sum(x); }

  // Key order inside a 32-key MMA step. The S accumulator of n8 tile j (0..3) in lane (g, t) holds
  // columns 2t, 2t+1; we make those keys 16*(j>>1) + 4t + 2*(j&1) + {0,1}, so that a lane holds keys
  // 4t..4t+3 and 16+4t..16+4t+3 -- exactly its A fragment of the P.V mma, with no shuffles. The K
  // rows feeding tile j's B operand are therefore key_of(j, n) for n = 0..7.
  FP8ATTN_HD static int key_of(int j, int n) {  // j: n8 tile in the 64-key tile (0..7), n: column 0..7
    return 32 * (j >> 2) + 16 * ((j >> 1) & 1) + 4 * (n >> 1) + 2 * (j & 1) + (n & 1);
  }
  // Physical K row of key r: permutes r mod 16 so that the 8 keys of one n8 tile land in 8
  // distinct rows mod 8 (conflict-free ldmatrix with the odd-chunk row stride).
  FP8ATTN_HD static int k_row(int r) {
    const int x = r & 15;
    return (r & ~15) | (((x >> 1) & 1) << 3) | (((x >> 3) & 1) << 2) | (((x >> 2) & 1) << 1) | (x & 1);
  }

  FP8ATTN_DEVICE static void copy16(void* smem, const void* gmem, bool pred) { cp_async_16(smem, gmem, pred); }
  FP8ATTN_DEVICE static void copy_commit() { cp_async_commit(); }
  FP8ATTN_DEVICE static void copy_wait_all() { cp_async_wait<0>(); }
  FP8ATTN_DEVICE static void transpose4x4_bytes(const uint32_t in[4], uint32_t out[4]) {
    nv::transpose4x4_bytes(in, out);
  }

  // s = Q . K^T for the warp's 16 rows and the 64 keys of the tile (s zeroed here).
  template <class Policy>
  FP8ATTN_DEVICE static void qk(float s[kSElems], const uint8_t* sQ, const uint8_t* sK, int warp, int lane) {
#pragma unroll
    for (int i = 0; i < kSElems; ++i) s[i] = 0.f;
    const uint8_t* qa = sQ + (warp * 16 + (lane & 7) + 8 * ((lane >> 3) & 1)) * Policy::kRowStride + 16 * (lane >> 4);
#pragma unroll
    for (int ks = 0; ks < Policy::kDPad / 32; ++ks) {
      uint32_t a[4];
      ldmatrix_x4(a, qa + 32 * ks);
#pragma unroll
      for (int jp = 0; jp < 4; ++jp) {
        const int mi = lane >> 3, j = 2 * jp + (mi >> 1);
        const int row = k_row(key_of(j, lane & 7));
        uint32_t bf[4];
        ldmatrix_x4(bf, sK + row * Policy::kRowStride + 32 * ks + 16 * (mi & 1));
        const uint32_t b0[2] = {bf[0], bf[1]}, b1[2] = {bf[2], bf[3]};
        Mma::mma(s + 4 * (2 * jp), a, b0);
        Mma::mma(s + 4 * (2 * jp + 1), a, b1);
      }
    }
  }

  // acc += P8 . V8 (pa: the kPWords words of P8, Vt: V transposed [d][key]).
  template <class Policy>
  FP8ATTN_DEVICE static void pv(float (*acc)[4], const uint32_t pa[kPWords], const uint8_t* sVt, int lane) {
    const uint8_t* vb = sVt + ((lane & 7) + 8 * (lane >> 4)) * Policy::kVtStride + 16 * ((lane >> 3) & 1);
#pragma unroll
    for (int q = 0; q < 2; ++q) {
#pragma unroll
      for (int dp = 0; dp < Policy::kD / 16; ++dp) {
        uint32_t bf[4];
        ldmatrix_x4(bf, vb + 16 * dp * Policy::kVtStride + 32 * q);
        const uint32_t b0[2] = {bf[0], bf[1]}, b1[2] = {bf[2], bf[3]};
        Mma::mma(acc[2 * dp], pa + 4 * q, b0);
        Mma::mma(acc[2 * dp + 1], pa + 4 * q, b1);
      }
    }
  }
};

// The accumulator layout of two m16 row tiles per warp (32 rows; the sm_90 f16 pipeline at D <= 128):
// lane (g, t) owns rows g + 8 * ri, ri = 0..3; accumulator fragment n = mt * (D/8) + j holds rows
// 16 * mt + {g, g + 8}, columns 8j + 2t + {0, 1}. Each K / V fragment loaded from shared memory feeds
// both row tiles (half the shared-memory traffic per MMA).
template <int kD>
struct F16Tile2 {
  static constexpr int kWarpSize = 32;
  static constexpr int kRowsPerWarp = 32;
  static constexpr int kRows = 4;
  static constexpr float kInvProductScale = 1.f;
  FP8ATTN_HD static constexpr int o_frags(int d) { return 2 * d / 8; }  // n8 fragments of both row tiles
  FP8ATTN_HD static constexpr int o_cols(int d) { return d; }
  FP8ATTN_DEVICE static int row_in_warp(int lane, int ri) { return lane / 4 + 8 * ri; }
  FP8ATTN_DEVICE static bool row_leader(int lane) { return lane % 4 == 0; }
  FP8ATTN_HD static constexpr int o_row(int e) { return 2 * ((e >> 2) / (kD / 8)) + ((e & 3) >> 1); }
  FP8ATTN_DEVICE static int o_col(int lane, int e) { return 8 * ((e >> 2) % (kD / 8)) + 2 * (lane % 4) + (e & 1); }
  FP8ATTN_DEVICE static float row_max(float x) { return quad_max(x); }
  FP8ATTN_DEVICE static float row_sum(float x) { return quad_sum(x); }
};

// The NVIDIA mma.sync family: the tile above, up to 227 KiB of shared memory per block.
struct Sm89 {
  static constexpr int kSmemLimit = 227 * 1024;
  template <Fp8Kind K>
  using Tile = Sm89Tile<K>;
};

}  // namespace nv
}  // namespace fp8attn
