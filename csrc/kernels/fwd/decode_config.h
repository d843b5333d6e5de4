// Tunables of the decode kernels (pipeline_decode.h; the fwd_decode* rows of the kernel table),
// shared by the pipelines and the kernel table (generate.py emits each decode kernel's blocks per SM,
// which its instance file asserts and choose_num_splits plans with). Host-only code: no kernels. To adopt
// another measured variant (lab/standalone/decode_bench.cu), edit decode_blocks_per_sm.
#pragma once
#include <algorithm>
#include <cstdint>

namespace fp8attn {

// kBlocksPerSm: blocks of the decode kernel meant to share a multiprocessor. It is the kernel's
//   register budget (its __launch_bounds__ minimum: 65536 / (128 threads x kBlocksPerSm) registers,
//   so that the registers allow it), sizes the KV ring (kStages = 0: as many 64-key tiles as fit next
//   to the other blocks, at most 8) and the split count (decode_num_splits). At D = 128 (swizzled
//   128-byte rows): 2 -> 6 tiles, 3 -> 4, 4 -> 3 (sm_90, 227 KiB per SM).
// kRowCopy (before sm_90; sm_90 copies with the TMA engine): a warp's cp.async
//   instruction copies whole 128-byte key rows (lanes run along a row: 4 full lines per
//   instruction) instead of one 32-byte sector of 16 rows (2 lanes per key).
template <int kBlocksPerSm_, int kStages_ = 0, bool kRowCopy_ = true>
struct DecodeConfig {
  static constexpr int kBlocksPerSm = kBlocksPerSm_;
  static constexpr int kStages = kStages_;
  static constexpr bool kRowCopy = kRowCopy_;
};
// Blocks per multiprocessor of the decode kernel of `rows` (8 / 16) packed rows at `head_dim`: 4
// (128 registers) where ptxas fits the kernel in them without spills (scripts/ci_nvcc_baseline.json:
// the 8-row kernels to D 192, the 16-row ones at D 64), else 3 (168) or 2 (255). Measured on the
// H200 (docs/gpu-kernels.md): 4 at 8 rows, D 128 (decode_bench); 3 at 16 rows, D 128 (a ring of 3
// tiles): 8 x 8k at q_len 4 in 56.4 us, 63.5 us when its splits were planned for 4 blocks that its
// 168 registers did not allow, 64 us forced into 128 registers.
constexpr int decode_blocks_per_sm(int rows, int head_dim) {
  if (rows <= 8) return head_dim <= 192 ? 4 : 3;
  return head_dim <= 64 ? 4 : head_dim <= 128 ? 3 : 2;
}
template <int kRows, int kHeadDim>
using DecodeDefault = DecodeConfig<decode_blocks_per_sm(kRows, kHeadDim)>;
// The same for the wgmma decode kernels (pipeline_decode_wgmma.h): 4 at 8 and 16 rows up to D 128, whose
// accumulators are 2-4 registers per row and warp (128 registers without spills; D 128: 3-tile rings), 2 at
// D 256 (32 KiB tiles: 3-tile rings).
constexpr int decode_wg_blocks_per_sm(int /*rows*/, int head_dim) { return head_dim <= 128 ? 4 : 2; }
constexpr int kDecodeMinTilesPerSplit = 2;  // a split streams at least 128 keys
constexpr bool kDecodePdl = true;           // decode and combine kernels by Programmatic Dependent Launch (sm_90+)
constexpr int kDecodeMaxSplits = 128;       // every kernel's split limit: = kMaxSplits (kernel.h; asserted in pipeline_decode.h)

// Split count of a decode-shaped call: `blocks` (batch x kv heads) blocks of `tiles` KV tiles each.
// The blocks are memory bound and about equally long, so a last wave that leaves slots empty
// (blocks_per_sm x num_sm slots) leaves bandwidth unused: take the fewest splits whose waves are
// at least 95 % as full as the best reachable (at least min_tiles tiles per split; splits with
// the same tiles per split are merged: none is left empty).
inline int32_t decode_num_splits(int64_t blocks, int64_t tiles, int32_t num_sm, int blocks_per_sm, int min_tiles) {
  const int64_t slots = static_cast<int64_t>(blocks_per_sm) * num_sm;
  if (blocks <= 0 || slots <= 0 || tiles < 2 * min_tiles) return 1;
  const int64_t most = std::min<int64_t>(tiles / min_tiles, kDecodeMaxSplits);
  const auto splits_of = [&](int64_t s) {  // s requested -> splits with the same tiles per split
    const int64_t per = (tiles + s - 1) / s;
    return (tiles + per - 1) / per;
  };
  const auto fill = [&](int64_t s) {
    const int64_t n = blocks * s, waves = (n + slots - 1) / slots;
    return static_cast<double>(n) / static_cast<double>(waves * slots);
  };
  double best = 0.0;
  for (int64_t s = 1; s <= most; ++s) best = std::max(best, fill(splits_of(s)));
  for (int64_t s = 1; s <= most; ++s)
    if (fill(splits_of(s)) >= 0.95 * best) return static_cast<int32_t>(splits_of(s));
  return 1;
}

}  // namespace fp8attn
