// The scalar kernel: the oracle the SIMD kernels are checked against bit for bit, and the path of
// CPUs without AVX2. Per lane, docs/design.md §1's online softmax over KV tiles aligned at multiples of
// the tile from key 0, on the project's FP8 / 16-bit numerics (fp8.h, half.h, PQuantize). Every
// kernel follows the order of each rounded operation fixed here:
//  - q·k: one fp32 sum over d, in pairs (2i, 2i+1) with the odd element first,
//    s = (s + q[2i+1]·k[2i+1]) + q[2i]·k[2i] (a vdpbf16ps chain; a product of two FP8 values is exact);
//  - P·V: per output column, one fp32 sum over the tile's keys in pairs (t0+2i, t0+2i+1), odd first;
//  - l: each tile's sum of p8 is exact (in double), then l = l·alpha + that sum in fp32;
//  - acc·alpha is flushed to +0 below 2^-126 (a vdpbf16ps reads a denormal accumulator as zero; after
//    the flush no accumulator is ever denormal, so every path adds the same numbers);
//  - exp2 and tanh are cpu_math.h's, the running max propagates NaN (docs/design.md §1's NaN rule), and no
//    zero p8 skips a V row.
#include <algorithm>
#include <cmath>
#include <limits>

#include "cpu/cpu_math.h"
#include "cpu/item.h"
#include "kernels/numeric/half.h"
#include "kernels/variant.h"

namespace fp8attn::cpu {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

template <Fp8Kind K>
struct DecodeTable {
  float v[256];
  DecodeTable() {
    for (int c = 0; c < 256; ++c) v[c] = fp8_decode<K>(static_cast<uint8_t>(c));
  }
};

float flush(float x) { return std::fabs(x) < 0x1p-126f ? 0.f : x; }

template <Fp8Kind K>
void load_q(const ItemArgs& a, int r, const DecodeTable<K>& dec, float* q) {
  const int D = a.head_dim;
  const int64_t off = a.q_off[r];
  for (int d = 0; d < D; ++d) {
    switch (a.q_type) {
      case ElemType::FP8: q[d] = dec.v[static_cast<const uint8_t*>(a.q)[off + d]]; break;
      case ElemType::BF16:
        q[d] = fp8_decode<K>(fp8_encode<K>(bf16_decode(static_cast<const uint16_t*>(a.q)[off + d]) * a.inv_q_descale[r]));
        break;
      default:
        q[d] = fp8_decode<K>(fp8_encode<K>(fp16_decode(static_cast<const uint16_t*>(a.q)[off + d]) * a.inv_q_descale[r]));
    }
  }
}

// A zero factor (a lane that saw no key, or whose keys' weight a sink outweighs beyond float32) writes 0,
// as the SIMD kernels and the GPU's out_value do.
template <Fp8Kind K>
void store_row(const ItemArgs& a, int r, const float* acc, float factor) {
  const int64_t off = a.o_off[r];
  for (int d = 0; d < a.head_dim; ++d) {
    const float o = out_value(acc[d], factor);
    switch (a.out_type) {
      case ElemType::BF16: static_cast<uint16_t*>(a.out)[off + d] = bf16_encode(o); break;
      case ElemType::FP16: static_cast<uint16_t*>(a.out)[off + d] = fp16_encode(o); break;
      default: static_cast<uint8_t*>(a.out)[off + d] = fp8_encode<K>(o * a.inv_out_scale);
    }
  }
}

template <Fp8Kind K>
void run_lanes(const ItemArgs& a) {
  static const DecodeTable<K> dec;
  const int D = a.head_dim;
  const PQuantize<K> pquant{a.inv_p_scale};
  float* s = static_cast<float*>(a.scratch);  // the tile's logits
  float* q = s + a.tile;
  float* acc = q + D;
  const int per_group = a.lanes / a.groups;
  for (int r = 0; r < a.lanes; ++r) {
    KeySource keys = a.keys;
    keys.k += (r / per_group) * a.k_group_stride;
    keys.v += (r / per_group) * a.v_group_stride;
    load_q<K>(a, r, dec, q);
    std::fill(acc, acc + D, 0.f);
    float m = kNegInf, l = 0.f;
    const int32_t lo = a.lo[r], hi = a.hi[r];
    for (int32_t t0 = lo / a.tile * a.tile; t0 < hi; t0 += a.tile) {
      const int32_t j0 = std::max(t0, lo), j1 = std::min(t0 + a.tile, hi);
      float tmax = kNegInf;
      for (int32_t j = j0; j < j1; ++j) {
        const uint8_t* k = key_row(keys, j, false);
        float dot = 0.f;
        for (int d = 0; d < D; d += 2) {
          dot += q[d + 1] * dec.v[k[d + 1]];
          dot += q[d] * dec.v[k[d]];
        }
        const float x = a.softcap_log2 > 0.f ? a.softcap_log2 * tanh<ScalarOps>(dot * a.logit_scale[r])
                                             : dot * a.logit_scale[r];
        s[j - t0] = x;
        tmax = (x > tmax || x != x) ? x : tmax;
      }
      const float m_new = (tmax > m || tmax != tmax) ? tmax : m;
      if (m_new == kNegInf) continue;  // nothing visible yet
      const float alpha = exp2<ScalarOps>(m - m_new);
      m = m_new;
      for (int d = 0; d < D; ++d) acc[d] = flush(acc[d] * alpha);
      double tile_l = 0.0;
      for (int32_t jp = t0 + ((j0 - t0) & ~1); jp < j1; jp += 2) {
        for (const int32_t j : {jp + 1, jp}) {
          if (j < j0 || j >= j1) continue;
          const float p8 = pquant(exp2<ScalarOps>(s[j - t0] - m_new));
          tile_l += p8;
          const uint8_t* v = key_row(keys, j, true);
          for (int d = 0; d < D; ++d) acc[d] += p8 * dec.v[v[d]];
        }
      }
      l = l * alpha + static_cast<float>(tile_l);
    }
    const RowResult res = lane_result(a, r, m, l);
    store_row<K>(a, r, acc, res.o_scale);
    if (a.lse) a.lse[a.lse_off[r]] = res.lse;
  }
}

template <Fp8Kind K>
void encode_as(const uint16_t* src, bool bf16, float inv_scale, uint8_t* dst, int32_t n) {
  for (int32_t i = 0; i < n; ++i) dst[i] = fp8_encode<K>((bf16 ? bf16_decode(src[i]) : fp16_decode(src[i])) * inv_scale);
}

void encode(const uint16_t* src, bool bf16, float inv_scale, Fp8Kind kind, uint8_t* dst, int32_t n) {
  kind == Fp8Kind::E4M3FN ? encode_as<Fp8Kind::E4M3FN>(src, bf16, inv_scale, dst, n)
                          : encode_as<Fp8Kind::E4M3FNUZ>(src, bf16, inv_scale, dst, n);
}

size_t scratch_bytes(int32_t D, int32_t tile, int32_t) { return (static_cast<size_t>(tile) + 2 * D) * sizeof(float); }

void run(const ItemArgs& a) {
  if (a.kind == Fp8Kind::E4M3FN) {
    run_lanes<Fp8Kind::E4M3FN>(a);
  } else {
    run_lanes<Fp8Kind::E4M3FNUZ>(a);
  }
}

}  // namespace

Kernel scalar_kernel() { return {&scratch_bytes, &run, &encode}; }

}  // namespace fp8attn::cpu
