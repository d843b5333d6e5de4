// The CPU driver: splits a call into work items (query rows of one sequence and kv head that share
// a pass over its keys), runs them in parallel on the kernel of the selected instruction set
// (isa.h), and writes the outputs. Each lane's result depends only on its own inputs, never on how
// lanes are grouped into items or items onto threads, so the output is the same for any thread count.
#include "cpu/attention_cpu.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>
#include <vector>

#include "cpu/isa.h"
#include "cpu/item.h"
#include "kernels/mask.h"
#include "kernels/seqinfo.h"
#include "kernels/variant.h"

namespace fp8attn::cpu {
namespace {

constexpr int32_t kTargetLanes = 128;  // rows per item: enough to amortize packing each K/V tile
constexpr int32_t kFewLanes = 16;      // below this many lanes per kv head, an item takes several kv heads

struct WorkItem {
  int32_t b, hkv, nkv;  // kv heads [hkv, hkv + nkv) of sequence b
  int32_t h0, heads;    // q heads [h0, h0 + heads) of each kv head's group (offsets in the group)
  int32_t row0, rows;   // q rows [row0, row0 + rows)
  int64_t cost;
};

float scale_at(const float* s, int32_t stride, int32_t head) { return s ? s[head * stride] : 1.f; }

// A per-thread buffer reused across calls (no allocation per call once it has grown).
void* thread_buffer(size_t bytes) {
  static thread_local std::vector<unsigned char> buf;
  if (buf.size() < bytes + 64) buf.resize(bytes + 64);
  return reinterpret_cast<void*>((reinterpret_cast<uintptr_t>(buf.data()) + 63) & ~uintptr_t{63});
}

size_t round64(size_t n) { return (n + 63) & ~size_t{63}; }

template <Fp8Kind K>
class Forward {
 public:
  Forward(const FwdParams& p, Kernel kernel)
      : p_(p), kernel_(kernel), tile_(p.kv_tile > 0 ? p.kv_tile : kDefaultKvTile),
        group_(p.num_heads / p.num_heads_k) {}

  void run() {
    plan();
    if (work_.empty()) return;
    std::atomic<size_t> next{0};
    const int64_t threads = std::min<int64_t>(at::get_num_threads(), static_cast<int64_t>(work_.size()));
    // Items go to threads as they free up, longest first (causal and varlen items differ in cost).
    at::parallel_for(0, threads, 1, [&](int64_t, int64_t) {
      for (size_t i = next.fetch_add(1); i < work_.size(); i = next.fetch_add(1)) run_item(work_[i]);
    });
  }

 private:
  // Items of about kTargetLanes lanes (all q heads of a kv head, then as many q rows as fit), with the
  // heads of a group split when there would be too few items to keep every thread busy.
  void plan() {
    std::vector<int32_t> q_lens(p_.batch);
    for (int32_t b = 0; b < p_.batch; ++b) q_lens[b] = SeqInfo::make(p_, b).q_len;
    auto items = [&](int32_t heads) {
      const int32_t rows = std::max(1, kTargetLanes / heads);
      int64_t n = 0;
      for (const int32_t q : q_lens) n += (q + rows - 1) / rows;
      return n * p_.num_heads_k * (group_ / heads);
    };
    const int64_t threads = at::get_num_threads();
    int32_t heads = group_;
    while (heads % 2 == 0 && items(heads) < 4 * threads) heads /= 2;
    const int32_t rows = std::max(1, kTargetLanes / heads);
    // Decode-like calls (a few lanes per kv head): the kv heads of a sequence in one item, as many as keep
    // two items per thread, so that a pass reads whole cache rows (all heads of a key are adjacent).
    int32_t nkv = 1;
    int32_t max_q = 0;
    for (const int32_t q : q_lens) max_q = std::max(max_q, q);
    if (heads == group_ && std::min(rows, max_q) * heads < kFewLanes) {
      nkv = p_.num_heads_k;
      while (nkv % 2 == 0 && (items(heads) / p_.num_heads_k * (p_.num_heads_k / nkv) < 2 * threads ||
                              std::min(rows, max_q) * heads * nkv > kTargetLanes))
        nkv /= 2;
    }
    // Runs: the row blocks of one (sequence, q head group), costliest first; consecutive items of a
    // run read the same K/V (cache reuse). Runs in order of decreasing cost (the short items come last).
    struct Run {
      size_t begin, end;
      int64_t cost;
    };
    std::vector<Run> runs;
    std::vector<WorkItem> items_of_runs;
    for (int32_t b = 0; b < p_.batch; ++b) {
      const SeqInfo s = SeqInfo::make(p_, b);
      if (s.q_len == 0) continue;
      const Mask mask = Mask::make(p_.window_left, p_.window_right, p_.is_causal, s.q_len, s.k_len);
      std::vector<WorkItem> blocks;
      int64_t total = 0;
      for (int32_t r0 = 0; r0 < s.q_len; r0 += rows) {
        const int32_t r1 = std::min(r0 + rows, s.q_len);
        int64_t keys = 0;
        for (int32_t r = r0; r < r1; ++r) {
          int32_t lo, hi;
          mask.key_range(r, r + 1, &lo, &hi);
          keys += hi - lo;
        }
        blocks.push_back({b, 0, nkv, 0, heads, r0, r1 - r0, (keys + 64) * heads * nkv});
        total += blocks.back().cost;
      }
      std::stable_sort(blocks.begin(), blocks.end(), [](const WorkItem& x, const WorkItem& y) { return x.cost > y.cost; });
      for (int32_t hkv = 0; hkv < p_.num_heads_k; hkv += nkv)
        for (int32_t h0 = 0; h0 < group_; h0 += heads) {
          runs.push_back({items_of_runs.size(), items_of_runs.size() + blocks.size(), total});
          for (WorkItem w : blocks) {
            w.hkv = hkv;
            w.h0 = h0;
            items_of_runs.push_back(w);
          }
        }
      max_lanes_ = std::max(max_lanes_, std::min(rows, s.q_len) * heads * nkv);
      max_tile_ = std::max(max_tile_, tile_of(s));
    }
    std::stable_sort(runs.begin(), runs.end(), [](const Run& x, const Run& y) { return x.cost > y.cost; });
    for (const Run& r : runs) work_.insert(work_.end(), items_of_runs.begin() + r.begin, items_of_runs.begin() + r.end);
  }

  // A tile longer than the sequence is the whole sequence: one online-softmax step either way.
  int32_t tile_of(const SeqInfo& s) const { return tile_ >= s.k_len ? std::max(1, s.k_len) : tile_; }

  void run_item(const WorkItem& w) const {
    const int D = p_.head_dim;
    const int per_kv = w.rows * w.heads, n = per_kv * w.nkv;
    const SeqInfo s = SeqInfo::make(p_, w.b);
    // One buffer per thread: the kernel's scratch, then the lanes' lo, hi, logit scale, inverse q and v
    // descales, sinks (4-byte) and q, out, lse offsets (8-byte).
    const size_t scratch = round64(kernel_.scratch_bytes(D, max_tile_, max_lanes_));
    const size_t lane4 = round64(static_cast<size_t>(max_lanes_) * 4), lane8 = round64(static_cast<size_t>(max_lanes_) * 8);
    unsigned char* buf = static_cast<unsigned char*>(thread_buffer(scratch + 6 * lane4 + 3 * lane8));
    int32_t* lo = reinterpret_cast<int32_t*>(buf + scratch);
    int32_t* hi = reinterpret_cast<int32_t*>(buf + scratch + lane4);
    float* scale = reinterpret_cast<float*>(buf + scratch + 2 * lane4);
    float* inv_q = reinterpret_cast<float*>(buf + scratch + 3 * lane4);
    float* v_descale = reinterpret_cast<float*>(buf + scratch + 4 * lane4);
    float* sink = reinterpret_cast<float*>(buf + scratch + 5 * lane4);
    int64_t* q_off = reinterpret_cast<int64_t*>(buf + scratch + 6 * lane4);
    int64_t* o_off = q_off + lane8 / 8;
    int64_t* lse_off = o_off + lane8 / 8;

    // Lanes: kv head major, then q row, then q head.
    const Mask mask = Mask::make(p_.window_left, p_.window_right, p_.is_causal, s.q_len, s.k_len);
    int32_t kb = s.k_len, ke = 0;
    for (int i = 0; i < n; ++i) {
      const int32_t hkv = w.hkv + i / per_kv, row = w.row0 + i % per_kv / w.heads;
      const int32_t h = hkv * group_ + w.h0 + i % w.heads;
      mask.key_range(row, row + 1, &lo[i], &hi[i]);
      if (lo[i] < hi[i]) kb = std::min(kb, lo[i]), ke = std::max(ke, hi[i]);
      const float q_descale = scale_at(p_.q_descale, p_.q_descale_head_stride, h);
      const float k_descale = scale_at(p_.k_descale, p_.k_descale_head_stride, hkv);
      v_descale[i] = scale_at(p_.v_descale, p_.v_descale_head_stride, hkv);
      sink[i] = p_.sinks ? p_.sinks[h] * kLog2e : 0.f;
      const LogitsTransform t = LogitsTransform::make(p_.softmax_scale, q_descale * k_descale, p_.softcap);
      scale[i] = t.has_softcap ? t.inv_softcap : t.scale_log2;
      inv_q[i] = 1.f / q_descale;  // a 16-bit q is multiplied by the reciprocal, as the GPU does
      q_off[i] = s.q_offset + static_cast<int64_t>(row) * p_.q_row_stride + static_cast<int64_t>(h) * p_.q_head_stride;
      o_off[i] = s.o_offset + static_cast<int64_t>(row) * p_.o_row_stride + static_cast<int64_t>(h) * p_.o_head_stride;
      lse_off[i] = s.lse_offset + static_cast<int64_t>(h) * p_.lse_head_stride + static_cast<int64_t>(row) * p_.lse_row_stride;
    }
    const LogitsTransform t = LogitsTransform::make(p_.softmax_scale, 1.f, p_.softcap);
    const float p_scale = p_.p_scale_ptr ? *p_.p_scale_ptr : p_.p_scale_default;
    ItemArgs a;
    a.head_dim = D;
    a.tile = tile_of(s);
    a.lanes = n;
    a.lo = lo;
    a.hi = hi;
    a.key_begin = kb;
    a.key_end = ke;
    a.q = p_.q;
    a.q_type = p_.q_type;
    a.q_off = q_off;
    a.inv_q_descale = inv_q;
    a.logit_scale = scale;
    a.softcap_log2 = t.has_softcap ? t.softcap_log2 : 0.f;
    a.inv_p_scale = 1.f / p_scale;
    a.kind = K;
    a.keys = key_source(s, w.hkv);
    a.groups = w.nkv;
    a.k_group_stride = p_.k_head_stride;
    a.v_group_stride = p_.v_head_stride;
    a.out = p_.out;
    a.out_type = p_.out_type;
    a.o_off = o_off;
    a.v_descale = v_descale;
    a.inv_out_scale = p_.out_scale ? 1.f / *p_.out_scale : 1.f;
    a.p_scale = p_scale;
    a.sink = p_.sinks ? sink : nullptr;
    a.lse = p_.lse;
    a.lse_off = lse_off;
    a.scratch = buf;
    kernel_.run(a);
  }

  KeySource key_source(const SeqInfo& s, int32_t hkv) const {
    KeySource k;
    const int64_t k_head = static_cast<int64_t>(hkv) * p_.k_head_stride, v_head = static_cast<int64_t>(hkv) * p_.v_head_stride;
    k.k = static_cast<const uint8_t*>(p_.k) + (s.blocks ? 0 : s.k_offset) + k_head;
    k.v = static_cast<const uint8_t*>(p_.v) + (s.blocks ? 0 : s.v_offset) + v_head;
    k.k_row = p_.k_row_stride;
    k.v_row = p_.v_row_stride;
    if (s.blocks) {
      k.blocks = s.blocks;
      k.k_block = p_.k_batch_stride;
      k.v_block = p_.v_batch_stride;
      k.page = p_.page_block_size;
      k.num_blocks = p_.num_cache_blocks;
    }
    return k;
  }

  const FwdParams& p_;
  const Kernel kernel_;
  const int32_t tile_;
  const int32_t group_;
  std::vector<WorkItem> work_;
  int32_t max_lanes_ = 1, max_tile_ = 1;
};

}  // namespace

void run_forward(const FwdParams& p) {
  const Isa isa = selected_isa();
  if (p.fp8_kind == Fp8Kind::E4M3FN) {
    Forward<Fp8Kind::E4M3FN>(p, kernel_of(isa)).run();
  } else {
    Forward<Fp8Kind::E4M3FNUZ>(p, kernel_of(isa)).run();
  }
  count_call(isa);
}

}  // namespace fp8attn::cpu
