// The Policy of the fp8-operand forward pipeline (pipeline.h): tile sizes, warps, shared-memory
// layout, and the atoms. The one place that decides how a Problem maps onto the machine; the
// atom family (Arch: nv::Sm89 = mma.sync m16n8k32, amd::Gfx9 = MFMA 32x32x16 on 64-lane
// wavefronts) supplies the warp tile and the shared-memory limit.
//
// Block = kWarps warps x Tile::kRowsPerWarp packed query rows (GQA-packed rows: see kernel.h),
// KV tile = kBlockN keys. Shared memory (bytes):
//   Q        [kBlockM][kRowStride]   fp8 codes (16-bit q is quantized on the way in)
//   K  x kStages [kBlockN][kRowStride]   rows permuted by Tile::k_row()
//   Vraw x kStages [kBlockN][kRowStride] natural key order
//   Vt       [kDPad][kVtStride]      V transposed (d-major) for the P.V operand
// kRowStride = kDPad + 16: an odd number of 16-byte chunks, so the 8 rows an ldmatrix phase reads
// hit 8 different bank groups. Columns [D, kDPad) of K are zero (k32 MMA steps); rows [D, kDPad)
// of Vt are never written (the AMD tile computes 32-wide d blocks and drops the columns >= D).
// kWarps x kStages: the first of (4,2) (4,1) (2,2) (2,1) (1,2) (1,1) that fits Arch::kSmemLimit
// (NVIDIA: always (4,2); AMD gfx942's 64 KiB LDS: (4,2) up to D = 128, (2,1) at 192, (1,1) at 256).
#pragma once
#include <cstdint>

#include "../arch/select.h"
#include "problem.h"

namespace fp8attn {

template <class Problem, class Arch = DefaultArch>
struct FwdPolicyFp8 {
  using Tile = typename Arch::template Tile<Problem::kFp8>;
  using PQuant = typename Tile::PQuant;
  static constexpr int kBlockN = 64;  // keys per KV tile: the default (and only) kv_tile
  static constexpr int kD = Problem::kHeadDim;
  static constexpr int kDPad = (kD + Tile::kDAlign - 1) / Tile::kDAlign * Tile::kDAlign;
  static constexpr int kNTilesO = Tile::o_frags(kD);  // 4-float groups of the O accumulator
  static constexpr int kChunks = kD / 16;            // 16-byte chunks per K/V/Q row
  static constexpr int kRowStride = kDPad + 16;
  static constexpr int kVtStride = kBlockN + 16;

  static constexpr int smem_bytes(int warps, int stages) {
    return warps * Tile::kRowsPerWarp * kRowStride + 2 * stages * kBlockN * kRowStride + kDPad * kVtStride;
  }
  static constexpr int kWarps = smem_bytes(4, 1) <= Arch::kSmemLimit ? 4 : smem_bytes(2, 1) <= Arch::kSmemLimit ? 2 : 1;
  static constexpr int kStages = smem_bytes(kWarps, 2) <= Arch::kSmemLimit ? 2 : 1;
  static_assert(smem_bytes(kWarps, kStages) <= Arch::kSmemLimit, "tile does not fit in shared memory");

  static constexpr int kThreads = Tile::kWarpSize * kWarps;
  static constexpr int kBlockM = Tile::kRowsPerWarp * kWarps;  // packed (row, head) pairs per block

  static constexpr int kQBytes = kBlockM * kRowStride;
  static constexpr int kKVBytes = kBlockN * kRowStride;
  static constexpr int kOffQ = 0;
  static constexpr int kOffK = kOffQ + kQBytes;
  static constexpr int kOffV = kOffK + kStages * kKVBytes;
  static constexpr int kOffVt = kOffV + kStages * kKVBytes;
  static constexpr int kSmemBytes = kOffVt + kDPad * kVtStride;
};

}  // namespace fp8attn
