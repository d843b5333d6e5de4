// Per-sequence addressing for the three layouts (dense, packed varlen, paged KV), shared by every
// implementation. Offsets are int64 element offsets from the tensor base pointers.
#pragma once
#include <cstdint>

#include "common.h"
#include "params.h"

namespace fp8attn {

// The length entries of sequence b (0 where the call has none), read together: a kernel that issues this
// first and uses it later waits for one memory round trip, overlapped with what it does in between.
struct SeqLens {
  int32_t q0, q1, k0, k1, used;  // cu_seqlens_q[b], [b + 1], cu_seqlens_k[b], [b + 1], seqused_k[b]
  FP8ATTN_HD static SeqLens load(const FwdParams& p, int32_t b) {
    return {p.cu_seqlens_q ? p.cu_seqlens_q[b] : 0, p.cu_seqlens_q ? p.cu_seqlens_q[b + 1] : 0,
            p.cu_seqlens_k ? p.cu_seqlens_k[b] : 0, p.cu_seqlens_k ? p.cu_seqlens_k[b + 1] : 0,
            p.seqused_k ? p.seqused_k[b] : 0};
  }
};

struct SeqInfo {
  int32_t q_len = 0;
  int32_t k_len = 0;
  int64_t q_offset = 0;    // element offset of this sequence's row 0 in q
  int64_t o_offset = 0;    // ... and in out
  int64_t lse_offset = 0;  // element offset of (head 0, row 0) in lse
  int64_t k_offset = 0;    // dense / varlen: element offset of key 0 (unused when paged)
  int64_t v_offset = 0;
  const int32_t* blocks = nullptr;  // paged: this sequence's row of the block table

  FP8ATTN_HD static SeqInfo make(const FwdParams& p, int32_t b) { return of(p, b, SeqLens::load(p, b)); }
  // From the sequence's lengths, read before (SeqLens::load).
  FP8ATTN_HD static SeqInfo of(const FwdParams& p, int32_t b, const SeqLens& l) {
    SeqInfo s;
    if (p.cu_seqlens_q) {
      s.q_len = l.q1 - l.q0;
      s.q_offset = static_cast<int64_t>(l.q0) * p.q_row_stride;
      s.o_offset = static_cast<int64_t>(l.q0) * p.o_row_stride;
      s.lse_offset = l.q0 * p.lse_row_stride;
    } else {
      s.q_len = p.seqlen_q;
      s.q_offset = static_cast<int64_t>(b) * p.q_batch_stride;
      s.o_offset = static_cast<int64_t>(b) * p.o_batch_stride;
      s.lse_offset = static_cast<int64_t>(b) * p.lse_batch_stride;
    }
    if (p.block_table) {
      s.blocks = p.block_table + static_cast<int64_t>(b) * p.block_table_batch_stride;
      s.k_len = p.seqused_k ? l.used : l.k1 - l.k0;
    } else if (p.cu_seqlens_k) {
      s.k_len = p.seqused_k ? l.used : l.k1 - l.k0;
      s.k_offset = static_cast<int64_t>(l.k0) * p.k_row_stride;
      s.v_offset = static_cast<int64_t>(l.k0) * p.v_row_stride;
    } else {
      s.k_len = p.seqused_k ? l.used : p.seqlen_k;
      s.k_offset = static_cast<int64_t>(b) * p.k_batch_stride;
      s.v_offset = static_cast<int64_t>(b) * p.v_batch_stride;
    }
    return s;
  }

  // Element offset of key `j` (head 0) in k or v.
  FP8ATTN_HD int64_t key_offset(const FwdParams& p, int32_t j, bool is_v) const {
    if (blocks) return page_offset(p, blocks[j / p.page_block_size], j % p.page_block_size, is_v);
    return (is_v ? v_offset : k_offset) + static_cast<int64_t>(j) * (is_v ? p.v_row_stride : p.k_row_stride);
  }
  // Paged: a block-table entry as used. Entries are validated on the host unless the caller chose
  // the no-sync path; there an entry out of range is clamped so that a bad table can never address
  // outside the cache.
  FP8ATTN_HD static int32_t valid_block(const FwdParams& p, int32_t blk) {
    return static_cast<uint32_t>(blk) < static_cast<uint32_t>(p.num_cache_blocks) ? blk : 0;
  }
  // Paged: element offset of row `row` of cache block `blk` (head 0) in k or v.
  FP8ATTN_HD static int64_t page_offset(const FwdParams& p, int32_t blk, int32_t row, bool is_v) {
    blk = valid_block(p, blk);
    return static_cast<int64_t>(blk) * (is_v ? p.v_batch_stride : p.k_batch_stride) +
           static_cast<int64_t>(row) * (is_v ? p.v_row_stride : p.k_row_stride);
  }
};

}  // namespace fp8attn
