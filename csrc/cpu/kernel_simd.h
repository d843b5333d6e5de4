// The SIMD work-item kernel, one template for every instruction set: O is the vector Ops
// (simd_avx2.h, simd_avx512.h), P the packed-operand format of the dot products (Fp32Pairs below:
// two fp32 FMAs per pair; Bf16Pairs in kernel_avx512bf16.cpp: one vdpbf16ps). It computes what
// kernel_scalar.cpp computes, bit for bit: the same sums in the same order (each dot-product lane
// runs the scalar oracle's chain), the same cpu_math.h functions.
//
// Lanes (query rows) are vectorized: a "row vector" holds W lanes. Per KV tile and chunk of keys:
//   K chunk -> [key][D] (natural rows; q·k broadcasts a pair of k and multiplies W lanes of q),
//   S^T     -> [row vector][key][W] logits,
//   P^T     -> [key pair][row vector] pair vectors, V -> [key pair][D/W][pair vector over d],
//   O^T     -> [D][row vector][W] accumulators (P·V broadcasts a pair of v).
// Included once per ISA translation unit; internal linkage, as cpu_math.h explains.
#pragma once
#include <cstdint>
#include <cstring>
#include <limits>

#include "cpu/cpu_math.h"
#include "cpu/item.h"
#include "kernels/numeric/half.h"

namespace fp8attn::cpu {
namespace {

constexpr int kChunk = 64;  // keys packed at a time (even: key pairs stay aligned to the tile)

inline int32_t imin(int32_t a, int32_t b) { return a < b ? a : b; }
inline int32_t imax(int32_t a, int32_t b) { return a > b ? a : b; }
inline size_t align64(size_t n) { return (n + 63) & ~size_t{63}; }

// Offsets of the scratch arrays of one work item, each 64-byte aligned (a cache line).
struct Arena {
  size_t total = 0;
  size_t take(size_t bytes) {
    const size_t at = total;
    total += align64(bytes);
    return at;
  }
};

// Pairs as two fp32 values: a pair vector is [2][W] (even elements, then odd), a dot step two FMAs,
// the odd element first (the order of vdpbf16ps).
template <class O>
struct Fp32Pairs {
  static constexpr bool kTiles = false;  // dot products as vector FMAs (KeysKernel's tile hooks unused)
  using E = float;
  using B = float;  // the broadcast operand's storage (q and P rows of the keys kernel)
  using F = typename O::F;
  static constexpr int W = O::W;
  struct V2 {
    F even, odd;
  };
  using V2B = V2;
  static int vidx(int lane, int t) { return t * W + lane; }
  static E to_e(float x) { return x; }
  static V2 load_pv(const E* p) { return {O::load(p), O::load(p + W)}; }
  static V2 bcast_pair(const E* p) { return {O::set1(p[0]), O::set1(p[1])}; }
  static V2 bcast_lane(const E* pv, int lane) { return {O::set1(pv[lane]), O::set1(pv[W + lane])}; }
  static F dot2(F acc, const V2& a, const V2& b) { return O::fma(a.even, b.even, O::fma(a.odd, b.odd, acc)); }
  static void store_pv(E* dst, F even, F odd) {
    O::store(dst, even);
    O::store(dst + W, odd);
  }
  static void store_e(E* dst, F x) { O::store(dst, x); }  // W values of FP8 precision
  static V2B bcast_b(const B* p) { return bcast_pair(p); }
  static void store_b(B* dst, F x) { O::store(dst, x); }
  // n FP8 codes -> their values in natural order (n a multiple of W).
  template <Fp8Kind K>
  static void convert_row(const uint8_t* src, E* dst, int n) {
    for (int i = 0; i < n; i += W) O::store(dst + i, fp8_value<O, K>(O::load_u8(src + i)));
  }
  // W keys' rows (null: a zero row) -> the D/2 pair vectors over keys, pair p at dst + p * stride.
  template <Fp8Kind K>
  static void pack_kt(const uint8_t* const rows[W], E* dst, int D, size_t stride) {
    alignas(64) float row[256];
    for (int i = 0; i < W; ++i) {
      if (rows[i]) {
        convert_row<K>(rows[i], row, D);
      } else {
        std::memset(row, 0, sizeof(float) * D);
      }
      for (int p = 0; p < D / 2; ++p)
        for (int t = 0; t < 2; ++t) dst[p * stride + vidx(i, t)] = row[2 * p + t];
    }
  }
  // Keys r0, r1 (either may be null: a zero row) -> D/W pair vectors over d.
  template <Fp8Kind K>
  static void pack_v_pair(const uint8_t* r0, const uint8_t* r1, E* dst, int D) {
    for (int d = 0; d < D; d += W, dst += 2 * W) {
      O::store(dst, r0 ? fp8_value<O, K>(O::load_u8(r0 + d)) : O::zero());
      O::store(dst + W, r1 ? fp8_value<O, K>(O::load_u8(r1 + d)) : O::zero());
    }
  }
};

// Keys r0, r1 of a pair (either may be null: a zero row) -> the pair's D/W pair vectors over d.
template <class P, Fp8Kind K>
void pack_v_pair(const uint8_t* r0, const uint8_t* r1, typename P::E* dst, int D) {
  if (!r0 && !r1) {
    std::memset(dst, 0, sizeof(typename P::E) * 2 * D);
    return;
  }
  P::template pack_v_pair<K>(r0, r1, dst, D);
}

// Lane r's q8 values (a 16-bit q quantized), head_dim floats.
template <class O, Fp8Kind K>
void load_q_row(const ItemArgs& a, int r, float* q) {
  constexpr int W = O::W;
  const int64_t off = a.q_off[r];
  const auto inv = O::set1(a.q_type == ElemType::FP8 ? 1.f : a.inv_q_descale[r]);
  for (int d = 0; d < a.head_dim; d += W) {
    if (a.q_type == ElemType::FP8) {
      O::store(q + d, fp8_value<O, K>(O::load_u8(static_cast<const uint8_t*>(a.q) + off + d)));
    } else {
      const uint16_t* src = static_cast<const uint16_t*>(a.q) + off + d;
      const auto x = a.q_type == ElemType::BF16 ? O::load_bf16(src) : O::load_fp16(src);
      O::store(q + d, fp8_round_signed<O, K>(O::mul(x, inv)));
    }
  }
}

// Output values O -> their codes in the output type (FP8 after the out scale; bf16 / fp16).
template <class O, Fp8Kind K>
typename O::I encode_out(const ItemArgs& a, typename O::F o) {
  switch (a.out_type) {
    case ElemType::BF16: return bf16_bits<O>(o);
    case ElemType::FP16: return fp16_bits<O>(o);
    default: return fp8_code<O, K>(O::mul(o, O::set1(a.inv_out_scale)));
  }
}

// W output values of lane r from column d0 on: its accumulators times the lane's factor f (lane_result),
// encoded and stored. A lane that saw no key (f = 0) writes 0 even where a tile it shared with other
// lanes multiplied a NaN v by its P = 0 (0 * NaN = NaN).
template <class O, Fp8Kind K>
void store_out(const ItemArgs& a, int r, int d0, typename O::F acc, float f) {
  const auto c = encode_out<O, K>(a, f == 0.f ? O::zero() : O::mul(acc, O::set1(f)));
  if (a.out_type == ElemType::FP8) {
    O::store_u8(static_cast<uint8_t*>(a.out) + a.o_off[r] + d0, c);
  } else {
    O::store_u16(static_cast<uint16_t*>(a.out) + a.o_off[r] + d0, c);
  }
}

// Rows of keys [j0, j1) into the cache ahead of use (consecutive keys are a head stride apart).
template <class O>
void prefetch_keys(const ItemArgs& a, int32_t j0, int32_t j1, bool is_v) {
  for (int32_t j = j0; j < j1; ++j) {
    const char* row = reinterpret_cast<const char*>(key_row(a.keys, j, is_v));
    for (int off = 0; off < a.head_dim; off += 64) O::prefetch(row + off);
  }
}

// The kernel. NK keys x nv row vectors per q·k step, ND columns x nv row vectors per P·V step (nv 1 or 2).
template <class O, class P, int NK, int ND>
struct RowsKernel {
  using F = typename O::F;
  using M = typename O::M;
  using E = typename P::E;
  static constexpr int W = O::W;
  static constexpr int kMaxVectors = 8;

  // Scratch offsets for rv = ceil(lanes / W) row vectors.
  struct Layout {
    size_t qt, kc, vc, s, pt, ot, lo, hi, scale, m, l, tmax, alpha, msub, nan, ltile, total;
    Layout(int D, int tile, int lanes) {
      const size_t lanes_p = static_cast<size_t>((lanes + W - 1) / W) * W;
      Arena ar;
      qt = ar.take(sizeof(E) * D * lanes_p);                          // [D/2][rv][2W]
      kc = ar.take(sizeof(E) * D * (kChunk + NK));                     // [key][D]
      vc = ar.take(sizeof(E) * D * kChunk);                            // [key pair][D/W][2W]
      s = ar.take(sizeof(float) * (static_cast<size_t>(tile) + 2) * lanes_p);  // [rv][key][W]
      pt = ar.take(sizeof(E) * kChunk * lanes_p);                      // [key pair][rv][2W]
      ot = ar.take(sizeof(float) * D * lanes_p);                       // [D][rv][W]
      lo = ar.take(sizeof(int32_t) * lanes_p);
      hi = ar.take(sizeof(int32_t) * lanes_p);
      scale = ar.take(sizeof(float) * lanes_p);
      m = ar.take(sizeof(float) * lanes_p);
      l = ar.take(sizeof(float) * lanes_p);
      tmax = ar.take(sizeof(float) * lanes_p);
      alpha = ar.take(sizeof(float) * lanes_p);
      msub = ar.take(sizeof(float) * lanes_p);
      nan = ar.take(sizeof(float) * lanes_p);
      ltile = ar.take(sizeof(double) * lanes_p);
      total = ar.total;
    }
  };

  static size_t scratch_bytes(int32_t D, int32_t tile, int32_t lanes) { return Layout(D, tile, lanes).total; }

  template <Fp8Kind K>
  struct Item {
    const ItemArgs& a;
    const int D, rv;
    const size_t srow;  // floats per row vector in s
    const float pfloor;  // p_floor: p8 is 0 below it
    E *qt, *kc, *vc, *pt;
    float *s, *ot, *scale, *m, *l, *tmax, *alpha, *msub, *nan;
    int32_t *lo, *hi;
    double* ltile;
    int32_t lo_min[kMaxVectors], lo_max[kMaxVectors], hi_min[kMaxVectors], hi_max[kMaxVectors];

    Item(const ItemArgs& args, const Layout& L)
        : a(args), D(args.head_dim), rv((args.lanes + W - 1) / W), srow((static_cast<size_t>(args.tile) + 2) * W),
          pfloor(p_floor<K>(args.inv_p_scale)) {
      unsigned char* base = static_cast<unsigned char*>(args.scratch);
      qt = reinterpret_cast<E*>(base + L.qt);
      kc = reinterpret_cast<E*>(base + L.kc);
      vc = reinterpret_cast<E*>(base + L.vc);
      pt = reinterpret_cast<E*>(base + L.pt);
      s = reinterpret_cast<float*>(base + L.s);
      ot = reinterpret_cast<float*>(base + L.ot);
      lo = reinterpret_cast<int32_t*>(base + L.lo);
      hi = reinterpret_cast<int32_t*>(base + L.hi);
      scale = reinterpret_cast<float*>(base + L.scale);
      m = reinterpret_cast<float*>(base + L.m);
      l = reinterpret_cast<float*>(base + L.l);
      tmax = reinterpret_cast<float*>(base + L.tmax);
      alpha = reinterpret_cast<float*>(base + L.alpha);
      msub = reinterpret_cast<float*>(base + L.msub);
      nan = reinterpret_cast<float*>(base + L.nan);
      ltile = reinterpret_cast<double*>(base + L.ltile);
    }

    void setup() {
      for (int r = 0; r < rv * W; ++r) {
        const bool real = r < a.lanes;
        lo[r] = real ? a.lo[r] : 0;  // padding lanes see nothing
        hi[r] = real ? a.hi[r] : 0;
        scale[r] = real ? a.logit_scale[r] : 0.f;
        m[r] = -std::numeric_limits<float>::infinity();
        l[r] = 0.f;
      }
      for (int v = 0; v < rv; ++v) {
        lo_min[v] = hi_min[v] = std::numeric_limits<int32_t>::max();
        lo_max[v] = hi_max[v] = std::numeric_limits<int32_t>::min();
        for (int r = v * W; r < imin((v + 1) * W, a.lanes); ++r) {
          lo_min[v] = imin(lo_min[v], lo[r]), lo_max[v] = imax(lo_max[v], lo[r]);
          hi_min[v] = imin(hi_min[v], hi[r]), hi_max[v] = imax(hi_max[v], hi[r]);
        }
      }
      // Q^T: pair vectors over lanes, padding lanes zero (the rows fetched ahead: they are a row stride apart).
      const int q_bytes = D * (a.q_type == ElemType::FP8 ? 1 : 2);
      for (int r = 0; r < a.lanes; ++r)
        for (int off = 0; off < q_bytes; off += 64)
          O::prefetch(static_cast<const char*>(a.q) + (a.q_off[r] * q_bytes) / D + off);
      alignas(64) float q[256];
      for (int v = 0; v < rv; ++v)
        for (int i = 0; i < W; ++i) {
          const int r = v * W + i;
          if (r < a.lanes) {
            load_q_row<O, K>(a, r, q);
          } else {
            std::memset(q, 0, sizeof(float) * D);
          }
          for (int p = 0; p < D / 2; ++p)
            for (int t = 0; t < 2; ++t) qt[(static_cast<size_t>(p) * rv + v) * 2 * W + P::vidx(i, t)] = P::to_e(q[2 * p + t]);
        }
      std::memset(ot, 0, sizeof(float) * D * rv * W);
    }

    // The lanes' output rows and lse from O^T (ItemArgs' epilogue): W x W blocks of O^T transposed into
    // rows, scaled per lane, encoded and stored W columns at a time.
    void epilogue() const {
      float fac[W];
      for (int v = 0; v < rv; ++v) {
        const int n = imin(W, a.lanes - v * W);
        for (int i = 0; i < n; ++i) {
          const int r = v * W + i;
          const RowResult res = lane_result(a, r, m[r], l[r]);
          fac[i] = res.o_scale;
          if (a.lse) a.lse[a.lse_off[r]] = res.lse;
        }
        for (int d0 = 0; d0 < D; d0 += W) {
          F x[W];
          for (int dd = 0; dd < W; ++dd) x[dd] = O::load(ot + (static_cast<size_t>(d0 + dd) * rv + v) * W);
          O::transpose(x);
          for (int i = 0; i < n; ++i) store_out<O, K>(a, v * W + i, d0, x[i], fac[i]);
        }
      }
    }

    // Some lane of row vector v sees a key of [j0, j1).
    bool sees(int v, int32_t j0, int32_t j1) const {
      if (lo_min[v] >= j1 || hi_max[v] <= j0) return false;
      for (int r = v * W; r < imin((v + 1) * W, a.lanes); ++r)
        if (imax(lo[r], j0) < imin(hi[r], j1)) return true;
      return false;
    }
    // Every real lane of row vector v sees all of [j0, j1).
    bool sees_all(int v, int32_t j0, int32_t j1) const { return lo_max[v] <= j0 && hi_min[v] >= j1; }

    // Logits of row vectors [v0, v0 + nv) for chunk keys [c0, c1) (packed from c0 in kc) into s (column
    // j at j - cb), -inf where a lane does not see the key, folded into the tile max and NaN flag.
    template <int nv>
    void qk(int v0, int32_t c0, int32_t c1, int32_t cb) {
      const F ninf = O::set1(-std::numeric_limits<float>::infinity());
      F tm[nv], sc[nv];
      M nanm[nv];
      bool masked[nv];
      for (int v = 0; v < nv; ++v) {
        tm[v] = O::load(tmax + (v0 + v) * W);
        nanm[v] = O::isnan(O::load(nan + (v0 + v) * W));
        sc[v] = O::load(scale + (v0 + v) * W);
        masked[v] = !sees_all(v0 + v, c0, c1);
      }
      for (int32_t k0 = c0; k0 < c1; k0 += NK) {
        F acc[nv][NK];
        for (int v = 0; v < nv; ++v)
          for (int k = 0; k < NK; ++k) acc[v][k] = O::zero();
        const E* kr = kc + static_cast<size_t>(k0 - c0) * D;
        for (int p = 0; p < D / 2; ++p) {
          typename P::V2 q[nv];
          for (int v = 0; v < nv; ++v) q[v] = P::load_pv(qt + (static_cast<size_t>(p) * rv + v0 + v) * 2 * W);
          for (int k = 0; k < NK; ++k) {
            const auto b = P::bcast_pair(kr + static_cast<size_t>(k) * D + 2 * p);
            for (int v = 0; v < nv; ++v) acc[v][k] = P::dot2(acc[v][k], q[v], b);
          }
        }
        for (int k = 0; k < NK && k0 + k < c1; ++k) {
          const int32_t j = k0 + k;
          for (int v = 0; v < nv; ++v) {
            F x = a.softcap_log2 > 0.f ? O::mul(O::set1(a.softcap_log2), tanh<O>(O::mul(acc[v][k], sc[v])))
                                       : O::mul(acc[v][k], sc[v]);
            if (masked[v]) {
              const auto jv = O::set1i(static_cast<uint32_t>(j));
              const M vis = O::mandn(O::lti(jv, O::loadi(lo + (v0 + v) * W)), O::lti(jv, O::loadi(hi + (v0 + v) * W)));
              x = O::select(vis, x, ninf);
            }
            nanm[v] = O::mor(nanm[v], O::isnan(x));
            tm[v] = O::max(tm[v], x);
            O::store(s + (v0 + v) * srow + static_cast<size_t>(j - cb) * W, x);
          }
        }
      }
      for (int v = 0; v < nv; ++v) {
        O::store(tmax + (v0 + v) * W, tm[v]);
        O::store(nan + (v0 + v) * W, O::select(nanm[v], O::set1(std::numeric_limits<float>::quiet_NaN()), O::zero()));
      }
    }

    // After the tile's logits: m, the rescale alpha and P's offset for row vector v; O^T rescaled.
    void update_max(int v) {
      const float ninf = -std::numeric_limits<float>::infinity();
      const F mo = O::load(m + v * W), nanv = O::load(nan + v * W);
      const F mn = O::select(O::isnan(nanv), nanv, O::max(O::load(tmax + v * W), mo));  // keeps a NaN mo
      const M empty = O::eq(mn, O::set1(ninf));  // nothing seen yet: p = 0, acc and l unchanged
      const F al = O::select(empty, O::set1(1.f), exp2<O>(O::sub(mo, mn)));
      O::store(m + v * W, mn);
      O::store(alpha + v * W, al);
      O::store(msub + v * W, O::select(empty, O::zero(), mn));
      bool unit = true;
      for (int i = 0; i < W; ++i) unit = unit && alpha[v * W + i] == 1.f;
      if (unit) return;  // flush(acc·1) = acc: no accumulator is ever denormal
      const F tiny = O::set1(0x1p-126f);
      for (int d = 0; d < D; ++d) {
        float* o = ot + (static_cast<size_t>(d) * rv + v) * W;
        const F x = O::mul(O::load(o), al);
        O::store(o, O::select(O::lt(O::abs(x), tiny), O::zero(), x));
      }
    }

    // P of chunk keys [c0, c1) for row vector v as pair vectors in pt; their (exact) sum into ltile.
    void probs(int v, int32_t c0, int32_t c1, int32_t cb) {
      const F ms = O::load(msub + v * W), inv = O::set1(a.inv_p_scale), fl = O::set1(pfloor);
      const float* sv = s + v * srow;
      F lsum = O::zero();
      for (int32_t j = c0; j < c1; j += 2) {
        F p8[2] = {O::zero(), O::zero()};
        for (int t = 0; t < 2 && j + t < c1; ++t) {
          const F x = O::load(sv + static_cast<size_t>(j + t - cb) * W);
          p8[t] = p8_value<O, K>(O::sub(x, ms), inv, fl);
          lsum = O::add(lsum, p8[t]);
        }
        P::store_pv(pt + (static_cast<size_t>((j - c0) / 2) * rv + v) * 2 * W, p8[0], p8[1]);
      }
      float ls[W];
      O::store(ls, lsum);
      for (int i = 0; i < W; ++i) ltile[v * W + i] += ls[i];
    }

    // O^T of row vectors [v0, v0 + nv) += P^T·V over the chunk's key pairs.
    template <int nv>
    void pv(int v0, int pairs) {
      for (int d0 = 0; d0 < D; d0 += ND) {
        F acc[nv][ND];
        for (int v = 0; v < nv; ++v)
          for (int dd = 0; dd < ND; ++dd) acc[v][dd] = O::load(ot + (static_cast<size_t>(d0 + dd) * rv + v0 + v) * W);
        for (int i = 0; i < pairs; ++i) {
          typename P::V2 pp[nv];
          for (int v = 0; v < nv; ++v) pp[v] = P::load_pv(pt + (static_cast<size_t>(i) * rv + v0 + v) * 2 * W);
          const E* vr = vc + static_cast<size_t>(i) * 2 * D;
          for (int dd = 0; dd < ND; ++dd) {
            const int d = d0 + dd;
            const auto b = P::bcast_lane(vr + (d / W) * 2 * W, d % W);
            for (int v = 0; v < nv; ++v) acc[v][dd] = P::dot2(acc[v][dd], pp[v], b);
          }
        }
        for (int v = 0; v < nv; ++v)
          for (int dd = 0; dd < ND; ++dd) O::store(ot + (static_cast<size_t>(d0 + dd) * rv + v0 + v) * W, acc[v][dd]);
      }
    }

    // Row vectors that see some key of [c0, c1), in groups of two where adjacent ones both do.
    template <class Fn>
    void for_groups(const bool* act, int32_t c0, int32_t c1, Fn&& fn) const {
      for (int v = 0; v < rv;) {
        if (!act[v] || !sees(v, c0, c1)) {
          ++v;
        } else if (v + 1 < rv && act[v + 1] && sees(v + 1, c0, c1)) {
          fn(v, 2);
          v += 2;
        } else {
          fn(v, 1);
          ++v;
        }
      }
    }

    void run() {
      setup();
      const int32_t tile = a.tile;
      for (int32_t t0 = a.key_begin / tile * tile; t0 < a.key_end; t0 += tile) {
        const int32_t ja = imax(t0, a.key_begin), jb = imin(t0 + tile, a.key_end);
        const int32_t cb = t0 + ((ja - t0) & ~1);  // key pairs stay aligned to the tile
        bool act[kMaxVectors];
        bool any = false;
        for (int v = 0; v < rv; ++v) {
          act[v] = sees(v, ja, jb);
          any = any || act[v];
          if (!act[v]) continue;
          O::store(tmax + v * W, O::set1(-std::numeric_limits<float>::infinity()));
          O::store(nan + v * W, O::zero());
          for (int i = 0; i < W; ++i) ltile[v * W + i] = 0.0;
        }
        if (!any) continue;  // a tile no lane sees changes nothing
        for (int32_t c0 = cb; c0 < jb; c0 += kChunk) {
          const int32_t c1 = imin(c0 + kChunk, jb), s0 = imax(c0, ja);
          prefetch_keys<O>(a, c1, imin(c1 + kChunk, a.key_end), false);  // the next chunk's keys
          prefetch_keys<O>(a, s0, c1, true);                               // and this chunk's values, used below
          for (int32_t j = c0; j < c1 + (NK - 1); ++j) {
            E* dst = kc + static_cast<size_t>(j - c0) * D;
            if (j < ja || j >= c1) {
              std::memset(dst, 0, sizeof(E) * D);
            } else {
              P::template convert_row<K>(key_row(a.keys, j, false), dst, D);
            }
          }
          for_groups(act, c0, c1, [&](int v, int n) { n == 2 ? qk<2>(v, c0, c1, cb) : qk<1>(v, c0, c1, cb); });
        }
        for (int v = 0; v < rv; ++v)
          if (act[v]) update_max(v);
        for (int32_t c0 = cb; c0 < jb; c0 += kChunk) {
          const int32_t c1 = imin(c0 + kChunk, jb);
          const int pairs = (c1 - c0 + 1) / 2;
          for (int i = 0; i < pairs; ++i) {
            const int32_t j = c0 + 2 * i;
            pack_v_pair<P, K>(j >= ja ? key_row(a.keys, j, true) : nullptr,
                              j + 1 < c1 ? key_row(a.keys, j + 1, true) : nullptr, vc + static_cast<size_t>(i) * 2 * D, D);
          }
          for_groups(act, c0, c1, [&](int v, int n) {
            for (int u = v; u < v + n; ++u) probs(u, c0, c1, cb);
            n == 2 ? pv<2>(v, pairs) : pv<1>(v, pairs);
          });
        }
        for (int v = 0; v < rv; ++v)
          if (act[v])
            for (int i = v * W; i < (v + 1) * W; ++i) l[i] = l[i] * alpha[i] + static_cast<float>(ltile[i]);
      }
      epilogue();
    }
  };

  // Items of more than kMaxVectors row vectors run as several (lanes are independent).
  static void run(const ItemArgs& args) {
    constexpr int kMaxLanes = kMaxVectors * W;
    for (int r0 = 0; r0 < args.lanes; r0 += kMaxLanes) {
      ItemArgs a = args;
      a.lanes = imin(kMaxLanes, args.lanes - r0);
      a.lo += r0, a.hi += r0, a.logit_scale += r0, a.inv_q_descale += r0, a.v_descale += r0;
      a.q_off += r0, a.o_off += r0, a.lse_off += r0;
      if (a.sink) a.sink += r0;
      const Layout L(a.head_dim, a.tile, a.lanes);
      if (a.kind == Fp8Kind::E4M3FN) {
        Item<Fp8Kind::E4M3FN>(a, L).run();
      } else {
        Item<Fp8Kind::E4M3FNUZ>(a, L).run();
      }
    }
  }
};

// The kernel for items of a few lanes (decode, GQA groups): q·k vectorized over keys (K^T: pair
// vectors over keys per d pair), P·V over d (V as in RowsKernel), O in rows [lane][D]. A tile runs group
// by group (a group: the lanes of one kv head): its K rows, a block of NKB key vectors at a time (packed,
// then NR lanes x NKB vectors per q·k step), then its V rows, kPairs key pairs at a time (packed, then NR
// lanes x ND column vectors per P·V step), while the next group's rows are fetched into the cache.
template <class O, class P, int NR, int NKB, int ND>
struct KeysKernel {
  using Ops = O;
  using F = typename O::F;
  using M = typename O::M;
  using E = typename P::E;
  static constexpr int W = O::W;
  static constexpr int kMaxLanes = 128;
  static constexpr int kPairs = 16;                 // key pairs packed per P·V block
  static constexpr int kMaxTileKeys = 128 + 2;      // a tile's keys from its pair-aligned start (tile <= 128)

  // Tile products (P::kTiles) take q and P rows kTileRows lanes at a time: q and P get that many rows of padding.
  static constexpr int kTileRows = 16;
  static constexpr int kPad = P::kTiles ? kTileRows : 0;

  static size_t srow(int tile) { return static_cast<size_t>((tile + 1) / kChunk + 1) * kChunk; }
  static int dpad(int D) { return (D + 31) / 32 * 32; }  // a key row's length for tile products (zero padded)
  using Bq = typename P::B;
  struct Layout {
    size_t qn, kt, vc, s, pn, o, tmp, ct, kr, qt, total;
    Layout(int D, int tile, int lanes) {
      const size_t nl = static_cast<size_t>(imin(lanes, kMaxLanes));
      Arena ar;
      qn = ar.take(sizeof(Bq) * D * (nl + kPad));     // [lane][D]
      kt = ar.take(sizeof(E) * D * NKB * W);          // [D/2][NKB][2W]: one block of key vectors
      vc = ar.take(sizeof(E) * D * 2 * kPairs);       // [key pair][D/W][2W]: one block of key pairs
      s = ar.take(sizeof(float) * srow(tile) * nl);   // [lane][key]
      pn = ar.take(sizeof(Bq) * kChunk * (nl + kPad));  // [lane][key]
      o = ar.take(sizeof(float) * D * nl);            // [lane][D]
      tmp = ar.take(sizeof(float) * D);
      ct = ar.take(P::kTiles ? sizeof(float) * kTileRows * (D > NKB * W ? D : NKB * W) : 0);  // tile results
      kr = ar.take(P::kTiles ? sizeof(E) * dpad(D) * NKB * W : 0);  // [key][dpad]: a block of key rows (key_rows)
      qt = ar.take(P::kTiles ? sizeof(E) * dpad(D) * kTileRows : 0);  // [dpad/2][kTileRows][2]: a group's q^T
      total = ar.total;
    }
  };
  static size_t scratch_bytes(int32_t D, int32_t tile, int32_t lanes) { return Layout(D, tile, lanes).total; }

  template <Fp8Kind K>
  struct Item {
    const ItemArgs& a;
    const int D;
    const size_t sr;
    const int lpg;  // lanes per group (kv head)
    const int lines;  // cache lines per K (or V) row
    Bq *qn, *pn;
    E *kt, *vc;
    float *s, *o, *tmp, *ct;
    E *kr, *qt;
    int tile_rows = 0;  // rows of the q, P and O tiles: kTileRows, or the lanes of a smaller group
    // Tile products with fewer lanes per group than a tile has rows (decode): q·k as S^T = K·Q^T, the keys'
    // rows the A operand as they are (K^T's transpose costs more than the products then; docs/cpu.md).
    bool key_rows = false;
    float m[kMaxLanes], l[kMaxLanes], tmax[kMaxLanes], alpha[kMaxLanes], msub[kMaxLanes];
    double ltile[kMaxLanes];
    bool nan[kMaxLanes];
    // Group 0's K and V rows of the tile's keys, from its pair-aligned start cb (key cb + i at [i]).
    const uint8_t* krow[kMaxTileKeys];
    const uint8_t* vrow[kMaxTileKeys];

    Item(const ItemArgs& args, const Layout& L)
        : a(args), D(args.head_dim), sr(srow(args.tile)), lpg(args.lanes / args.groups), lines((args.head_dim + 63) / 64) {
      unsigned char* base = static_cast<unsigned char*>(args.scratch);
      qn = reinterpret_cast<Bq*>(base + L.qn);
      kt = reinterpret_cast<E*>(base + L.kt);
      vc = reinterpret_cast<E*>(base + L.vc);
      pn = reinterpret_cast<Bq*>(base + L.pn);
      s = reinterpret_cast<float*>(base + L.s);
      o = reinterpret_cast<float*>(base + L.o);
      tmp = reinterpret_cast<float*>(base + L.tmp);
      ct = reinterpret_cast<float*>(base + L.ct);
      kr = reinterpret_cast<E*>(base + L.kr);
      qt = reinterpret_cast<E*>(base + L.qt);
    }

    // Group g's K (is_v false) or V row of tile key cb + i (null outside [ja, jb): a zero row).
    const uint8_t* row(int g, int i, bool is_v) const {
      const uint8_t* r = (is_v ? vrow : krow)[i];
      return r ? r + g * (is_v ? a.v_group_stride : a.k_group_stride) : nullptr;
    }

    // fn(j, row) for the K (or V) rows of keys [j0, j1) of group 0: one block-table read per cache block.
    template <class Fn>
    void for_rows(int32_t j0, int32_t j1, bool is_v, Fn&& fn) const {
      const KeySource& k = a.keys;
      const int64_t step = is_v ? k.v_row : k.k_row;
      for (int32_t j = j0; j < j1;) {
        const int32_t end = k.blocks ? imin(j1, (j / k.page + 1) * k.page) : j1;
        for (const uint8_t* r = key_row(k, j, is_v); j < end; ++j, r += step) fn(j, r);
      }
    }
    // The rows of keys [j0, j1) of group g into the cache (K or V), ahead of their pass.
    void prefetch(int g, int32_t j0, int32_t j1, bool is_v) const {
      const int64_t gs = g * (is_v ? a.v_group_stride : a.k_group_stride);
      for_rows(j0, j1, is_v, [&](int32_t, const uint8_t* r) {
        for (int c = 0; c < lines; ++c) O::prefetch(reinterpret_cast<const char*>(r + gs) + 64 * c);
      });
    }
    // Rows of tile keys [i0, i1) (offsets from cb) of group g (its cached pointers).
    void prefetch_tile(int g, int i0, int i1, bool is_v) const {
      const int64_t gs = g * (is_v ? a.v_group_stride : a.k_group_stride);
      for (int i = i0; i < i1; ++i) {
        const uint8_t* r = (is_v ? vrow : krow)[i];
        if (!r) continue;
        for (int c = 0; c < lines; ++c) O::prefetch(reinterpret_cast<const char*>(r + gs) + 64 * c);
      }
    }

    // Logits of lanes [r0, r0 + nr) for the nk key vectors from key j0 (packed in kt) into s, -inf outside
    // [lo, min(hi, c1)); folded into the lanes' tile max and NaN flag.
    template <int nr, int nk>
    void qk(int r0, int32_t j0, int32_t c1, int32_t cb) {
      F acc[nr][nk];
      for (int r = 0; r < nr; ++r)
        for (int k = 0; k < nk; ++k) acc[r][k] = O::zero();
      for (int p = 0; p < D / 2; ++p) {
        typename P::V2 kv[nk];
        for (int k = 0; k < nk; ++k) kv[k] = P::load_pv(kt + (static_cast<size_t>(p) * NKB + k) * 2 * W);
        for (int r = 0; r < nr; ++r) {
          const auto b = P::bcast_b(qn + static_cast<size_t>(r0 + r) * D + 2 * p);
          for (int k = 0; k < nk; ++k) acc[r][k] = P::dot2(acc[r][k], kv[k], b);
        }
      }
      for (int r = 0; r < nr; ++r) logits<nk>(r0 + r, acc[r], j0, c1, cb);
    }
    // Lane `lane`'s dot products with the nk key vectors from key j0 -> its logits in s, -inf outside
    // [lo, min(hi, c1)); folded into the lane's tile max and NaN flag.
    template <int nk>
    void logits(int lane, const F* acc, int32_t j0, int32_t c1, int32_t cb) {
      alignas(64) static constexpr int32_t kIota[16] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
      const F ninf = O::set1(-std::numeric_limits<float>::infinity());
      const F sc = O::set1(a.logit_scale[lane]);
      const auto lo = O::set1i(static_cast<uint32_t>(a.lo[lane]));
      const auto hi = O::set1i(static_cast<uint32_t>(imin(a.hi[lane], c1)));
      F tm = O::set1(tmax[lane]);
      M nm = O::mzero();
      for (int k = 0; k < nk; ++k) {
        const int32_t jk = j0 + k * W;
        const auto jv = O::addi(O::set1i(static_cast<uint32_t>(jk)), O::loadi(kIota));
        F x = a.softcap_log2 > 0.f ? O::mul(O::set1(a.softcap_log2), tanh<O>(O::mul(acc[k], sc))) : O::mul(acc[k], sc);
        x = O::select(O::mandn(O::lti(jv, lo), O::lti(jv, hi)), x, ninf);
        nm = O::mor(nm, O::isnan(x));
        tm = O::max(tm, x);
        O::store(s + lane * sr + (jk - cb), x);
      }
      tmax[lane] = O::hmax(tm);  // exact; a NaN lane is flagged apart
      nan[lane] = nan[lane] || O::any(nm);
    }
    // Tile products (P::kTiles): the group's lanes kTileRows at a time, each block's dot products with the
    // nk key vectors as one tile product per key vector into ct ([nk][kTileRows][W]), then each lane's logits.
    template <int nk>
    void qk_tiles(int g, int32_t j0, int32_t c1, int32_t cb) {
      for (int r0 = g * lpg; r0 < (g + 1) * lpg; r0 += kTileRows) {
        P::template qk_block<nk>(qn + static_cast<size_t>(r0) * D, kt, D, NKB, ct);
        for (int r = r0; r < imin(r0 + kTileRows, (g + 1) * lpg); ++r) {
          F acc[nk];
          for (int k = 0; k < nk; ++k) acc[k] = O::load(ct + (static_cast<size_t>(k) * kTileRows + r - r0) * W);
          logits<nk>(r, acc, j0, c1, cb);
        }
      }
    }
    // Key rows: the nk key vectors' rows (in kr) times the group's q^T (in qt), one tile product per d step into
    // ct ([nk][W keys][kTileRows lanes]), then each lane's logits from its column.
    template <int nk>
    void qk_key_rows(int g, int32_t j0, int32_t c1, int32_t cb) {
      P::template qkt_block<nk>(kr, dpad(D), qt, ct);
      for (int r = g * lpg; r < (g + 1) * lpg; ++r) {
        F acc[nk];
        for (int k = 0; k < nk; ++k) acc[k] = P::column(ct + static_cast<size_t>(k) * W * kTileRows, r - g * lpg);
        logits<nk>(r, acc, j0, c1, cb);
      }
    }
    template <int nk>
    void qk_lanes(int g, int32_t j0, int32_t c1, int32_t cb) {
      if constexpr (P::kTiles) {
        if (key_rows) qk_key_rows<nk>(g, j0, c1, cb);
        else qk_tiles<nk>(g, j0, c1, cb);
      } else {
        for (int r0 = g * lpg; r0 < (g + 1) * lpg; r0 += NR) {
          const int n = imin(NR, (g + 1) * lpg - r0);
          if (n >= NR) qk<NR, nk>(r0, j0, c1, cb);
          else if (n == 3) qk<3, nk>(r0, j0, c1, cb);
          else if (n == 2) qk<2, nk>(r0, j0, c1, cb);
          else qk<1, nk>(r0, j0, c1, cb);
        }
      }
    }

    // P of lane r for chunk keys [c0, c0 + nkb W) (zero where its logit is -inf) into pn, their sum into ltile.
    void probs(int r, int32_t c0, int32_t cb, int nkb, F floor) {
      const F ms = O::set1(msub[r]), inv = O::set1(a.inv_p_scale);
      F lsum = O::zero();
      for (int kb = 0; kb < nkb; ++kb) {
        const F p8 = p8_value<O, K>(O::sub(O::load(s + r * sr + (c0 - cb) + kb * W), ms), inv, floor);
        lsum = O::add(lsum, p8);
        P::store_b(pn + static_cast<size_t>(r) * kChunk + kb * W, p8);
      }
      if constexpr (P::kTiles)  // a P tile spans 2 kPairs keys: zeros past the chunk's (0 · NaN is NaN)
        for (int kb = nkb; kb % (2 * kPairs / W) != 0; ++kb) P::store_b(pn + static_cast<size_t>(r) * kChunk + kb * W, O::zero());
      ltile[r] += O::hsum_exact(lsum);  // sums of p8 within a chunk are exact in fp32
    }

    // O of lanes [r0, r0 + nr), column vectors [db0, db0 + nd) += P·V over key pairs [i0, i0 + np) of the
    // chunk (packed in vc from pair i0).
    template <int nr, int nd>
    void pv(int r0, int db0, int i0, int np) {
      F acc[nr][nd];
      for (int r = 0; r < nr; ++r)
        for (int k = 0; k < nd; ++k) acc[r][k] = O::load(o + static_cast<size_t>(r0 + r) * D + (db0 + k) * W);
      for (int i = 0; i < np; ++i) {
        typename P::V2 vv[nd];
        for (int k = 0; k < nd; ++k) vv[k] = P::load_pv(vc + static_cast<size_t>(i) * 2 * D + (db0 + k) * 2 * W);
        for (int r = 0; r < nr; ++r) {
          const auto b = P::bcast_b(pn + static_cast<size_t>(r0 + r) * kChunk + 2 * (i0 + i));
          for (int k = 0; k < nd; ++k) acc[r][k] = P::dot2(acc[r][k], vv[k], b);
        }
      }
      for (int r = 0; r < nr; ++r)
        for (int k = 0; k < nd; ++k) O::store(o + static_cast<size_t>(r0 + r) * D + (db0 + k) * W, acc[r][k]);
    }
    template <int nr>
    void pv_columns(int r0, int i0, int np) {
      const int dblocks = D / W;
      int db0 = 0;
      for (; db0 + ND <= dblocks; db0 += ND) pv<nr, ND>(r0, db0, i0, np);
      for (; db0 < dblocks; ++db0) pv<nr, 1>(r0, db0, i0, np);
    }
    void pv_lanes(int g, int i0, int np) {
      if constexpr (P::kTiles) {
        pv_tiles(g, i0);
      } else {
        for (int r0 = g * lpg; r0 < (g + 1) * lpg; r0 += NR) {
          const int n = imin(NR, (g + 1) * lpg - r0);
          if (n >= NR) pv_columns<NR>(r0, i0, np);
          else if (n == 3) pv_columns<3>(r0, i0, np);
          else if (n == 2) pv_columns<2>(r0, i0, np);
          else pv_columns<1>(r0, i0, np);
        }
      }
    }
    // Tile products: O rows of kTileRows lanes += P (their kTilePairs key pairs from i0) · V (the block in vc,
    // zero rows past its pairs). A block shorter than the configured rows (the group's last, when lpg is not a
    // multiple of them) goes through ct, so that no other lane's O row is written.
    void pv_tiles(int g, int i0) {
      for (int r0 = g * lpg; r0 < (g + 1) * lpg; r0 += kTileRows) {
        const int n = imin(kTileRows, (g + 1) * lpg - r0);
        const Bq* p = pn + static_cast<size_t>(r0) * kChunk + 2 * i0;
        if (n == tile_rows) {
          P::pv_block(p, kChunk, vc, D, o + static_cast<size_t>(r0) * D);
        } else {
          std::memcpy(ct, o + static_cast<size_t>(r0) * D, sizeof(float) * D * n);
          P::pv_block(p, kChunk, vc, D, ct);
          std::memcpy(o + static_cast<size_t>(r0) * D, ct, sizeof(float) * D * n);
        }
      }
    }

    // Lane r after its tile's logits (the rows kernel's update_max, per lane): m, alpha, P's offset; O rescaled.
    void update_max(int r) {
      const float ninf = -std::numeric_limits<float>::infinity();
      const float mn = nan[r] ? std::numeric_limits<float>::quiet_NaN() : ScalarOps::max(tmax[r], m[r]);
      const bool empty = mn == ninf;
      alpha[r] = empty ? 1.f : exp2<ScalarOps>(m[r] - mn);
      msub[r] = empty ? 0.f : mn;
      m[r] = mn;
      if (alpha[r] == 1.f) return;
      const F al = O::set1(alpha[r]), tiny = O::set1(0x1p-126f);
      for (int d = 0; d < D; d += W) {
        const F x = O::mul(O::load(o + static_cast<size_t>(r) * D + d), al);
        O::store(o + static_cast<size_t>(r) * D + d, O::select(O::lt(O::abs(x), tiny), O::zero(), x));
      }
    }

    // Group g's pass over tile [ja, jb) (pair-aligned start cb): its logits, max, P and P·V. The next group's
    // (or, after the last, the next tile's first group's) K rows are fetched during the K pass, V rows during
    // the V pass.
    void group_tile(int g, int32_t ja, int32_t jb, int32_t cb, F floor) {
      const int r0 = g * lpg, r1 = r0 + lpg;
      const int32_t next_end = imin(jb + (jb - cb), a.key_end);  // the next tile's first keys, roughly as many
      auto ahead = [&](int i0, int i1, bool is_v) {
        if (g + 1 < a.groups) {
          prefetch_tile(g + 1, i0, i1, is_v);
        } else {
          prefetch(0, imin(jb + i0, next_end), imin(jb + i1, next_end), is_v);
        }
      };
      for (int r = r0; r < r1; ++r) tmax[r] = -std::numeric_limits<float>::infinity(), nan[r] = false, ltile[r] = 0.0;
      if constexpr (P::kTiles)
        if (key_rows) P::pack_qt(qn + static_cast<size_t>(r0) * D, lpg, D, dpad(D), qt);
      for (int32_t c0 = cb; c0 < jb; c0 += kChunk) {
        const int32_t c1 = imin(c0 + kChunk, jb);
        const int nkb = (c1 - c0 + W - 1) / W;
        const uint8_t* rows[W];
        for (int kb = 0; kb < nkb;) {
          const int nk = nkb - kb >= NKB ? NKB : 1;
          for (int t = 0; key_rows && t < nk * W; ++t) {  // (dead code unless P::kTiles)
            const int32_t j = c0 + kb * W + t;
            const uint8_t* r = j < c1 ? row(g, j - cb, false) : nullptr;
            E* dst = kr + static_cast<size_t>(t) * dpad(D);
            if (r) P::template convert_row<K>(r, dst, D);
            else std::memset(dst, 0, sizeof(E) * D);
          }
          for (int k = 0; !key_rows && k < nk; ++k) {
            for (int t = 0; t < W; ++t) {
              const int32_t j = c0 + (kb + k) * W + t;
              rows[t] = j < c1 ? row(g, j - cb, false) : nullptr;
            }
            P::template pack_kt<K>(rows, kt + static_cast<size_t>(k) * 2 * W, D, static_cast<size_t>(NKB) * 2 * W);
          }
          ahead(c0 - cb + kb * W, imin(c0 - cb + (kb + nk) * W, jb - cb), false);
          if (nk == NKB) qk_lanes<NKB>(g, c0 + kb * W, c1, cb);
          else qk_lanes<1>(g, c0 + kb * W, c1, cb);
          kb += nk;
        }
      }
      for (int r = r0; r < r1; ++r) update_max(r);
      for (int32_t c0 = cb; c0 < jb; c0 += kChunk) {
        const int32_t c1 = imin(c0 + kChunk, jb);
        const int nkb = (c1 - c0 + W - 1) / W, pairs = (c1 - c0 + 1) / 2;
        for (int r = r0; r < r1; ++r) probs(r, c0, cb, nkb, floor);
        for (int i0 = 0; i0 < pairs; i0 += kPairs) {
          const int np = imin(kPairs, pairs - i0);
          for (int i = 0; i < np; ++i) {
            const int32_t j = c0 + 2 * (i0 + i);
            pack_v_pair<P, K>(row(g, j - cb, true), j + 1 < c1 ? row(g, j + 1 - cb, true) : nullptr,
                              vc + static_cast<size_t>(i) * 2 * D, D);
          }
          if constexpr (P::kTiles) std::memset(vc + static_cast<size_t>(np) * 2 * D, 0, sizeof(E) * 2 * D * (kPairs - np));
          ahead(c0 - cb + 2 * i0, imin(c0 - cb + 2 * (i0 + np), jb - cb), true);
          pv_lanes(g, i0, np);
        }
      }
      for (int r = r0; r < r1; ++r) l[r] = l[r] * alpha[r] + static_cast<float>(ltile[r]);
    }

    void run() {
      const float ninf = -std::numeric_limits<float>::infinity();
      for (int r = 0; r < a.lanes; ++r) {
        load_q_row<O, K>(a, r, tmp);
        for (int d = 0; d < D; d += W) P::store_b(qn + static_cast<size_t>(r) * D + d, O::load(tmp + d));
        m[r] = ninf;
        l[r] = 0.f;
      }
      if constexpr (P::kTiles) {
        tile_rows = imin(kTileRows, lpg);
        key_rows = lpg < kTileRows;
        std::memset(kr, 0, sizeof(E) * dpad(D) * NKB * W);  // the columns past D stay 0
        std::memset(qn + static_cast<size_t>(a.lanes) * D, 0, sizeof(Bq) * D * kPad);  // rows past the lanes: 0
        std::memset(pn + static_cast<size_t>(a.lanes) * kChunk, 0, sizeof(Bq) * kChunk * kPad);
        P::configure(tile_rows, key_rows);
      }
      std::memset(o, 0, sizeof(float) * D * a.lanes);
      const F floor = O::set1(p_floor<K>(a.inv_p_scale));
      const int32_t tile = a.tile;
      for (int32_t t0 = a.key_begin / tile * tile; t0 < a.key_end; t0 += tile) {
        const int32_t ja = imax(t0, a.key_begin), jb = imin(t0 + tile, a.key_end);
        const int32_t cb = t0 + ((ja - t0) & ~1);
        if (cb < ja) krow[0] = vrow[0] = nullptr;  // the pair-aligned start's key before ja: a zero row
        for_rows(ja, jb, false, [&](int32_t j, const uint8_t* r) { krow[j - cb] = r; });
        for_rows(ja, jb, true, [&](int32_t j, const uint8_t* r) { vrow[j - cb] = r; });
        for (int g = 0; g < a.groups; ++g) group_tile(g, ja, jb, cb, floor);
      }
      for (int r = 0; r < a.lanes; ++r) {  // epilogue, vectors over d
        const RowResult res = lane_result(a, r, m[r], l[r]);
        if (a.lse) a.lse[a.lse_off[r]] = res.lse;
        for (int d = 0; d < D; d += W) store_out<O, K>(a, r, d, O::load(o + static_cast<size_t>(r) * D + d), res.o_scale);
      }
    }
  };

  // Items of more than kMaxLanes lanes run as several, in whole groups (lanes are independent).
  static void run(const ItemArgs& args) {
    const int lpg = args.lanes / args.groups, step = lpg * imax(1, kMaxLanes / lpg);
    for (int r0 = 0; r0 < args.lanes; r0 += step) {
      ItemArgs a = args;
      a.lanes = imin(step, args.lanes - r0);
      a.groups = a.lanes / lpg;
      a.keys.k += (r0 / lpg) * args.k_group_stride;
      a.keys.v += (r0 / lpg) * args.v_group_stride;
      a.lo += r0, a.hi += r0, a.logit_scale += r0, a.inv_q_descale += r0, a.v_descale += r0;
      a.q_off += r0, a.o_off += r0, a.lse_off += r0;
      if (a.sink) a.sink += r0;
      const Layout L(a.head_dim, a.tile, a.lanes);
      if (a.kind == Fp8Kind::E4M3FN) {
        Item<Fp8Kind::E4M3FN>(a, L).run();
      } else {
        Item<Fp8Kind::E4M3FNUZ>(a, L).run();
      }
    }
  }
};

// One instruction set's kernel: items with fewer lanes than a vector run on KeysKernel, the others on RowsKernel.
template <class Rows, class Keys, int kKeysBelow>
struct SimdKernel {
  static size_t scratch_bytes(int32_t D, int32_t tile, int32_t lanes) {
    const size_t r = Rows::scratch_bytes(D, tile, lanes), k = Keys::scratch_bytes(D, tile, lanes);
    return r > k ? r : k;
  }
  static void run(const ItemArgs& a) { a.groups > 1 || a.lanes < kKeysBelow ? Keys::run(a) : Rows::run(a); }
  template <Fp8Kind K>
  static void encode_as(const uint16_t* src, bool bf16, float inv_scale, uint8_t* dst, int32_t n) {
    using O = typename Keys::Ops;
    const auto inv = O::set1(inv_scale);
    int32_t i = 0;
    for (; i + O::W <= n; i += O::W)
      O::store_u8(dst + i, fp8_code<O, K>(O::mul(bf16 ? O::load_bf16(src + i) : O::load_fp16(src + i), inv)));
    for (; i < n; ++i)
      dst[i] = static_cast<uint8_t>(fp8_code<ScalarOps, K>((bf16 ? bf16_decode(src[i]) : fp16_decode(src[i])) * inv_scale));
  }
  static void encode(const uint16_t* src, bool bf16, float inv_scale, Fp8Kind kind, uint8_t* dst, int32_t n) {
    kind == Fp8Kind::E4M3FN ? encode_as<Fp8Kind::E4M3FN>(src, bf16, inv_scale, dst, n)
                            : encode_as<Fp8Kind::E4M3FNUZ>(src, bf16, inv_scale, dst, n);
  }
  static Kernel kernel() { return {&scratch_bytes, &run, &encode}; }
};

}  // namespace
}  // namespace fp8attn::cpu
