#include "fwd_params.h"

#include <algorithm>

#include "fwd_checks.h"

namespace fp8attn {
namespace {

// Strides of a [B, S, H, D] (batch = dim 0; a cache's block) or [T, H, D] (no batch) tensor.
void set_strides(const at::Tensor& t, int64_t* batch, int64_t* row, int64_t* head) {
  const int64_t o = t.dim() - 3;
  *batch = o ? t.stride(0) : 0;
  *row = t.stride(o);
  *head = t.stride(o + 1);
}

void fill_params(const FwdArgs& a, const FwdLayout& L, FwdParams& p) {
  const at::Tensor &q = a.q, &k = a.k, &v = a.v, &out = a.out;
  p.q = q.data_ptr();
  p.k = k.data_ptr();
  p.v = v.data_ptr();
  p.out = out.data_ptr();
  set_strides(q, &p.q_batch_stride, &p.q_row_stride, &p.q_head_stride);
  set_strides(out, &p.o_batch_stride, &p.o_row_stride, &p.o_head_stride);
  set_strides(k, &p.k_batch_stride, &p.k_row_stride, &p.k_head_stride);
  set_strides(v, &p.v_batch_stride, &p.v_row_stride, &p.v_head_stride);
  p.cu_seqlens_q = L.varlen_q ? a.cu_seqlens_q->data_ptr<int32_t>() : nullptr;
  p.cu_seqlens_k = a.cu_seqlens_k ? a.cu_seqlens_k->data_ptr<int32_t>() : nullptr;
  p.seqused_k = a.seqused_k ? a.seqused_k->data_ptr<int32_t>() : nullptr;
  if (L.paged) {
    p.block_table = a.block_table->data_ptr<int32_t>();
    p.block_table_batch_stride = a.block_table->stride(0);
    p.block_table_cols = static_cast<int32_t>(a.block_table->size(1));
    p.page_block_size = static_cast<int32_t>(k.size(1));
    p.num_cache_blocks = static_cast<int32_t>(k.size(0));
  }
  p.batch = static_cast<int32_t>(L.B);
  p.num_heads = static_cast<int32_t>(L.H);
  p.num_heads_k = static_cast<int32_t>(L.Hkv);
  p.head_dim = static_cast<int32_t>(L.D);
  p.total_q = static_cast<int32_t>(L.T);
  if (L.varlen_k) p.total_k = static_cast<int32_t>(k.size(0));
  // Exact maxima where the lengths are known on the host; otherwise the caller's bounds.
  p.seqlen_q = static_cast<int32_t>(L.varlen_q ? (L.max_q_len >= 0 ? L.max_q_len : a.max_seqlen_q) : q.size(1));
  if (!L.paged && !L.varlen_k) {
    p.seqlen_k = static_cast<int32_t>(k.size(1));
  } else if (!L.k_lens.empty()) {
    p.seqlen_k = static_cast<int32_t>(*std::max_element(L.k_lens.begin(), L.k_lens.end()));
  } else {
    p.seqlen_k = static_cast<int32_t>(a.max_seqlen_k);
  }

  p.fp8_kind = L.fp8_kind;
  p.q_type = L.q_type;
  p.out_type = L.out_type;
  p.q_descale = a.q_descale ? a.q_descale->data_ptr<float>() : nullptr;
  p.k_descale = a.k_descale ? a.k_descale->data_ptr<float>() : nullptr;
  p.v_descale = a.v_descale ? a.v_descale->data_ptr<float>() : nullptr;
  p.q_descale_head_stride = L.q_descale_head_stride;
  p.k_descale_head_stride = L.k_descale_head_stride;
  p.v_descale_head_stride = L.v_descale_head_stride;
  p.p_scale_ptr = a.p_scale ? a.p_scale->data_ptr<float>() : nullptr;
  p.out_scale = a.out_scale ? a.out_scale->data_ptr<float>() : nullptr;
  p.sinks = a.sinks ? a.sinks->data_ptr<float>() : nullptr;
  p.softmax_scale = static_cast<float>(a.softmax_scale);
  p.softcap = static_cast<float>(a.softcap);
  p.is_causal = a.causal;
  p.window_left = static_cast<int32_t>(a.window_left);
  p.window_right = static_cast<int32_t>(a.causal ? 0 : a.window_right);
  p.kv_tile = static_cast<int32_t>(a.kv_tile);
}

at::Tensor make_lse(const FwdArgs& a, const FwdLayout& L, FwdParams& p) {
  const auto opts = a.q.options().dtype(at::kFloat);
  if (!a.return_softmax_lse) return at::empty({0}, opts);
  at::Tensor lse = L.varlen_q ? at::empty({L.H, L.T}, opts) : at::empty({L.B, L.H, a.q.size(1)}, opts);
  p.lse = lse.data_ptr<float>();
  if (L.varlen_q) {
    p.lse_head_stride = lse.stride(0);
    p.lse_row_stride = lse.stride(1);
  } else {
    p.lse_batch_stride = lse.stride(0);
    p.lse_head_stride = lse.stride(1);
    p.lse_row_stride = lse.stride(2);
  }
  return lse;
}

}  // namespace

FwdPlan make_fwd_params(const FwdArgs& a) {
  const FwdLayout L = check_fwd_args(a);
  FwdPlan plan;
  FwdParams& p = plan.params;
  fill_params(a, L, p);
  plan.lse = make_lse(a, L, p);
  plan.empty = p.batch == 0 || p.num_heads == 0 || p.seqlen_q == 0 || (L.varlen_q && L.T == 0);
  return plan;
}

}  // namespace fp8attn
