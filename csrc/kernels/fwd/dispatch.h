// The dispatch of the GPU forward kernels: the generated table of every kernel of the build
// (csrc/kernels/generate.py -> fwd_table.cpp) and the selection over it. Host-only C++ without
// CUDA: tests/test_dispatch.py compiles it with a generated table for the host.
//
// A call's kernel: of the pipelines its device's target runs (in the target's preference order,
// a FP8ATTN_PIPELINE preference first), the first with a kernel of the call's head dim, FP8 kind
// and mask kind, at the call's kv_tile (0: the tile the pipeline prefers there), serving the
// call's packed rows (decode kernels serve at most their max_rows; the narrowest that fits wins) and
// its cache (page_boxes kernels: paged, block size a multiple of 16).
// What choose_fwd_kernel returns is what runs and what forward_kernel (fp8attn.kernel_name) reports.
#pragma once
#include <cstdint>

#include "../params.h"
#include "problem.h"

namespace fp8attn {

struct FwdKernel {
  const char* name;   // fwd_<pipeline><rows>_hd<D>_<fp8 kind>_<mask>_kv<tile> (generate.py)
  int32_t pipe;       // its pipeline: an index into FwdTable::pipes
  int32_t head_dim;
  Fp8Kind fp8_kind;
  MaskKind mask;
  int32_t kv_tile;    // keys per KV tile (where P is quantized)
  bool default_tile;  // the tile its pipeline runs for kv_tile = 0 at this head dim and mask
  int32_t max_rows;   // serves calls of at most this many packed rows per (batch, kv head); 0: any
  int32_t block_rows; // packed query rows per block (its policy's kBlockM, asserted by its instance file)
  bool item_counter;  // takes FwdParams::item_counter (a dynamic work order) for varlen and masked calls
  bool page_boxes;    // serves only calls over a paged cache of whole 16-key boxes (block size % 16 == 0)
  int32_t blocks_per_sm;  // decode kernels: the resident blocks per SM their split plan fills (0: others)
};

// A kind of device: the pipelines it runs, in preference order.
struct FwdTarget {
  const char* name;
  int32_t cc_major, cc_minor;  // the CUDA compute capability it stands for; -1: any other device
  const int32_t* pipes;
  int32_t num_pipes;
};

struct FwdTable {
  const char* const* pipes;  // pipeline names (the values of FP8ATTN_PIPELINE)
  int32_t num_pipes;
  const FwdTarget* targets;
  int32_t num_targets;
  const int32_t* kv_tiles;          // every KV tile of the platform's kernels (a full build)
  const char* const* kv_tile_notes; // per tile: which pipelines have it, at which head dims
  int32_t num_kv_tiles;
  const char* kv_tile_rule;         // the error of a kv_tile not in kv_tiles
  const FwdKernel* kernels;  // the kernels of this build
  int32_t num_kernels;
};

const FwdTable& fwd_table();  // generated (fwd_table.cpp)

// Packed query rows per (batch, kv head): q_len x the GQA group (GQA rows share a block, kernel.h).
inline int64_t packed_rows(const FwdParams& p) {
  return static_cast<int64_t>(p.seqlen_q) * (p.num_heads_k > 0 ? p.num_heads / p.num_heads_k : 0);
}

inline MaskKind mask_kind_of(const FwdParams& p) {
  return (p.is_causal || p.window_left >= 0 || p.window_right >= 0) ? MaskKind::kBand : MaskKind::kNone;
}

// The target of a device of compute capability major.minor: its own, else the table's "any" target.
const FwdTarget& fwd_target(const FwdTable& t, int cc_major, int cc_minor);

// A pipeline by name: its index; -1 for no name (null or empty), -2 for a name the table lacks.
int32_t fwd_pipe_index(const FwdTable& t, const char* name);

// The kernel of a call on `target` (preferred_pipe: an index, or -1), nullptr when the build has none.
const FwdKernel* choose_fwd_kernel(const FwdTable& t, const FwdParams& p, const FwdTarget& target,
                                   int32_t preferred_pipe);

// The reason a call cannot run on the GPU kernels (kv_tile, alignment, grid limits); nullptr when it
// can. k: the call's kernel (its block rows size the grid), or nullptr before one is chosen (the
// checks that do not depend on it). The torch entry point turns a reason into a ValueError.
const char* fwd_unsupported_reason(const FwdTable& t, const FwdParams& p, const FwdKernel* k);

// Flash-decoding split count of a call on kernel k and num_sm multiprocessors (host arithmetic on
// params: no device reads, so it is graph-capture safe).
int32_t choose_num_splits(const FwdParams& p, const FwdKernel& k, int32_t num_sm);

}  // namespace fp8attn
