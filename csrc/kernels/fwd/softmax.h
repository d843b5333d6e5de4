// The per-row math of the forward pass, written once (docs/design.md §1): the online-softmax update,
// the epilogue's row transform, and the tile-wide steps every GPU pipeline runs on its S
// accumulator. Scores are in log2 units (LogitsTransform); m is the running row max, alpha the
// factor acc and l are rescaled by, p = exp2(s - offset(m)), p8 = PQuantize(p), l = sum of p8.
//
// The NaN rule (docs/design.md §1): the running max propagates NaN (max_nan), so a NaN score the row sees
// makes m, alpha, p and l NaN; masked scores are *replaced* by -inf (softmax_mask), never added;
// "nothing visible yet" is m == -inf only; a NaN alpha counts as a change (needs_rescale).
//
// Scalar API (host and device; the CPU implementation's per-row calls, docs/internal-interfaces.md):
//   softmax_update(m_old, tile_max, exp2) -> {m, offset, alpha}
//   needs_rescale(alpha)
//   add_sink(m, l, sink, inv_p_scale, exp2) -> {m, l, acc_scale}   (attention sinks, before finish_row)
//   finish_row(m, l, o_factor, p_scale)   -> {o_scale, lse};  out_value(acc, o_scale)
//   quad_share(l)
//   RowKeys<kHasMask>::of(mask, row), tile_needs_mask<kHasMask>(...)   (mask.h)
//   PQuantize<K>                                                         (variant.h)
// Tile API, templated on the S layout L of the pipeline's thread (what its atoms describe):
//   L::kSElems S values, L::kRows row slots; element e is row slot L::s_row(e) and key
//   key_base + L::s_key_off(e) of the KV tile, key_base the thread's (run time).
//   softmax_scores<L, kHoist>(s, logits, need_mask, key_base, keys, mx)   logits transform, mask
//                                      (scores of keys outside the row's interval -> -inf), row max
#pragma once
#include <cmath>

#include "../arch/scalar.h"
#include "../mask.h"
#include "../variant.h"

namespace fp8attn {

// ---- scalar -------------------------------------------------------------------------------------

// One row's step at a KV tile: m = the new running max, offset = what p's exponent subtracts (0
// while nothing is visible: p = exp2(-inf) = 0, alpha = exp2(-inf - 0) = 0, and acc, l are 0),
// alpha = exp2(m_old - offset).
struct RowUpdate {
  float m, offset, alpha;
};
template <class Exp2>
FP8ATTN_HD RowUpdate softmax_update(float m_old, float tile_max, Exp2 exp2) {
  const float m = max_nan(m_old, tile_max);
  const float offset = m == -INFINITY ? 0.f : m;
  return {m, offset, exp2(m_old - offset)};
}

// Whether acc and l must be multiplied by alpha (1 changes nothing; NaN is a change).
FP8ATTN_HD bool needs_rescale(float alpha) { return !(alpha == 1.f); }

// A row's attention sink: one more logit `sink` (log2 units) whose term adds to the denominator and
// nothing to acc, applied once to the row's final state, after its last KV tile (the running max never
// starts at it, so P is quantized against the row's own maximum: docs/numerics.md, "Attention sinks").
// m becomes max(m, sink); acc and l are rescaled by acc_scale = exp2(m_old - m), and l (a sum of p8 =
// p / p_scale) gains exp2(sink - m) / p_scale. A row that saw no key (m = -inf) gets acc_scale 0 and
// l = 1 / p_scale: out 0, lse = the sink. A NaN m stays NaN. sink = -inf is no sink: m and l come back
// as they were, acc_scale 1 (an empty row stays empty), so a caller may apply it unconditionally.
struct SinkRow {
  float m, l, acc_scale;
};
template <class Exp2>
FP8ATTN_HD SinkRow add_sink(float m, float l, float sink, float inv_p_scale, Exp2 exp2) {
  const float m_new = max_nan(m, sink);
  const float a = m == m_new ? 1.f : exp2(m - m_new);  // (the guards: -inf - -inf is NaN)
  return {m_new, l * a + (sink == -INFINITY ? 0.f : exp2(sink - m_new)) * inv_p_scale, a};
}

// The row's output factor and lse: O = acc * o_scale with o_scale = o_factor / l (o_factor:
// v_descale and the atom's product scale), lse = m ln2 + ln(l p_scale) (natural log). A row that saw
// no key (m = -inf) gives 0 and lse = -inf; a NaN m is not empty (NaN out, NaN lse).
struct RowResult {
  float o_scale, lse;
};
FP8ATTN_HD RowResult finish_row(float m, float l, float o_factor, float p_scale) {
  const bool empty = m == -INFINITY;
  return {empty ? 0.f : o_factor / l, empty ? -INFINITY : m * kLn2 + logf(l * p_scale)};
}
// An output element from its accumulator: a row that saw no key (o_scale 0) writes 0 even where a
// tile it shared with other rows multiplied a NaN v by its P = 0 (0 * NaN = NaN on tensor cores).
FP8ATTN_HD float out_value(float acc, float o_scale) { return o_scale == 0.f ? 0.f : acc * o_scale; }

// The share of a row sum held by each of the 4 lanes of a quad that all hold the whole sum (l from
// the tensor cores' P8 . 1): the epilogue's Tile::row_sum adds the four copies (exact: a power of two).
FP8ATTN_HD float quad_share(float row_sum) { return 0.25f * row_sum; }

// ---- tile-wide, on the thread's S elements --------------------------------------------------------

// The tile's scores: the logits transform, on tiles that need it the mask (scores of keys outside
// the row's interval -> -inf), and the thread's maximum per row slot (NaN-propagating). keys[ri]: row
// slot ri's RowKeys (an array, or a view of them in shared memory). kHoist: the logits transform in
// a pass of its own, its softcap branch taken once (the per-element branch costs more than the
// registers a second pass holds); else fused with the mask and the max in one pass.
template <class L, bool kHoist, class Keys>
FP8ATTN_HD void softmax_scores(float (&s)[L::kSElems], const LogitsTransform (&logits)[L::kRows], bool need_mask,
                               int32_t key_base, const Keys& keys, float (&mx)[L::kRows]) {
  if (kHoist) {
    if (logits[0].has_softcap) {  // (a property of the call: the same for every row)
#pragma unroll
      for (int e = 0; e < L::kSElems; ++e) s[e] = logits[L::s_row(e)](s[e]);
    } else {
#pragma unroll
      for (int e = 0; e < L::kSElems; ++e) s[e] *= logits[L::s_row(e)].scale_log2;
    }
  }
#pragma unroll
  for (int ri = 0; ri < L::kRows; ++ri) mx[ri] = -INFINITY;
#pragma unroll
  for (int e = 0; e < L::kSElems; ++e) {
    const int ri = L::s_row(e);
    float x = kHoist ? s[e] : logits[ri](s[e]);
    if (need_mask) x = keys[ri].contains(key_base + L::s_key_off(e)) ? x : -INFINITY;
    s[e] = x;
    mx[ri] = max_nan(mx[ri], x);
  }
}

}  // namespace fp8attn
