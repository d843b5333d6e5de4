// The Policy of the Hopper warp-specialized pipeline (pipeline_wgmma.h): one producer warpgroup
// (copies and the V transpose) and two or three consumer warpgroups of 64 packed query rows each, a ring
// of kStages ring tiles of kRingN keys, head dims 64 / 128 / 256 and e4m3fn (the FP8 wgmma reads
// OCP e4m3; fnuz stays on the portable pipeline).
//
// The KV tile (kBlockN) is where P is quantized and the running max is updated, once per consumer
// step: 64 keys, every implementation's default, or 128 (per 128 keys the consumers pay the fixed
// cost of a step -- barrier waits, wgmma issue, max shuffles, the rescale vote -- once instead of
// twice). The ring's tiles have the step's keys, but at D 256, where a 128-key slot (K, Vt and Vraw:
// 96 KB) fits only twice: there a 128-key step reads two 64-key ring tiles, and the block has one Q
// buffer so that four ring tiles (two steps) fit.
//
// Persistent: a block per SM loops over the (m block, batch x kv head, split) work items, so the
// producer loads the next item's Q and first KV tiles while the consumers finish the current one.
//
// Shared memory (bytes; every operand tile starts on a 1024-byte boundary):
//   Q     x kQBuffers [kBlockM][kD]  swizzled K-major (kSw-byte column blocks), A of S = Q.K^T; with two
//                              buffers the next work item's Q lands while the current one is in use
//   K     [kStages x kRingN][kD]  the ring's K rows as one swizzled K-major tile (slot s: rows
//                              kRingN s ..), so that a step's kSlots consecutive slots are one B
//                              operand of S = Q.K^T
//   Vt    x kStages [kD][kRingN]    V transposed, keys permuted (see the pipeline), 64B swizzle
//                                    (a 128-key tile is two 64-key column blocks), B of O += P.V
//   Vraw  x kStages [kRingN][kD]     V as loaded ([key][d]) in K's swizzle: the TMA box layout, and
//                                    the transpose's 8-key reads hit 8 distinct bank groups
//   ones  [8][64]                  FP8 1.0: B of l += P.1 (the row sums of P8 on the tensor cores)
//   barriers: q_full[2], q_empty[2], k_full[kStages], v_full[kStages], empty[kStages], v_land[kStages]
#pragma once
#include <cstdint>

#include "../arch/nv_wgmma.h"
#include "problem.h"

namespace fp8attn {

// Consumer warpgroups: three where S and O fit the 152 registers of a 512-thread block (D 64, and
// D 128 at 64-key tiles), since a step is a latency chain (max, shuffles, exp2s) that more warpgroups
// overlap (docs/hopper-pipeline.md); two otherwise (a 128-key S beside a D 128 O needs 224).
constexpr int wgmma_consumers(int head_dim, int kv_tile) {
  return head_dim == 64 || (head_dim == 128 && kv_tile == 64) ? 3 : 2;
}

template <class Problem, int kKvTile = kDefaultKvTile, int kConsumers_ = wgmma_consumers(Problem::kHeadDim, kKvTile)>
struct FwdPolicyNvWgmma {
  static constexpr int kD = Problem::kHeadDim;
  static_assert(kD == 64 || kD == 128 || kD == 256, "wgmma pipeline: head dims 64, 128, 256");
  static_assert(Problem::kFp8 == Fp8Kind::E4M3FN, "wgmma pipeline: e4m3fn only");
  static constexpr int kConsumers = kConsumers_;  // consumer warpgroups
  static_assert(kConsumers == 2 || kConsumers == 3, "wgmma pipeline: two or three consumer warpgroups");
  static constexpr int kThreads = 128 * (1 + kConsumers);
  // Named barriers of the block (0 is __syncthreads), 128 threads each: the producer warpgroup's V
  // transpose, each consumer warpgroup's staged epilogue, the producer's work-item fetch.
  static constexpr int kBarTranspose = 1;
  static constexpr int kBarEpilogue = 2;  // + the consumer warpgroup
  static constexpr int kBarItemFetch = kBarEpilogue + kConsumers;
  static_assert(kBarItemFetch < 16, "a block has 16 named barriers");
  static constexpr int kBlockM = 64 * kConsumers;
  static constexpr int kBlockN = kKvTile;
  static_assert(kBlockN == 64 || kBlockN == 128, "wgmma pipeline: 64- or 128-key tiles");
  static constexpr int kRingN = kD == 256 ? 64 : kBlockN;  // keys of a ring tile
  static constexpr int kSlots = kBlockN / kRingN;           // ring tiles per consumer step
  static constexpr int kQBuffers = kSlots == 1 ? 2 : 1;
  // S of step i + 1 issued with P.V of step i inside a consumer warpgroup; not at D 256 with 128-key
  // steps, where S (64 registers), O (128) and P8 (16) in flight at once left ptxas too few
  // registers for the rest (it serialized every wgmma, C7512): there the consumer warpgroups
  // overlap each other's steps only.
  static constexpr bool kOverlap = !(kD == 256 && kBlockN == 128);
  // As many stages as fit next to the Q buffers, up to 4 (3 at D 256 with two Q buffers: 48 KB per stage)
  static constexpr int kStageBytes = 3 * kRingN * kD;  // K, Vt, Vraw
  // The pipeline's Barriers (pipeline_wgmma.h) for a ring of `stages`.
  static constexpr int bar_bytes(int stages) { return 8 * (6 + 4 * stages) + 16; }
  static constexpr int kStagesFit =
      (nv::Sm89::kSmemLimit - kQBuffers * kBlockM * kD - 512 - bar_bytes(4) - 1024) / kStageBytes;
  static constexpr int kStages = kStagesFit < 4 ? kStagesFit : 4;
  static constexpr int kBarBytes = bar_bytes(kStages);
  // (the producer finalizes a tile's V one step behind its copies: pipeline_wgmma.h, Producer::item)
  static_assert(kStages >= 2 * kSlots + (kSlots == 1 ? 1 : 0) && kStages % kSlots == 0,
                "the ring holds the step being consumed, the next one and (64-key steps) one more tile");
  static constexpr int kNTilesO = kD / 8;  // n8 blocks of the O accumulator
  static constexpr int kChunks = kD / 16;  // 16-byte chunks per Q / K / V row
  static constexpr int kSw = kD >= 128 ? 128 : 64;
  // Whole dense / varlen KV tiles by TMA (pipeline_wgmma.h, load_kv_tma); D 64 keeps cp.async, the
  // faster there (docs/hopper-pipeline.md).
  static constexpr bool kTmaKV = kD >= 128;
  using QK = nv::SwizzledTile<kSw>;  // Q and K tiles
  using VT = nv::SwizzledTile<64>;   // Vt rows are the 64 keys of a tile

  static constexpr int kQBytes = kBlockM * kD;
  static constexpr int kKRows = kStages * kRingN;  // rows of the K ring's tile
  static constexpr int kKBytes = kRingN * kD;      // a ring tile's K bytes
  static constexpr int kVtBytes = kD * kRingN;
  static constexpr int kVrawBytes = kRingN * kD;
  static constexpr bool kPersistent = true;
  static constexpr int kOffQ = 0;
  static constexpr int kOffK = kOffQ + kQBuffers * kQBytes;
  static constexpr int kOffVt = kOffK + kStages * kKBytes;
  static constexpr int kOffVraw = kOffVt + kStages * kVtBytes;
  static constexpr int kOffOnes = kOffVraw + kStages * kVrawBytes;
  static constexpr int kOffBar = kOffOnes + 512;
  static_assert(kOffK % 1024 == 0 && kOffVt % 1024 == 0 && kOffVraw % 1024 == 0 && kKBytes % 1024 == 0 &&
                    kVtBytes % 1024 == 0 && kOffOnes % 512 == 0,
                "swizzled tiles must start on 1024-byte boundaries");
  static constexpr int kSmemBytes = kOffBar + kBarBytes + 1024;  // + the base's alignment slack
  static_assert(kSmemBytes <= nv::Sm89::kSmemLimit, "sm_90 allows 227 KiB of shared memory per block");

  // Register reallocation (setmaxnreg): the producer gives registers to the consumers, which hold S,
  // P8 and the O accumulator live across the asynchronous wgmma stages. setmaxnreg.inc waits for
  // registers the block got at launch, so the split must fit in them or it never returns (asserted).
  // The producer's TMA bookkeeping at D 256 with 64-key steps needs 72; the rest is the consumers'.
  static constexpr bool kWideProducer = kD > 128 && kBlockN == 64;
  static constexpr int kProducerRegs = kWideProducer ? 72 : 56;
  static constexpr int kConsumerRegs = kConsumers == 3 ? 152 : kWideProducer ? 216 : 224;
  static_assert(128 * kProducerRegs + 128 * kConsumers * kConsumerRegs <= kThreads * (65536 / kThreads / 8 * 8),
                "register reallocation exceeds the block's launch allocation");

  using Tile = nv::Sm89Tile<Problem::kFp8>;  // the accumulator row / column mapping (see nv_wgmma.h)
  using PQuant = nv::PQuant<Problem::kFp8>;
};

}  // namespace fp8attn
