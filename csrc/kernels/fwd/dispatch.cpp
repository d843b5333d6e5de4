// The selection over the generated kernel table (dispatch.h), the supported-argument check and
// the split heuristic. Host-only, no CUDA.
#include "dispatch.h"

#include <algorithm>
#include <cstring>

#include "decode_config.h"

namespace fp8attn {

namespace {
bool aligned16(const void* ptr, int64_t s0, int64_t s1, int64_t s2, int64_t elem_bytes) {
  return reinterpret_cast<uintptr_t>(ptr) % 16 == 0 && (s0 * elem_bytes) % 16 == 0 && (s1 * elem_bytes) % 16 == 0 &&
         (s2 * elem_bytes) % 16 == 0;
}

bool runs(const FwdTarget& target, int32_t pipe) {
  return std::find(target.pipes, target.pipes + target.num_pipes, pipe) != target.pipes + target.num_pipes;
}
}  // namespace

const FwdTarget& fwd_target(const FwdTable& t, int cc_major, int cc_minor) {
  const FwdTarget* any = &t.targets[t.num_targets - 1];
  for (int i = 0; i < t.num_targets; ++i) {
    if (t.targets[i].cc_major == cc_major && t.targets[i].cc_minor == cc_minor) return t.targets[i];
    if (t.targets[i].cc_major < 0) any = &t.targets[i];
  }
  return *any;
}

int32_t fwd_pipe_index(const FwdTable& t, const char* name) {
  if (name == nullptr || *name == '\0') return -1;
  for (int i = 0; i < t.num_pipes; ++i)
    if (std::strcmp(t.pipes[i], name) == 0) return i;
  return -2;
}

const FwdKernel* choose_fwd_kernel(const FwdTable& t, const FwdParams& p, const FwdTarget& target,
                                   int32_t preferred_pipe) {
  const MaskKind mask = mask_kind_of(p);
  const int64_t rows = packed_rows(p);
  const bool boxes = p.block_table != nullptr && p.page_block_size > 0 && p.page_block_size % 16 == 0;
  // The pipeline's kernel for the call: of its kernels that serve it, the narrowest rows variant.
  const auto of_pipe = [&](int32_t pipe) -> const FwdKernel* {
    const FwdKernel* best = nullptr;
    for (int i = 0; i < t.num_kernels; ++i) {
      const FwdKernel& k = t.kernels[i];
      if (k.pipe != pipe || k.head_dim != p.head_dim || k.fp8_kind != p.fp8_kind || k.mask != mask) continue;
      if (p.kv_tile == 0 ? !k.default_tile : k.kv_tile != p.kv_tile) continue;
      if (k.max_rows != 0 && rows > k.max_rows) continue;
      if (k.page_boxes && !boxes) continue;
      const auto width = [](const FwdKernel& x) { return x.max_rows == 0 ? INT64_MAX : int64_t{x.max_rows}; };
      if (best == nullptr || width(k) < width(*best)) best = &k;
    }
    return best;
  };
  if (preferred_pipe >= 0 && runs(target, preferred_pipe))  // a preference: calls it does not serve take the order
    if (const FwdKernel* k = of_pipe(preferred_pipe)) return k;
  for (int i = 0; i < target.num_pipes; ++i)
    if (const FwdKernel* k = of_pipe(target.pipes[i])) return k;
  return nullptr;
}

const char* fwd_unsupported_reason(const FwdTable& t, const FwdParams& p, const FwdKernel* k) {
  if (p.kv_tile != 0 && std::find(t.kv_tiles, t.kv_tiles + t.num_kv_tiles, p.kv_tile) == t.kv_tiles + t.num_kv_tiles)
    return t.kv_tile_rule;
  if (p.head_dim % 16 != 0) return "head_dim must be a multiple of 16 on the GPU";
  if (!aligned16(p.k, p.k_batch_stride, p.k_row_stride, p.k_head_stride, 1))
    return "k must be 16-byte aligned with strides that are multiples of 16 bytes";
  if (!aligned16(p.v, p.v_batch_stride, p.v_row_stride, p.v_head_stride, 1))
    return "v must be 16-byte aligned with strides that are multiples of 16 bytes";
  const int64_t qb = p.q_type == ElemType::FP8 ? 1 : 2;
  if (!aligned16(p.q, p.q_batch_stride, p.q_row_stride, p.q_head_stride, qb))
    return "q must be 16-byte aligned with strides that are multiples of 16 bytes";
  if (p.batch > 65535) return "batch must be at most 65535 on the GPU";
  if (k != nullptr) {
    const int64_t m_blocks = (packed_rows(p) + k->block_rows - 1) / k->block_rows;
    if (m_blocks * p.batch * p.num_heads_k >= (int64_t{1} << 31)) return "too many query rows for one launch";
  }
  return nullptr;
}

int32_t choose_num_splits(const FwdParams& p, const FwdKernel& k, int32_t num_sm) {
  const int64_t m_blocks = (packed_rows(p) + k.block_rows - 1) / k.block_rows;
  const int64_t blocks = m_blocks * p.batch * p.num_heads_k;
  const int64_t tiles = (static_cast<int64_t>(p.seqlen_k) + k.kv_tile - 1) / k.kv_tile;
  // A split streams at least as many keys as a decode split (kDecodeMinTilesPerSplit 64-key tiles).
  const int64_t min_tiles = std::max<int64_t>(1, kDecodeMinTilesPerSplit * kDefaultKvTile / k.kv_tile);
  if (blocks <= 0 || num_sm <= 0 || tiles < 2 * min_tiles) return 1;
  // The decode kernels (one block per (batch, kv head)) split to fill the waves of their resident
  // blocks (decode_config.h).
  if (k.max_rows > 0)
    return decode_num_splits(blocks, tiles, num_sm, k.blocks_per_sm, min_tiles);
  // Other kernels only when their blocks do not fill every multiprocessor: at most one wave of about
  // three blocks per multiprocessor; then the fewest splits with the same tiles per split (none
  // left empty).
  if (blocks >= num_sm) return 1;
  const int64_t want =
      std::max<int64_t>(1, std::min<int64_t>({(3 * num_sm) / blocks, tiles / min_tiles, int64_t{kDecodeMaxSplits}}));
  const int64_t per = (tiles + want - 1) / want;
  return static_cast<int32_t>((tiles + per - 1) / per);
}

}  // namespace fp8attn
