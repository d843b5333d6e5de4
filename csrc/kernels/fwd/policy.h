// The Policy of the NVIDIA mma.sync forward pipeline: tile sizes, warps, shared-memory layout, and
// the atoms. The one place that decides how a Problem maps onto the machine.
//
// Block = 4 warps x 16 query rows (GQA-packed rows: see kernel.h), KV tile = kBlockN keys.
// Shared memory (bytes):
//   Q      [kBlockM][kRowStride]   fp8 codes (16-bit q is quantized on the way in)
//   K  x2  [kBlockN][kRowStride]   double-buffered, rows permuted by k_row() (see below)
//   Vraw x2[kBlockN][kRowStride]   double-buffered, natural key order
//   Vt     [kHeadDim][kVtStride]   V transposed (d-major) for the P.V B operand
// kRowStride = round_up(D, 32) + 16: an odd number of 16-byte chunks, so the 8 rows an ldmatrix
// phase reads hit 8 different bank groups. Columns [D, round_up(D, 32)) are zero (k32 MMA steps).
#pragma once
#include <cstdint>

#include "../arch/nv_mma.h"
#include "problem.h"

namespace fp8attn {

template <class Problem>
struct FwdPolicyNvMma {
  static constexpr int kWarps = 4;
  static constexpr int kThreads = 32 * kWarps;
  static constexpr int kBlockM = 16 * kWarps;  // packed (row, head) pairs per block
  static constexpr int kBlockN = 64;           // keys per KV tile: the default (and only) kv_tile
  static constexpr int kD = Problem::kHeadDim;
  static constexpr int kDPad = (kD + 31) / 32 * 32;
  static constexpr int kQKSteps = kDPad / 32;  // k32 MMA steps of Q.K^T
  static constexpr int kNTilesO = kD / 8;      // n8 tiles of the O accumulator
  static constexpr int kChunks = kD / 16;      // 16-byte chunks per K/V/Q row
  static constexpr int kRowStride = kDPad + 16;
  static constexpr int kVtStride = kBlockN + 16;

  static constexpr int kQBytes = kBlockM * kRowStride;
  static constexpr int kKVBytes = kBlockN * kRowStride;
  static constexpr int kOffQ = 0;
  static constexpr int kOffK = kOffQ + kQBytes;
  static constexpr int kOffV = kOffK + 2 * kKVBytes;
  static constexpr int kOffVt = kOffV + 2 * kKVBytes;
  static constexpr int kSmemBytes = kOffVt + kD * kVtStride;

  using Mma = nv::MmaFp8<Problem::kFp8>;
  using PQuant = nv::PQuant<Problem::kFp8>;

  // Key order inside a 32-key MMA step. The S accumulator of n8 tile j (0..3) in lane (g, t) holds
  // columns 2t, 2t+1; we make those keys 16*(j>>1) + 4t + 2*(j&1) + {0,1}, so that a lane holds keys
  // 4t..4t+3 and 16+4t..16+4t+3 -- exactly its A fragment of the P.V mma, with no shuffles. The K
  // rows feeding tile j's B operand are therefore key_of(j, n) for n = 0..7.
  FP8ATTN_HD static int key_of(int j, int n) {  // j: n8 tile in the 64-key tile (0..7), n: column 0..7
    return 32 * (j >> 2) + 16 * ((j >> 1) & 1) + 4 * (n >> 1) + 2 * (j & 1) + (n & 1);
  }
  // Physical K row of key r: permutes r mod 16 so that the 8 keys of one n8 tile land in 8
  // distinct rows mod 8 (conflict-free ldmatrix with the odd-chunk row stride).
  FP8ATTN_HD static int k_row(int r) {
    const int x = r & 15;
    return (r & ~15) | (((x >> 1) & 1) << 3) | (((x >> 3) & 1) << 2) | (((x >> 2) & 1) << 1) | (x & 1);
  }
};

}  // namespace fp8attn
