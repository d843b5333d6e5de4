#include "overlap.h"

#include <ATen/MemoryOverlap.h>

#include <algorithm>
#include <cstdint>
#include <utility>

namespace fp8attn {
namespace {

// The bytes [begin, end) a tensor's elements lie in (non-negative strides: torch has no others).
std::pair<uintptr_t, uintptr_t> byte_range(const at::Tensor& t) {
  int64_t last = 0;
  for (int64_t d = 0; d < t.dim(); ++d) last += (t.size(d) - 1) * t.stride(d);
  const auto begin = reinterpret_cast<uintptr_t>(t.data_ptr());
  return {begin, begin + static_cast<uintptr_t>((last + 1) * t.element_size())};
}

// Whether delta = sum_d i_d * strides[d] for some |i_d| < sizes[d], dims k.. (strides descending): two
// views of one layout, delta elements apart, then share an element. Undecided (true) past a search budget.
bool reachable(int64_t delta, const std::vector<std::pair<int64_t, int64_t>>& dims, size_t k, int* budget) {
  if (k == dims.size()) return delta == 0;
  if (--*budget < 0) return true;
  int64_t rest = 0;  // the most the smaller dims can add
  for (size_t j = k + 1; j < dims.size(); ++j) rest += (dims[j].second - 1) * dims[j].first;
  const auto [stride, size] = dims[k];
  const int64_t lo = std::max<int64_t>(-(size - 1), -((rest - delta) / stride) - 1);
  const int64_t hi = std::min<int64_t>(size - 1, (delta + rest) / stride + 1);
  for (int64_t i = lo; i <= hi; ++i)
    if (reachable(delta - i * stride, dims, k + 1, budget)) return true;
  return false;
}

// Strided views of one storage, which ATen's overlap status leaves undecided: exact for two views of the
// same layout (sizes, strides, dtype: e.g. the K and V halves of vLLM's interleaved cache), else whether
// their byte ranges meet.
bool views_overlap(const at::Tensor& a, const at::Tensor& b) {
  const auto [b0, e0] = byte_range(a);
  const auto [b1, e1] = byte_range(b);
  if (!(b0 < e1 && b1 < e0)) return false;
  const int64_t item = a.element_size();
  const int64_t bytes = static_cast<int64_t>(b1) - static_cast<int64_t>(b0);
  if (a.sizes() != b.sizes() || a.strides() != b.strides() || item != b.element_size() || bytes % item != 0)
    return true;
  std::vector<std::pair<int64_t, int64_t>> dims;  // (stride, size) of the dims that move
  for (int64_t d = 0; d < a.dim(); ++d)
    if (a.size(d) > 1) dims.emplace_back(a.stride(d), a.size(d));
  std::sort(dims.begin(), dims.end(), [](const auto& x, const auto& y) { return x.first > y.first; });
  for (const auto& [stride, size] : dims)
    if (stride == 0) return true;  // (internal overlap, refused before)
  int budget = 4096;
  return reachable(bytes / item, dims, 0, &budget);
}
}  // namespace

void check_no_overlap(const at::Tensor& dst, const char* dst_name, const std::vector<NamedTensor>& inputs) {
  TORCH_CHECK_VALUE(at::has_internal_overlap(dst) != at::MemOverlap::Yes, dst_name,
                    " must not overlap itself (an expanded or stride-0 tensor): every element it holds is written");
  if (dst.numel() == 0) return;
  for (const auto& [name, t] : inputs) {
    if (t == &dst || t->numel() == 0) continue;
    auto s = at::get_overlap_status(dst, *t);
    if (s == at::MemOverlapStatus::TooHard && dst.storage().is_alias_of(t->storage()) && views_overlap(dst, *t))
      s = at::MemOverlapStatus::Partial;
    TORCH_CHECK_VALUE(s != at::MemOverlapStatus::Full && s != at::MemOverlapStatus::Partial, dst_name,
                      " must not share memory with ", name, " (", dst_name, " is written, ", name, " read)");
  }
}

}  // namespace fp8attn
