#include "cpu/attention_cpu.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <vector>

#include "kernels/mask.h"
#include "kernels/numeric/half.h"
#include "kernels/seqinfo.h"
#include "kernels/variant.h"

namespace fp8attn::cpu {
namespace {

constexpr int kRowBlock = 16;  // query rows that share one pass over K/V
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

template <Fp8Kind K>
struct DecodeTable {
  std::array<float, 256> v;
  DecodeTable() {
    for (int c = 0; c < 256; ++c) v[c] = fp8_decode<K>(static_cast<uint8_t>(c));
  }
};

float scale_at(const float* s, int32_t stride, int32_t head) { return s ? s[head * stride] : 1.f; }

// The running max propagates NaN (the NaN rule: a NaN visible score makes the row NaN); std::max drops it.
float nan_max(float m, float s) { return (s > m || s != s) ? s : m; }

// Dot product with 8 independent partial sums (vectorizes without reassociation flags).
float dot(const float* a, const float* b, int n) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  for (int i = 0; i < n; i += 8)
    for (int u = 0; u < 8; ++u) acc[u] += a[i + u] * b[i + u];
  return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

struct WorkItem {
  int32_t b, h, row0;
};

template <Fp8Kind K>
class Forward {
 public:
  explicit Forward(const FwdParams& p) : p_(p), tile_(p.kv_tile > 0 ? p.kv_tile : kDefaultKvTile) {}

  void run() {
    std::vector<WorkItem> work;
    for (int32_t b = 0; b < p_.batch; ++b) {
      const SeqInfo s = SeqInfo::make(p_, b);
      for (int32_t h = 0; h < p_.num_heads; ++h)
        for (int32_t r = 0; r < s.q_len; r += kRowBlock) work.push_back({b, h, r});
    }
    // A tile never holds more keys than the longest sequence (p_.seqlen_k is exact on the host).
    const int32_t tile_keys = std::max(1, std::min(tile_, p_.seqlen_k));
    at::parallel_for(0, static_cast<int64_t>(work.size()), 1, [&](int64_t begin, int64_t end) {
      Scratch sc(p_.head_dim, tile_keys);
      for (int64_t i = begin; i < end; ++i) run_block(work[i], sc);
    });
  }

 private:
  struct Scratch {
    std::vector<float> q, k, v, acc, s;
    Scratch(int d, int tile)
        : q(static_cast<size_t>(kRowBlock) * d), k(static_cast<size_t>(tile) * d), v(static_cast<size_t>(tile) * d),
          acc(static_cast<size_t>(kRowBlock) * d), s(tile) {}
  };

  float load_q(const void* base, int64_t off) const {
    switch (p_.q_type) {
      case ElemType::BF16: return bf16_decode(static_cast<const uint16_t*>(base)[off]);
      case ElemType::FP16: return fp16_decode(static_cast<const uint16_t*>(base)[off]);
      default: return dec_.v[static_cast<const uint8_t*>(base)[off]];
    }
  }

  void store_out(int64_t off, float o, float inv_out_scale) const {
    switch (p_.out_type) {
      case ElemType::BF16: static_cast<uint16_t*>(p_.out)[off] = bf16_encode(o); break;
      case ElemType::FP16: static_cast<uint16_t*>(p_.out)[off] = fp16_encode(o); break;
      default: static_cast<uint8_t*>(p_.out)[off] = fp8_encode<K>(o * inv_out_scale);
    }
  }

  void run_block(const WorkItem& w, Scratch& sc) const {
    const int D = p_.head_dim;
    const SeqInfo s = SeqInfo::make(p_, w.b);
    const int32_t hk = w.h / (p_.num_heads / p_.num_heads_k);
    const int32_t row1 = std::min(w.row0 + kRowBlock, s.q_len);
    const int nr = row1 - w.row0;

    // q8: FP8 q as is; 16-bit q quantized with its descale (multiply by the reciprocal, as the GPU does).
    const float q_descale = scale_at(p_.q_descale, p_.q_descale_head_stride, w.h);
    const float inv_q_descale = 1.f / q_descale;
    for (int r = 0; r < nr; ++r) {
      const int64_t off = s.q_offset + static_cast<int64_t>(w.row0 + r) * p_.q_row_stride +
                          static_cast<int64_t>(w.h) * p_.q_head_stride;
      for (int d = 0; d < D; ++d) {
        const float x = load_q(p_.q, off + d);
        sc.q[r * D + d] = p_.q_type == ElemType::FP8 ? x : fp8_decode<K>(fp8_encode<K>(x * inv_q_descale));
      }
    }
    const LogitsTransform logits = LogitsTransform::make(
        p_.softmax_scale, q_descale * scale_at(p_.k_descale, p_.k_descale_head_stride, hk), p_.softcap);
    const float p_scale = p_.p_scale_ptr ? *p_.p_scale_ptr : p_.p_scale_default;
    const PQuantize<K> pquant{1.f / p_scale};
    const Mask mask = Mask::make(p_.window_left, p_.window_right, p_.is_causal, s.q_len, s.k_len);

    float m[kRowBlock], l[kRowBlock];
    std::fill(m, m + nr, kNegInf);
    std::fill(l, l + nr, 0.f);
    std::fill(sc.acc.begin(), sc.acc.begin() + static_cast<size_t>(nr) * D, 0.f);

    int32_t kb, ke;
    mask.key_range(w.row0, row1, &kb, &ke);
    for (int32_t t0 = kb / tile_ * tile_; t0 < ke; t0 += tile_) {
      const int32_t j0 = std::max(t0, kb), j1 = std::min(t0 + tile_, ke);
      load_kv(s, hk, t0, j0, j1, sc);
      const bool full = mask.tile_fully_visible(w.row0, row1, j0, j1);
      for (int r = 0; r < nr; ++r) {
        const int32_t row = w.row0 + r;
        float tmax = kNegInf;
        for (int32_t j = j0; j < j1; ++j) {
          const float x = (full || mask.visible(row, j)) ? logits(dot(&sc.q[r * D], &sc.k[(j - t0) * D], D)) : kNegInf;
          sc.s[j - t0] = x;
          tmax = nan_max(tmax, x);
        }
        const float m_new = nan_max(m[r], tmax);
        if (m_new == kNegInf) continue;  // nothing visible yet
        const float alpha = std::exp2(m[r] - m_new);
        m[r] = m_new;
        float* acc = &sc.acc[r * D];
        for (int d = 0; d < D; ++d) acc[d] *= alpha;
        float lsum = 0.f;
        for (int32_t j = j0; j < j1; ++j) {
          const float p8 = pquant(std::exp2(sc.s[j - t0] - m_new));  // no p8 == 0 skip: 0 * NaN v is NaN
          lsum += p8;
          const float* vr = &sc.v[(j - t0) * D];
          for (int d = 0; d < D; ++d) acc[d] += p8 * vr[d];
        }
        l[r] = l[r] * alpha + lsum;
      }
    }
    epilogue(w, s, hk, nr, m, l, p_scale, sc);
  }

  void load_kv(const SeqInfo& s, int32_t hk, int32_t t0, int32_t j0, int32_t j1, Scratch& sc) const {
    const int D = p_.head_dim;
    const uint8_t* kp = static_cast<const uint8_t*>(p_.k);
    const uint8_t* vp = static_cast<const uint8_t*>(p_.v);
    for (int32_t j = j0; j < j1; ++j) {
      const uint8_t* kr = kp + s.key_offset(p_, j, false) + static_cast<int64_t>(hk) * p_.k_head_stride;
      const uint8_t* vr = vp + s.key_offset(p_, j, true) + static_cast<int64_t>(hk) * p_.v_head_stride;
      float* kd = &sc.k[(j - t0) * D];
      float* vd = &sc.v[(j - t0) * D];
      for (int d = 0; d < D; ++d) {
        kd[d] = dec_.v[kr[d]];
        vd[d] = dec_.v[vr[d]];
      }
    }
  }

  void epilogue(const WorkItem& w, const SeqInfo& s, int32_t hk, int nr, const float* m, const float* l,
                float p_scale, const Scratch& sc) const {
    const int D = p_.head_dim;
    const float v_descale = scale_at(p_.v_descale, p_.v_descale_head_stride, hk);
    const float inv_out_scale = p_.out_scale ? 1.f / *p_.out_scale : 1.f;
    for (int r = 0; r < nr; ++r) {
      const int32_t row = w.row0 + r;
      const bool empty = m[r] == kNegInf;
      const float o_scale = empty ? 0.f : v_descale / l[r];
      const int64_t off = s.o_offset + static_cast<int64_t>(row) * p_.o_row_stride +
                          static_cast<int64_t>(w.h) * p_.o_head_stride;
      for (int d = 0; d < D; ++d) store_out(off + d, sc.acc[r * D + d] * o_scale, inv_out_scale);
      if (p_.lse) {
        p_.lse[s.lse_offset + static_cast<int64_t>(w.h) * p_.lse_head_stride + static_cast<int64_t>(row) * p_.lse_row_stride] =
            empty ? kNegInf : m[r] * kLn2 + std::log(l[r] * p_scale);
      }
    }
  }

  const FwdParams& p_;
  const int32_t tile_;
  const DecodeTable<K> dec_;
};

}  // namespace

void run_forward(const FwdParams& p) {
  if (p.fp8_kind == Fp8Kind::E4M3FN) {
    Forward<Fp8Kind::E4M3FN>(p).run();
  } else {
    Forward<Fp8Kind::E4M3FNUZ>(p).run();
  }
}

}  // namespace fp8attn::cpu
