// The Hopper warp-specialized Pipeline (sm_90a): the same KV loop and quantization points as the
// portable pipelines (see pipeline.h), with FP8 wgmma for all products. A persistent block runs
// the work items the kernel hands it; ring tiles are numbered globally (g) over the block's items,
// so the ring of kStages slots and its barrier phases run on across items. A consumer step of
// kBlockN keys reads kSlots consecutive ring tiles of kRingN keys (2 at D 256 with 128-key steps, 1
// otherwise).
//
// Producer warpgroup (128 threads), per work item: Q -> Q[item % kQBuffers] (after the consumers
// released that buffer; with one buffer after the item's first step of tiles), then per ring tile g
// (slot g % kStages): wait until the consumers released the slot, then K -> K[slot] and V ->
// Vraw[slot] (both in K's swizzle): a whole tile by TMA boxes (dense / varlen: one box per column
// block; a paged cache whose blocks hold a multiple of 16 keys: one per 16 keys; K completes k_full
// and V v_land by their bytes), else (other pages, or the tail tile, whose keys past k_len must read
// as zeros) by every thread's cp.async. About a step later (make_room: before the consumers' release
// of the slots it refills depends on it; and at item boundaries) it finalizes tile g: once V has
// landed (v_land, or each thread's copies, fence.proxy.async, arrive k_full and a named barrier),
// transpose Vraw -> Vt (ldmatrix .trans, byte permutes, stmatrix), fence, arrive v_full.
// Consumer warpgroup w (64 packed rows, 4 warps x 16), per step: wait k_full; S = Q.K^T (m64nNk32,
// N = kBlockN, Q and K from shared memory); logits, mask, online softmax, p8 = sat(p / p_scale)
// packed into the A fragments of P.V; wait v_full; O += P8.Vt and l += P8.1 (P from registers);
// arrive empty. S of step i + 1 is issued with P.V of step i (Policy::kOverlap; else one after the
// other). After its last step it stores the item's rows (the Epilogue) and then releases Q.
// S's accumulator gives lane (g, t) keys 8j + 2t + {0, 1}; the P.V A fragment wants a lane's four
// bytes at consecutive k. So the k order of P.V is permuted: k position v = 16h + 4t' + b of a
// 32-key step holds key 16h + 8(b >> 1) + 2t' + (b & 1) -- what lane t' already has -- and the
// transpose writes V's keys into Vt in that order (the sum over k does not care). A 128-key tile
// is two 64-key halves, each transposed and laid out (a 64-byte column block of Vt) like a 64-key tile.
// Numerics: the FP8 tensor cores sum products with less than fp32 precision, so outputs differ
// from the CPU oracle (exact fp32 products and sums) by rounding noise: the error against fp64 is
// the same as the portable pipelines' (docs/gpu-kernels.md).
#pragma once
#include <cmath>
#include <cstdint>

#include "pipeline.h"
#include "policy_wgmma.h"

namespace fp8attn {

template <class Problem, class Policy>
struct FwdPipelineNvWgmma {
  static constexpr int kD = Policy::kD;
  static constexpr int kBN = Policy::kBlockN;  // keys of a consumer step
  static constexpr int kRN = Policy::kRingN;   // keys of a ring tile
  static constexpr int kSlots = Policy::kSlots;
  static constexpr int kStages = Policy::kStages;
  static constexpr int kSElems = kBN / 2;  // S accumulators per thread (two rows x kBN / 4 keys)
  static constexpr int kPWords = kBN / 8;  // P8 A-fragment registers per thread (4 per 32-key step)
  using QK = typename Policy::QK;
  using VT = typename Policy::VT;

  struct Barriers {
    uint64_t q_full[2], q_empty[2];
    uint64_t k_full[kStages], v_full[kStages], empty[kStages];
    uint64_t v_land[kStages];  // a TMA-loaded V tile's bytes landed in Vraw
    // The producer publishes each work item's index (-1: no more) in item[Q buffer], completing
    // item_full, ahead of its Q; fetched: the producer's broadcast of a counter value (kernel_wgmma.h).
    uint64_t item_full[2];
    int32_t item[2], fetched[2];
  };
  static constexpr int kConsumerThreads = 128 * Policy::kConsumers;
  static_assert(sizeof(Barriers) <= Policy::kBarBytes, "the policy reserves the barriers' bytes");

  FP8ATTN_DEVICE static uint8_t* q_buf(uint8_t* smem, int i) {
    return smem + Policy::kOffQ + (Policy::kQBuffers == 1 ? 0 : i * Policy::kQBytes);
  }
  // Byte `col` of K row `row` of ring slot s, in the ring's one K tile.
  FP8ATTN_HD static int k_offset(int s, int row, int col) { return QK::offset(Policy::kKRows, kRN * s + row, col); }
  FP8ATTN_DEVICE static uint8_t* vt_buf(uint8_t* smem, int s) { return smem + Policy::kOffVt + s * Policy::kVtBytes; }
  FP8ATTN_DEVICE static uint8_t* vraw_buf(uint8_t* smem, int s) {
    return smem + Policy::kOffVraw + s * Policy::kVrawBytes;
  }

  // Barriers and the ones tile (nv::kOnesE4m3x4).
  FP8ATTN_DEVICE static void init(uint8_t* smem, Barriers* b) {
    for (int i = threadIdx.x; i < 512 / 16; i += blockDim.x)
      reinterpret_cast<uint4*>(smem + Policy::kOffOnes)[i] =
          make_uint4(nv::kOnesE4m3x4, nv::kOnesE4m3x4, nv::kOnesE4m3x4, nv::kOnesE4m3x4);
    nv::fence_proxy_async();
    if (threadIdx.x == 0) {
      for (int i = 0; i < 2; ++i) {
        nv::mbar_init(&b->q_full[i], 128);
        nv::mbar_init(&b->q_empty[i], kConsumerThreads);
        nv::mbar_init(&b->item_full[i], 1);
      }
      for (int s = 0; s < kStages; ++s) {
        nv::mbar_init(&b->k_full[s], 128);
        nv::mbar_init(&b->v_full[s], 128);
        nv::mbar_init(&b->empty[s], kConsumerThreads);
        nv::mbar_init(&b->v_land[s], 1);
      }
      nv::fence_mbarrier_init();  // (the copy engine completes k_full and v_land)
    }
  }

  // ---- producer --------------------------------------------------------------------------------
  // Vraw in K's swizzle: the 8 rows of a transpose matrix (8 consecutive keys, one 16-byte column)
  // sit in 8 distinct bank groups.
  FP8ATTN_HD static int vraw_offset(int key, int chunk) { return QK::offset(kRN, key, 16 * chunk); }

  // Per-thread copy assignment, the same for every tile (computed once).
  static constexpr int kLoadRows = kRN * Policy::kChunks / 128;  // K (and V) rows one producer thread copies

  struct Producer {
    int ptid;    // 0..127
    int g = 0;   // ring tiles issued so far (all items)
    int fz = 0;  // ring tiles finalized so far
    int qn = 0;  // work items started so far
    // bit s: slot s holds a TMA-loaded tile; bit 8 + s: the parity of slot s's next v_land phase
    uint32_t slots = 0;
    // copies: thread copies chunk ch of rows row0 + k * kRowStep (k < kLoadRows) of K and V
    int ch, row0;
    static constexpr int kRowStep = 128 / Policy::kChunks;
    // The V transpose, per warp w and step (i, b) (i < kRN / 64, b < kD / 32): ldmatrix .trans of
    // keys 16(w + 4i) .. +15 (16-key group h) x d 32b .. 32b + 31, as four 8 x 8 b16 matrices
    // (keys 0-7 / 8-15 of the group x d 32b.. / 32b + 16..): lane t then holds, per 16-d half, keys
    // 2(t % 4), +1 of both key halves at d pairs 2(t / 4), +1 -- after one byte permute per d, the
    // four keys {k, k + 1, k + 8, k + 9} (k = 16h + 2(t % 4)) of one d, which are exactly the Vt
    // positions 16h + 4(t % 4) .. +3 (the P.V order above). stmatrix writes them as Vt rows: matrix
    // m row r is d = 32b + 16(m / 2) + 2r + p (p: the d parity; rows r < 4 take even d in even m),
    // so each matrix's rows cover all 8 bank groups of the 64B swizzle. ld / st: the lane's row
    // shared-window address at step (0, 0) in slot 0's Vraw / Vt (slots add kVrawBytes / kVtBytes;
    // Vt steps 64 kD i + 2048 b, Vraw steps 64 kSw i + kRN kSw (b / bs) as immediates and, inside
    // a swizzle row of bs = kSw / 32 steps, XOR 32 (b % bs): the swizzle XORs the 16-byte column
    // with the key's row bits, and column (m / 2) + 2b has b in its upper bits; whole addresses, so
    // that no second copy of them stays live for the drain); sel_lo / sel_hi: the byte permutes of
    // matrices m even / odd. Checked against the per-byte layout, and
    // for bank conflicts, by lab/standalone/transpose_model.py.
    uint32_t ld, st, sel_lo;  // (sel_hi = sel_lo ^ 0x1111: a register fewer for the 56-register producer)

    FP8ATTN_DEVICE Producer(int tid, uint8_t* smem)
        : ptid(tid), ch(tid % Policy::kChunks), row0(tid / Policy::kChunks) {
      const int w = tid / 32, m = (tid % 32) / 8, r = tid % 8, j = (tid % 32) / 4;
      ld = nv::smem_addr(vraw_buf(smem, 0) + vraw_offset(16 * w + 8 * (m & 1) + r, m >> 1));
      const int d = 16 * (m >> 1) + 2 * r + ((m & 1) ^ (r >= 4 ? 1 : 0));
      st = nv::smem_addr(vt_buf(smem, 0) + VT::offset(kD, d, 16 * w));
      sel_lo = j < 4 ? 0x6420u : 0x7531u;  // bytes 0, 2 of a and b: the even d of the pair
    }

    // FP8 q in batches of kQBatch chunks, every load of a batch issued before its stores: one
    // memory round trip per batch instead of one per chunk (the SASS of the plain loop waited for
    // each LDG before its STS, 8 round trips per work item at D = 128, while the block waits for
    // its Q). A 16-bit q is quantized chunk by chunk (registers).
    static constexpr int kQChunksPerThread = Policy::kBlockM * Policy::kChunks / 128;
    static constexpr int kQBatchMax = kD > 128 ? 2 : 4;  // 4 at D = 256 spills the producer (56 registers)
    static constexpr int q_batch(int n) { return kQChunksPerThread % n == 0 ? n : q_batch(n - 1); }
    static constexpr int kQBatch = q_batch(kQChunksPerThread < kQBatchMax ? kQChunksPerThread : kQBatchMax);
    static_assert(kQChunksPerThread % kQBatch == 0, "Q chunks per producer thread");
    FP8ATTN_DEVICE void load_q(const FwdParams& p, const BlockCtx& c, uint8_t* sQ) const {
      if (p.q_type == ElemType::FP8) {
#pragma unroll 1
        for (int b = 0; b < kQChunksPerThread; b += kQBatch) {
          uint4 codes[kQBatch];
#pragma unroll
          for (int k = 0; k < kQBatch; ++k) {
            const int i = ptid + 128 * (b + k);
            int64_t off;
            int32_t h;
            codes[k] = q_chunk_offset(p, c, i / Policy::kChunks, i % Policy::kChunks, &off, &h)
                           ? *reinterpret_cast<const uint4*>(static_cast<const uint8_t*>(p.q) + off)
                           : make_uint4(0, 0, 0, 0);
          }
#pragma unroll
          for (int k = 0; k < kQBatch; ++k) {
            const int i = ptid + 128 * (b + k);
            *reinterpret_cast<uint4*>(sQ + QK::offset(Policy::kBlockM, i / Policy::kChunks, 16 * (i % Policy::kChunks))) =
                codes[k];
          }
        }
        return;
      }
      for (int i = ptid; i < Policy::kBlockM * Policy::kChunks; i += 128) {
        const int r = i / Policy::kChunks, cq = i % Policy::kChunks;
        const uint4 codes = load_q_chunk<Problem::kFp8>(p, c, r, cq);
        *reinterpret_cast<uint4*>(sQ + QK::offset(Policy::kBlockM, r, 16 * cq)) = codes;
      }
    }

    // cp.async of ring tile `tile` of the item into slot s (keys at or past k_len zero-filled, never read). Paged:
    // every row's table entry is loaded (unconditionally: the last key stands in for those past
    // k_len) before any copy is issued -- one memory round trip per tile; with each copy after its
    // own entry, the SASS waited for the entries one by one.
    FP8ATTN_DEVICE void load_kv(const FwdParams& p, const BlockCtx& c, int tile, uint8_t* smem, int s) const {
      uint8_t* sVraw = vraw_buf(smem, s);
      // (the chunk's byte offset unsigned: a signed one costs a 64-bit register pair, which spilled
      // the D = 256 producer)
      const uint32_t cb = 16u * static_cast<uint32_t>(ch);
      const uint8_t* kbase = static_cast<const uint8_t*>(p.k) + static_cast<int64_t>(c.hkv) * p.k_head_stride + cb;
      const uint8_t* vbase = static_cast<const uint8_t*>(p.v) + static_cast<int64_t>(c.hkv) * p.v_head_stride + cb;
      const auto copy = [&](int k, int64_t koff, int64_t voff) {
        const int r = row0 + k * kRowStep;
        const bool ok = tile * kRN + r < c.seq.k_len;
        nv::cp_async_16(smem + Policy::kOffK + k_offset(s, r, 16 * ch), kbase + koff, ok);
        nv::cp_async_16(sVraw + vraw_offset(r, ch), vbase + voff, ok);
      };
      if (c.seq.blocks) {
        // (in groups of 4 rows: 8 entries at D = 256 spill the 56-register producer)
        constexpr int kGroup = kLoadRows < 4 ? kLoadRows : 4;
#pragma unroll
        for (int k0 = 0; k0 < kLoadRows; k0 += kGroup) {
          int32_t blk[kGroup], row[kGroup];
#pragma unroll
          for (int k = 0; k < kGroup; ++k) {
            const int32_t key = min(tile * kRN + row0 + (k0 + k) * kRowStep, c.seq.k_len - 1);
            blk[k] = c.seq.blocks[key / p.page_block_size];
            row[k] = key % p.page_block_size;
          }
#pragma unroll
          for (int k = 0; k < kGroup; ++k)
            copy(k0 + k, SeqInfo::page_offset(p, blk[k], row[k], false), SeqInfo::page_offset(p, blk[k], row[k], true));
        }
      } else {
#pragma unroll
        for (int k = 0; k < kLoadRows; ++k) {
          const int32_t key = tile * kRN + row0 + k * kRowStep;
          const bool ok = key < c.seq.k_len;
          copy(k, ok ? c.seq.key_offset(p, key, false) : 0, ok ? c.seq.key_offset(p, key, true) : 0);
        }
      }
    }

    // Whether ring tile `tile` of the item comes by TMA: tensor maps (encode_kv_maps) and every key of
    // the tile below k_len (the tail tile's keys past k_len must read as zeros: cp.async).
    FP8ATTN_DEVICE static bool by_tma(const FwdParams& p, const BlockCtx& c, int tile) {
      return Policy::kTmaKV && p.kv_tma && (tile + 1) * kRN <= c.seq.k_len;
    }
    // A whole tile (keys below k_len) by TMA into the swizzle of K's tile, per kSw-byte column block
    // of K and of V, issued by the first producer warp: dense / varlen (K / V [total_k, Hkv, D]),
    // lane 0, one box of the tile's keys; paged, lane j, the box of keys 16j .. 16j + 15 of the tile
    // in its page (encode_kv_maps: blocks of a multiple of 16 keys), after reading its table entry.
    // Lane 0's arrivals expect the bytes (a box landing
    // before them leaves the phase open: lane 0's arrival is still pending); k_full also counts the
    // other producers' arrivals, v_land only lane 0's.
    FP8ATTN_DEVICE void load_kv_tma(const FwdParams& p, const BlockCtx& c, int tile, uint8_t* smem, int s, int lane,
                                    uint64_t* kbar, uint64_t* vbar) const {
      constexpr int kSw = Policy::kSw;
      uint8_t* sK = smem + Policy::kOffK + k_offset(s, 0, 0);
      uint8_t* sVraw = vraw_buf(smem, s);
      const bool paged_box = c.seq.blocks && lane < kRN / 16;
      const int32_t key = tile * kRN + 16 * lane, page = paged_box ? p.div_page.div(key) : 0;
      const int32_t entry = paged_box ? SeqInfo::valid_block(p, c.seq.blocks[page]) : 0;
      if (lane == 0) {
        nv::mbar_arrive_expect_tx(kbar, Policy::kKBytes);
        nv::mbar_arrive_expect_tx(vbar, Policy::kVrawBytes);
      } else {
        nv::mbar_arrive(kbar);
      }
      if (c.seq.blocks) {
        if (!paged_box) return;
        const int32_t row = key - page * p.page_block_size;
#pragma unroll
        for (int cb = 0; cb < kD / kSw; ++cb) {
          const int at = 16 * lane * kSw;  // the box's 16 rows in the slot
          nv::tma_load_4d(sK + cb * Policy::kKRows * kSw + at, p.k_tmap, cb * kSw, c.hkv, row, entry, kbar);
          nv::tma_load_4d(sVraw + cb * kRN * kSw + at, p.v_tmap, cb * kSw, c.hkv, row, entry, vbar);
        }
        return;
      }
      if (lane != 0) return;
      const int32_t row = (p.cu_seqlens_k ? p.cu_seqlens_k[c.b] : 0) + tile * kRN;
#pragma unroll
      for (int cb = 0; cb < kD / kSw; ++cb) {
        if (p.cu_seqlens_k) {
          nv::tma_load_3d(sK + cb * Policy::kKRows * kSw, p.k_tmap, cb * kSw, c.hkv, row, kbar);
          nv::tma_load_3d(sVraw + cb * kRN * kSw, p.v_tmap, cb * kSw, c.hkv, row, vbar);
        } else {
          nv::tma_load_4d(sK + cb * Policy::kKRows * kSw, p.k_tmap, cb * kSw, c.hkv, row, c.b, kbar);
          nv::tma_load_4d(sVraw + cb * kRN * kSw, p.v_tmap, cb * kSw, c.hkv, row, c.b, vbar);
        }
      }
    }

    // Vraw [key][d] -> Vt [d][k position] of ring slot s (see the constructor).
    FP8ATTN_DEVICE void transpose_v(int s) const {
      const uint32_t vraw = ld + s * Policy::kVrawBytes, vt = st + s * Policy::kVtBytes;
#if FP8ATTN_NV_WGMMA
      const uint32_t sel_hi = sel_lo ^ 0x1111u;
      // (one step's registers at a time: two steps in flight spill the 56-register producer; the
      // swizzle's XOR outermost, so that one XORed address is live at a time)
      constexpr int bs = Policy::kSw / 32;
#pragma unroll
      for (int bx = 0; bx < bs; ++bx) {
        const uint32_t src = vraw ^ (32 * bx);
#pragma unroll
        for (int b = bx; b < kD / 32; b += bs) {
#pragma unroll
          for (int i = 0; i < kRN / 64; ++i) {
            uint32_t in[4];
            nv::ldmatrix_x4_trans(in, src + 64 * i * Policy::kSw + kRN * Policy::kSw * (b / bs));
            const uint32_t out[4] = {__byte_perm(in[0], in[1], sel_lo), __byte_perm(in[0], in[1], sel_hi),
                                     __byte_perm(in[2], in[3], sel_lo), __byte_perm(in[2], in[3], sel_hi)};
            nv::stmatrix_x4(vt + 64 * kD * i + 2048 * b, out);
          }
        }
      }
#endif
    }

    // Ring tile `fz` is complete once at most kPending later copy groups are in flight.
    template <int kPending>
    FP8ATTN_DEVICE void finalize(Barriers* bars) {
      const int s = fz % kStages;
      if (tma_slot(s)) {  // TMA: K completed k_full by its bytes
        nv::mbar_wait(&bars->v_land[s], (slots >> (8 + s)) & 1);
        slots ^= 1u << (8 + s);
        FP8ATTN_TRACE(kTraceProducerLanded);
      } else {
        nv::cp_async_wait<kPending>();
        FP8ATTN_TRACE(kTraceProducerLanded);
        nv::fence_proxy_async();
        nv::mbar_arrive(&bars->k_full[s]);
        // Every producer's copies of the tile landed. (The previous transpose of the slot is done
        // everywhere: the consumers released the slot after its v_full.)
        nv::named_barrier_sync(Policy::kBarTranspose, 128);
      }
      FP8ATTN_TRACE(kTraceProducerBarrier);
      transpose_v(s);
      nv::fence_proxy_async();
      nv::mbar_arrive(&bars->v_full[s]);
      FP8ATTN_TRACE(kTraceProducerFinalized);
      ++fz;
    }
    FP8ATTN_DEVICE bool tma_slot(int s) const { return Policy::kTmaKV && (slots >> s & 1); }
    FP8ATTN_DEVICE void drain(Barriers* bars) {
      while (fz < g) finalize<0>(bars);
    }
    // Before ring tile g (the first of a step) is issued: the consumers release the slots it refills
    // (those of the step kStages / kSlots before) once they have that step's V (v_full: finalized) and
    // the next step's K (k_full: its bytes for a TMA tile, finalize for a cp.async one). One-tile
    // steps finalize tile g - kStages + 1 in any case (kStages - 2 copy groups after it in flight).
    // Two-tile steps: make_room ran two tiles ago, so fz >= g - kStages and tile fz has g - fz - 1
    // groups after it. The ring protocol model: tests/test_wgmma_ring_protocol.py.
    FP8ATTN_DEVICE void make_room(Barriers* bars) {
      if constexpr (kSlots == 1) {
        if (g - fz >= kStages - 1) finalize<kStages - 2>(bars);
      } else {
        static_assert(kSlots == 2 && kStages == 4, "two-tile steps: a ring of two steps");
        if (fz == g - 4) finalize<3>(bars);
        if (fz == g - 3) finalize<2>(bars);
        if ((fz == g - 2 && !tma_slot((g - 2) % kStages)) || (fz <= g - 1 && !tma_slot((g - 1) % kStages))) {
          if (fz == g - 2) finalize<1>(bars);
          if (fz == g - 1) finalize<0>(bars);
        }
      }
    }

    // Item `index` to the consumers (-1: none left): its Q buffer and index slot are free once they
    // released the Q of the item two before it (they read that item's index at its start).
    FP8ATTN_DEVICE void publish(Barriers* bars, int32_t index) const {
      const int qs = qn & 1;
      if (qn >= 2) nv::mbar_wait(&bars->q_empty[qs], ((qn >> 1) - 1) & 1);
      if (ptid == 0) {
        bars->item[qs] = index;
        nv::mbar_arrive(&bars->item_full[qs]);  // (release: the index is visible to its waiters)
      }
    }
    // After the last item: its tiles, then the end mark.
    FP8ATTN_DEVICE void finish(uint8_t* smem, Barriers* bars) {
      drain(bars);
      publish(bars, -1);
    }

    // The item's Q. With one Q buffer, once the consumers released the previous item's (after its
    // epilogue, which stages the output there): the item's first step of KV tiles is issued before.
    FP8ATTN_DEVICE void load_item_q(const FwdParams& p, const BlockCtx& c, uint8_t* smem, Barriers* bars) {
      const int qs = qn & 1;
      if (Policy::kQBuffers == 1 && qn >= 1) nv::mbar_wait(&bars->q_empty[qs ^ 1], ((qn - 1) >> 1) & 1);
      load_q(p, c, q_buf(smem, qs));
      nv::fence_proxy_async();
      nv::mbar_arrive(&bars->q_full[qs]);
      FP8ATTN_TRACE(kTraceProducerQ);
      ++qn;
    }

    FP8ATTN_DEVICE void item(const FwdParams& p, const BlockCtx& c, int32_t index, uint8_t* smem, Barriers* bars) {
      // Finish the previous item's tiles first: the consumers release Q only after their last one.
      FP8ATTN_TRACE(kTraceProducerItem);
      drain(bars);
      FP8ATTN_TRACE(kTraceProducerDrained);
      publish(bars, index);
      if (Policy::kQBuffers == 2) load_item_q(p, c, smem, bars);
      const int t0 = kSlots * c.tile_begin, t1 = kSlots * c.tile_end;  // the item's ring tiles
#pragma unroll 1
      for (int tile = t0; tile < t1; ++tile) {
        if (Policy::kQBuffers == 1 && tile == t0 + kSlots) load_item_q(p, c, smem, bars);
        if (g % kSlots == 0) make_room(bars);
        const int s = g % kStages;
        FP8ATTN_TRACE(kTraceProducerSlotWait);
        if (g >= kStages) nv::mbar_wait(&bars->empty[s], ((g / kStages) - 1) & 1);
        FP8ATTN_TRACE(kTraceProducerSlotGo);
        if (by_tma(p, c, tile)) {
          if (ptid < 32)
            load_kv_tma(p, c, tile, smem, s, ptid, &bars->k_full[s], &bars->v_land[s]);
          else
            nv::mbar_arrive(&bars->k_full[s]);
          slots |= 1u << s;
        } else {
          load_kv(p, c, tile, smem, s);
          slots &= ~(1u << s);
        }
        nv::cp_async_commit();  // (empty for a TMA tile: the groups stay one per ring tile)
        FP8ATTN_TRACE(kTraceProducerCopied);
        ++g;
      }
      if (Policy::kQBuffers == 1 && t1 - t0 <= kSlots) load_item_q(p, c, smem, bars);
      FP8ATTN_TRACE(kTraceProducerIssued);
    }
  };

  // ---- consumer --------------------------------------------------------------------------------
  using Tile = typename Policy::Tile;
  using PQuant = typename Policy::PQuant;

#if FP8ATTN_NV_WGMMA
  // One KV tile for the thread's two rows: s (the S accumulator) -> P8 A fragments pa and the
  // online-softmax update of st.m; alpha = the factor acc and l must be rescaled by before this
  // tile's P.V is added. Element 4j + i: row slot i >> 1, key 8j + 2t + (i & 1).
  FP8ATTN_DEVICE static void softmax(float (&s)[kSElems], int tile, bool need_mask,
                                     const RowKeys<Problem::kHasMask> (&keys)[2], const LogitsTransform logits[2],
                                     const PQuant& pq, int t, FwdState<Policy>& st, float alpha[2],
                                     uint32_t (&pa)[kPWords]) {
    constexpr float kNegInf = -INFINITY;
    // Without softcap the logit scale is folded into the exponent's FMA (the max commutes with a
    // positive scale); with softcap s is transformed first.
    const bool fold = !logits[0].has_softcap && logits[0].scale_log2 > 0.f && logits[1].scale_log2 > 0.f;
    float sc[2] = {1.f, 1.f};
    if (fold) {
      sc[0] = logits[0].scale_log2;
      sc[1] = logits[1].scale_log2;
    } else {
#pragma unroll
      for (int e = 0; e < kSElems; ++e) s[e] = logits[(e & 3) >> 1](s[e]);
    }
    float mx[2] = {kNegInf, kNegInf};
    if (need_mask) {  // the row's visible keys are [lo, hi) (Mask::visible as an interval)
      // An empty volatile asm keeps this a branch: otherwise the compares and selects are
      // if-converted and run on every tile (~100 instructions per warp), masked or not.
      asm volatile("" ::: "memory");
#pragma unroll
      for (int e = 0; e < kSElems; ++e) {
        const int ri = (e & 3) >> 1;
        const int32_t key = tile * kBN + 8 * (e >> 2) + 2 * t + (e & 1);
        s[e] = keys[ri].contains(key) ? s[e] : kNegInf;
      }
    }
#pragma unroll
    for (int e = 0; e < kSElems; ++e) mx[(e & 3) >> 1] = max_nan(mx[(e & 3) >> 1], s[e]);
    // 1 / p_scale enters the exponent: one FMA per element instead of an FMA and a multiply.
    const float log2_inv_p_scale = __log2f(pq.inv_p_scale);
    float neg_m[2];
#pragma unroll
    for (int ri = 0; ri < 2; ++ri) {
      const RowUpdate u = softmax_update(st.m[ri], Tile::row_max(mx[ri]) * sc[ri], nv::Exp2Approx{});
      alpha[ri] = u.alpha;
      neg_m[ri] = log2_inv_p_scale - u.offset;
      st.m[ri] = u.m;
    }
    // A register r of 32-key step kk: row slot r & 1, S blocks j = 4kk + 2(r >> 1) and j + 1.
#pragma unroll
    for (int w = 0; w < kPWords; ++w) {
      const int kk = w >> 2, r = w & 3, ri = r & 1, j = 4 * kk + 2 * (r >> 1);
      const float pin[4] = {nv::exp2_approx(fmaf(s[4 * j + 2 * ri], sc[ri], neg_m[ri])),
                            nv::exp2_approx(fmaf(s[4 * j + 2 * ri + 1], sc[ri], neg_m[ri])),
                            nv::exp2_approx(fmaf(s[4 * (j + 1) + 2 * ri], sc[ri], neg_m[ri])),
                            nv::exp2_approx(fmaf(s[4 * (j + 1) + 2 * ri + 1], sc[ri], neg_m[ri]))};
      pa[w] = pq.quantize4_scaled(pin);
    }
  }

  // acc, l *= alpha, skipped when it is exactly 1 for the whole warp (the row maxima settled).
  FP8ATTN_DEVICE static void rescale(const float alpha[2], FwdState<Policy>& st) {
    if (!__any_sync(0xffffffffu, needs_rescale(alpha[0]) || needs_rescale(alpha[1]))) return;
#pragma unroll
    for (int n = 0; n < Policy::kNTilesO; ++n) {
      st.acc[n][0] *= alpha[0];
      st.acc[n][1] *= alpha[0];
      st.acc[n][2] *= alpha[1];
      st.acc[n][3] *= alpha[1];
    }
    st.l[0] *= alpha[0];
    st.l[1] *= alpha[1];
  }

  struct Consumer {
    int wg;      // consumer warpgroup: rows 64 * wg .. of the block
    int g = 0;   // ring tiles consumed so far (all items)
    int qn = 0;  // work items started so far
    int qs = 0;  // the current item's Q buffer

    // wgmma descriptors of slot 0 / k step 0; a descriptor's low bits are the start address / 16,
    // so the other slots and k steps are constant offsets (within a 256 KiB shared window).
    uint64_t dk0, dvt0, dones;
    FP8ATTN_DEVICE Consumer(int w, uint8_t* smem)
        : wg(w),
          dk0(QK::desc(smem + Policy::kOffK, Policy::kKRows, 0, 0)),
          dvt0(VT::desc(vt_buf(smem, 0), kD, 0, 0)),
          dones(VT::desc(smem + Policy::kOffOnes, 8, 0, 0)) {
      // Opaque to the compiler: otherwise ptxas rematerializes them from the shared window's base
      // (S2UR SR_CgaCtaId, address masks, 64-bit adds) in every step of the loop.
      asm volatile("" : "+l"(dk0), "+l"(dvt0), "+l"(dones));
    }
    // Byte offset of k step ks (32 bytes of d) in a Q or K tile of `rows` rows.
    FP8ATTN_HD static constexpr int qk_step(int rows, int ks) {
      return (32 * ks / Policy::kSw) * rows * Policy::kSw + (32 * ks) % Policy::kSw;
    }

    // Issues S = Q.K^T of the step in slots `slot` .. (asynchronous: one commit group).
    FP8ATTN_DEVICE void issue_qk(float (&s)[kSElems], uint64_t dq, int slot) const {
      const uint64_t dk = dk0 + (k_offset(slot, 0, 0) >> 4);
      // The first k step overwrites s without reading it, so the softmax may rewrite s in place
      // while other wgmmas are in flight.
      nv::Wgmma<kBN>::ss_first(s, dq, dk);
#pragma unroll
      for (int ks = 1; ks < kD / 32; ++ks)
        nv::Wgmma<kBN>::ss(s, dq + (qk_step(Policy::kBlockM, ks) >> 4), dk + (qk_step(Policy::kKRows, ks) >> 4), 1);
      nv::wgmma_commit();
    }
    // B of P.V's 32-key step kk of the step in slots `slot` ..: a Vt tile's descriptor.
    FP8ATTN_DEVICE uint64_t vt_desc(int slot, int kk) const {
      constexpr int kSteps = kRN / 32;  // k32 steps per ring tile
      return dvt0 + (((slot + kk / kSteps) * Policy::kVtBytes) >> 4) + (VT::offset(kD, 0, 32 * (kk % kSteps)) >> 4);
    }
    // The step's ring slots s .. s + kSlots - 1 (a step never wraps: kStages % kSlots == 0).
    FP8ATTN_DEVICE static void wait_slots(uint64_t* bar, int s, uint32_t phase) {
      if constexpr (kSlots == 1)
        nv::mbar_wait(&bar[s], phase);
      else
        nv::mbar_wait2(&bar[s], phase, &bar[s + 1], phase);
    }
    // k_full of the next step and v_full of this one, all tested before one branch where they are two.
    FP8ATTN_DEVICE static void wait_step(Barriers* bars, int nslot, uint32_t nphase, int slot, uint32_t phase) {
      if constexpr (kSlots == 1) {
        nv::mbar_wait2(&bars->k_full[nslot], nphase, &bars->v_full[slot], phase);
      } else {
        wait_slots(bars->k_full, nslot, nphase);
        wait_slots(bars->v_full, slot, phase);
      }
    }
    FP8ATTN_DEVICE static void release(Barriers* bars, int slot) {
#pragma unroll
      for (int i = 0; i < kSlots; ++i) nv::mbar_arrive(&bars->empty[slot + i]);
    }
    // Issues acc += P8.Vt and lt = P8.1 (this tile's row sums, promoted to fp32 by the caller:
    // the FP8 tensor cores' sums are not fp32-exact, so l must not accumulate there over all tiles).
    // No wgmma.fence of its own: in the loop it follows issue_qk under the caller's one fence, which
    // orders every register write of the iteration (acc rescale, P8); a second fence between the two
    // groups makes ptxas serialize all wgmmas (C7513), which undoes the overlap with the softmax.
    // (32-key step kk reads bytes 32kk.. of Vt's rows: 64-byte column block kk / 2; the ones tile
    // is 64 columns wide and all ones, so every odd step reads its second half.)
    FP8ATTN_DEVICE void issue_pv(float (&acc)[kD / 2], float (&lt)[4], const uint32_t (&pa)[kPWords], int slot) const {
#pragma unroll
      for (int kk = 0; kk < kBN / 32; ++kk) {
        nv::Wgmma<kD>::rs(acc, pa + 4 * kk, vt_desc(slot, kk), 1);
        if (kk == 0)
          nv::Wgmma<8>::rs_first(lt, pa, dones);
        else
          nv::Wgmma<8>::rs(lt, pa + 4 * kk, dones + 2 * (kk & 1), 1);
      }
      nv::wgmma_commit();
    }

    // The item's KV loop: S of tile i+1 and P.V of tile i are issued together; acc and l are
    // rescaled once P.V of tile i has landed. ptxas places the wait 0 ahead of the softmax (nothing
    // depends on it), so the softmax overlaps the other consumer warpgroup's products, not this one's
    // (docs/hopper-pipeline.md, "Why the code is as it is").
    FP8ATTN_DEVICE void item(const FwdParams& p, const BlockCtx& c, const ThreadRows<Tile>& tr, const PQuant& pq,
                             uint8_t* smem, Barriers* bars, FwdState<Policy>& st) {
      const int t = threadIdx.x % 4;
      RowKeys<Problem::kHasMask> keys[2];
      tr.keys(c, keys);
      const auto need_mask = [&](int tile) { return kv_tile_needs_mask<Problem, kBN>(c, tile); };
      qs = qn & 1;
      const uint64_t dq = QK::desc(q_buf(smem, qs), Policy::kBlockM, 64 * wg, 0);
      float s[kSElems], lt[4];
      float(&acc)[kD / 2] = reinterpret_cast<float(&)[kD / 2]>(st.acc);
      FP8ATTN_TRACE(kTraceConsumerItem);
      nv::mbar_wait(&bars->q_full[qs], (qn >> 1) & 1);
      FP8ATTN_TRACE(kTraceConsumerQ);
      ++qn;
      if (!Policy::kOverlap) {
        // One step after the other (the consumer warpgroups overlap each other's): S, softmax, P.V.
#pragma unroll 1
        for (int tile = c.tile_begin; tile < c.tile_end; ++tile) {
          uint32_t pa[kPWords];
          float alpha[2];
          const int slot = g % kStages;
          const uint32_t phase = (g / kStages) & 1;
          wait_slots(bars->k_full, slot, phase);
          nv::fence_operands(acc);
          nv::wgmma_fence();
          issue_qk(s, dq, slot);
          nv::wgmma_wait<0>();
          softmax(s, tile, need_mask(tile), keys, tr.logits, pq, t, st, alpha, pa);
          rescale(alpha, st);
          wait_slots(bars->v_full, slot, phase);
          nv::fence_operands(acc);
          nv::fence_operands(pa);
          nv::wgmma_fence();
          issue_pv(acc, lt, pa, slot);
          nv::wgmma_wait<0>();
          nv::fence_operands(acc);
          nv::fence_operands(pa);
          release(bars, slot);
          st.l[0] += lt[0];
          st.l[1] += lt[2];
          g += kSlots;
        }
      } else if (c.tile_begin < c.tile_end) {
        uint32_t pa[kPWords];
        float alpha[2];
        int slot = g % kStages;
        uint32_t phase = (g / kStages) & 1;
        wait_slots(bars->k_full, slot, phase);
        FP8ATTN_TRACE(kTraceConsumerFirstK);
        nv::wgmma_fence();
        issue_qk(s, dq, slot);
        nv::wgmma_wait<0>();
        softmax(s, c.tile_begin, need_mask(c.tile_begin), keys, tr.logits, pq, t, st, alpha, pa);
        // (acc and l are 0: no rescale before the first tile)
#pragma unroll 1
        for (int tile = c.tile_begin + 1; tile < c.tile_end; ++tile) {
          const int nslot = (g + kSlots) % kStages;
          const uint32_t nphase = ((g + kSlots) / kStages) & 1;
          // Both waits come before the fence: a branch (the mbarrier spin) inside the stage
          // between wgmma.fence and the last wgmma makes ptxas serialize every wgmma (C7519/C7513).
          FP8ATTN_TRACE(kTraceConsumerStepWait);
          wait_step(bars, nslot, nphase, slot, phase);
          FP8ATTN_TRACE(kTraceConsumerStepGo);
          nv::fence_operands(acc);
          nv::fence_operands(pa);
          nv::wgmma_fence();
          issue_qk(s, dq, nslot);
          issue_pv(acc, lt, pa, slot);
          nv::fence_operands(acc);
          nv::wgmma_wait<1>();  // S of the next tile (P.V of this one stays in flight)
          uint32_t pn[kPWords];
          softmax(s, tile, need_mask(tile), keys, tr.logits, pq, t, st, alpha, pn);
          // The softmax's results pinned before the wait (in NVVM; ptxas still schedules the wait
          // first, see above).
          nv::fence_operands(pn);
          nv::fence_operands(alpha);
          nv::wgmma_wait<0>();
          FP8ATTN_TRACE(kTraceConsumerStepDone);
          nv::fence_operands(pa);  // read by P.V until here: pn must not share its registers
          release(bars, slot);
          st.l[0] += lt[0];
          st.l[1] += lt[2];
          rescale(alpha, st);
#pragma unroll
          for (int w = 0; w < kPWords; ++w) pa[w] = pn[w];
          g += kSlots;
          slot = nslot;
          phase = nphase;
        }
        wait_slots(bars->v_full, slot, phase);
        nv::fence_operands(acc);
        nv::fence_operands(pa);
        nv::wgmma_fence();  // acc and P8 were last written by the CUDA cores
        issue_pv(acc, lt, pa, slot);
        nv::wgmma_wait<0>();
        release(bars, slot);
        st.l[0] += lt[0];
        st.l[1] += lt[2];
        g += kSlots;
      }
      FP8ATTN_TRACE(kTraceConsumerLoopDone);
      st.l[0] = quad_share(st.l[0]);  // (every lane of a quad holds the whole row sum)
      st.l[1] = quad_share(st.l[1]);
    }
    // After the epilogue, which may stage the output in the warpgroup's rows of the Q buffer.
    FP8ATTN_DEVICE void release_q(Barriers* bars) const { nv::mbar_arrive(&bars->q_empty[qs]); }
    // The next work item's index, as the producer published it (-1: none left); item() then waits
    // for its Q.
    FP8ATTN_DEVICE int32_t next_item(Barriers* bars) const {
      const int i = qn & 1;
      nv::mbar_wait(&bars->item_full[i], (qn >> 1) & 1);
      return *const_cast<const volatile int32_t*>(&bars->item[i]);
    }
  };
#endif  // FP8ATTN_NV_WGMMA
};

}  // namespace fp8attn
