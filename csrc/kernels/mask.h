// Causal / sliding-window mask as a value type (bottom-right aligned, FA2/vLLM convention).
// Query row i of a sequence with q_len queries and k_len keys sees keys j with
//   i + shift - left <= j <= i + shift + right,   shift = k_len - q_len,
// where left/right < 0 mean unbounded and causal means right = 0.
//
//        keys ->            (q_len = 3, k_len = 6, causal, left = 2)
//   q0   . x x x . .         q0 sees j in [1, 3]
//   q1   . . x x x .         q1 sees j in [2, 4]
//   q2   . . . x x x         q2 sees j in [3, 5]
//
// The pipelines ask it for the key range a block of rows can touch (tiles outside are skipped),
// whether a tile needs per-element masking (tile_needs_mask) and, for each of their rows, the
// interval of keys it sees (RowKeys: Mask::visible as an interval, computed once per row).
#pragma once
#include <cstdint>

#include "common.h"

namespace fp8attn {

struct Mask {
  int32_t left;   // < 0: unbounded
  int32_t right;  // < 0: unbounded
  int32_t shift;  // k_len - q_len
  int32_t k_len;

  FP8ATTN_HD static Mask make(int32_t window_left, int32_t window_right, bool causal, int32_t q_len,
                              int32_t k_len) {
    Mask m;
    m.left = window_left;
    m.right = causal ? 0 : window_right;
    m.shift = k_len - q_len;
    m.k_len = k_len;
    return m;
  }

  FP8ATTN_HD bool visible(int32_t row, int32_t col) const {
    const int64_t d = static_cast<int64_t>(col) - row - shift;
    return col >= 0 && col < k_len && (right < 0 || d <= right) && (left < 0 || -d <= left);
  }

  // Half-open key range [begin, end) that any of rows [row0, row1) can see (may be empty).
  FP8ATTN_HD void key_range(int32_t row0, int32_t row1, int32_t* begin, int32_t* end) const {
    int64_t b = 0, e = k_len;
    if (left >= 0) {
      const int64_t lo = static_cast<int64_t>(row0) + shift - left;
      b = lo > 0 ? lo : 0;
    }
    if (right >= 0) {
      const int64_t hi = static_cast<int64_t>(row1 - 1) + shift + right + 1;
      e = hi < e ? hi : e;
    }
    if (e < b) e = b;
    *begin = static_cast<int32_t>(b < k_len ? b : k_len);
    *end = static_cast<int32_t>(e);
  }

  // True when every (row, col) in [row0, row1) x [col0, col1) is visible.
  FP8ATTN_HD bool tile_fully_visible(int32_t row0, int32_t row1, int32_t col0, int32_t col1) const {
    if (col0 < 0 || col1 > k_len) return false;
    // Within the band: the hardest corners are (row1-1, col0) for left and (row0, col1-1) for right.
    const bool left_ok = left < 0 || (static_cast<int64_t>(row1 - 1) + shift - col0) <= left;
    const bool right_ok = right < 0 || (static_cast<int64_t>(col1 - 1) - row0 - shift) <= right;
    return left_ok && right_ok;
  }
};

// The keys [lo, hi) that row `row` sees: exactly Mask::visible's (0 <= lo <= hi <= k_len); without a
// mask (kHasMask false) every key of the sequence, and only hi is compared.
template <bool kHasMask>
struct RowKeys {
  int32_t lo, hi;

  FP8ATTN_HD static RowKeys of(const Mask& m, int32_t row) {
    int64_t l = 0, h = m.k_len;
    if (kHasMask) {
      const int64_t base = static_cast<int64_t>(row) + m.shift;
      if (m.left >= 0) l = base - m.left > 0 ? base - m.left : 0;
      if (m.right >= 0) h = base + m.right + 1 < h ? base + m.right + 1 : h;
    }
    RowKeys k;
    k.lo = static_cast<int32_t>(l < m.k_len ? l : m.k_len);
    k.hi = static_cast<int32_t>(h > k.lo ? h : k.lo);
    return k;
  }
  FP8ATTN_HD bool contains(int32_t key) const { return (!kHasMask || key >= lo) && key < hi; }
};

// Whether KV tile [k0, k1) needs per-element masking for rows [row0, row1): some of its elements
// are invisible (with a mask) or past the sequence's keys (k_len).
template <bool kHasMask>
FP8ATTN_HD bool tile_needs_mask(const Mask& m, int32_t row0, int32_t row1, int32_t k0, int32_t k1) {
  return kHasMask ? !m.tile_fully_visible(row0, row1, k0, k1) : k1 > m.k_len;
}

}  // namespace fp8attn
