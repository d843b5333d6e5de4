// Host-side helpers of the GPU forward kernels (compiled once; no kernels here).
#include "api.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "decode_config.h"
#include "policy.h"

namespace fp8attn {

namespace {
bool aligned16(const void* ptr, int64_t s0, int64_t s1, int64_t s2, int64_t elem_bytes) {
  return reinterpret_cast<uintptr_t>(ptr) % 16 == 0 && (s0 * elem_bytes) % 16 == 0 && (s1 * elem_bytes) % 16 == 0 &&
         (s2 * elem_bytes) % 16 == 0;
}
}  // namespace

const FwdInstance* find_fwd_instance(NvPipe pipe, int32_t head_dim, Fp8Kind kind, MaskKind mask, int32_t kv_tile) {
  int n = 0;
  const FwdInstance* all = fwd_instances(&n);
  for (int i = 0; i < n; ++i)
    if (all[i].launch && all[i].pipe == pipe && all[i].head_dim == head_dim && all[i].fp8_kind == kind &&
        all[i].mask == mask && all[i].kv_tile == kv_tile)
      return &all[i];
  return nullptr;
}

const char* pipe_name(NvPipe pipe) {
  switch (pipe) {
    case NvPipe::kE4M3: return "e4m3";
    case NvPipe::kF16: return "f16";
    default: return "wgmma";
  }
}

const FwdInstance* choose_fwd_instance(const FwdParams& p, int cc_major, int cc_minor) {
  const MaskKind mask = mask_kind_of(p);
  const bool hopper = cc_major == 9 && cc_minor == 0;
  const int64_t rows = static_cast<int64_t>(p.seqlen_q) * (p.num_heads / p.num_heads_k);
  const auto find_tile = [&](NvPipe pipe, int32_t tile) {
    return find_fwd_instance(pipe, p.head_dim, p.fp8_kind, mask, tile);
  };
  // The pipeline's instance at the requested tile, or (kv_tile 0) at its preferred one: the wgmma
  // pipeline's 128-key tiles, except unmasked D 128, where its 64-key instance (three consumer
  // warpgroups, policy_wgmma.h) is faster; with a mask the 192-row blocks of that instance lose
  // more on their diagonal tiles than they gain (docs/h200-logs/80-*).
  const auto find = [&](NvPipe pipe) -> const FwdInstance* {
    if (pipe == NvPipe::kWgmma && !hopper) return nullptr;
    if (p.kv_tile != 0) return find_tile(pipe, p.kv_tile);
    const bool wide_first = pipe == NvPipe::kWgmma && !(p.head_dim == 128 && mask == MaskKind::kNone);
    const FwdInstance* wide = wide_first ? find_tile(pipe, kWgmmaKvTile) : nullptr;
    return wide ? wide : find_tile(pipe, kGpuKvTile);
  };
  const char* e = std::getenv("FP8ATTN_NV_PIPELINE");
  if (e && *e) {  // a preference: calls the forced pipeline does not cover take the default below
    for (NvPipe pipe : {NvPipe::kE4M3, NvPipe::kF16, NvPipe::kWgmma})
      if (std::strcmp(e, pipe_name(pipe)) == 0)
        if (const FwdInstance* inst = find(pipe)) return inst;
  }
  if (rows > 16 || p.kv_tile > kGpuKvTile)
    if (const FwdInstance* inst = find(NvPipe::kWgmma)) return inst;
  if (p.kv_tile > kGpuKvTile) return nullptr;  // only the wgmma pipeline has wider tiles
  const bool native_e4m3 = cc_major == 8 && cc_minor >= 9;
  const FwdInstance* first = find(native_e4m3 ? NvPipe::kE4M3 : NvPipe::kF16);
  return first ? first : find(native_e4m3 ? NvPipe::kF16 : NvPipe::kE4M3);
}

const char* fwd_unsupported_reason(const FwdParams& p) {
  if (p.kv_tile != 0 && p.kv_tile != kGpuKvTile && p.kv_tile != kWgmmaKvTile)
    return "kv_tile must be 0, 64 or 128 on the GPU (128: the Hopper wgmma pipeline, head dims 64 / 128)";
  if (p.head_dim % 16 != 0) return "head_dim must be a multiple of 16 on the GPU";
  if (!aligned16(p.k, p.k_batch_stride, p.k_row_stride, p.k_head_stride, 1))
    return "k must be 16-byte aligned with strides that are multiples of 16 bytes";
  if (!aligned16(p.v, p.v_batch_stride, p.v_row_stride, p.v_head_stride, 1))
    return "v must be 16-byte aligned with strides that are multiples of 16 bytes";
  const int64_t qb = p.q_type == ElemType::FP8 ? 1 : 2;
  if (!aligned16(p.q, p.q_batch_stride, p.q_row_stride, p.q_head_stride, qb))
    return "q must be 16-byte aligned with strides that are multiples of 16 bytes";
  const int64_t group = p.num_heads_k > 0 ? p.num_heads / p.num_heads_k : 0;
  const int64_t m_blocks = (static_cast<int64_t>(p.seqlen_q) * group + 63) / 64;
  if (m_blocks * p.batch * p.num_heads_k >= (int64_t{1} << 31)) return "too many query rows for one launch";
  if (p.batch > 65535) return "batch must be at most 65535 on the GPU";
  return nullptr;
}

int32_t choose_num_splits(const FwdParams& p, int32_t num_sm) {
  const int64_t group = p.num_heads / p.num_heads_k;
  const int64_t rows = static_cast<int64_t>(p.seqlen_q) * group;
  const int64_t m_blocks = (rows + 63) / 64;
  const int64_t blocks = m_blocks * p.batch * p.num_heads_k;
  const int64_t kv_tile = p.kv_tile > 0 ? p.kv_tile : kGpuKvTile;  // the chosen instance's tile
  const int64_t tiles = (static_cast<int64_t>(p.seqlen_k) + kv_tile - 1) / kv_tile;
  if (blocks <= 0 || num_sm <= 0 || tiles < 4) return 1;
  // Decode-shaped calls (<= 16 rows per (batch, kv head): one block each) split to fill the waves
  // of the decode kernel's resident blocks (decode_config.h).
  if (rows <= 16)
    return decode_num_splits(blocks, tiles, num_sm, DecodeDefault::kBlocksPerSm, kDecodeMinTilesPerSplit);
  // Other calls only when they do not fill every multiprocessor: at most one wave of about three
  // blocks per multiprocessor, at least 2 tiles (128 keys) per split; then the fewest splits with
  // the same tiles per split (none left empty).
  if (blocks >= num_sm) return 1;
  const int64_t want = std::max<int64_t>(1, std::min<int64_t>({(3 * num_sm) / blocks, tiles / 2, 128}));
  const int64_t per = (tiles + want - 1) / want;
  return static_cast<int32_t>((tiles + per - 1) / per);
}

}  // namespace fp8attn
