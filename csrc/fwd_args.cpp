#include "fwd_args.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "kernels/numeric/fp8.h"

namespace fp8attn {
namespace {

constexpr int64_t kHeadDims[] = {64, 80, 96, 112, 128, 192, 256};

std::string head_dims_str() {
  std::string s;
  for (int64_t d : kHeadDims) s += (s.empty() ? "" : ", ") + std::to_string(d);
  return s;
}

void check_device(const at::Tensor& t, const at::Tensor& q, const char* name) {
  TORCH_CHECK_VALUE(t.device() == q.device(), name, " must be on the same device as q (", q.device(),
                    "), got ", t.device());
}

void check_index(const std::optional<at::Tensor>& t, const at::Tensor& q, const char* name, int64_t rank) {
  if (!t) return;
  TORCH_CHECK_TYPE(t->scalar_type() == at::kInt, name, " must be int32, got ", t->scalar_type());
  TORCH_CHECK_VALUE(t->dim() == rank, name, " must have ", rank, " dimension(s), got shape ", t->sizes());
  TORCH_CHECK_VALUE(t->stride(-1) == 1 || t->size(-1) <= 1, name, " must be contiguous in its last dimension");
  check_device(*t, q, name);
}

// Returns the per-head stride (0: per tensor, 1: per head) of a scale tensor.
int32_t check_scale(const std::optional<at::Tensor>& t, const at::Tensor& q, const char* name,
                    int64_t heads) {
  if (!t) return 0;
  TORCH_CHECK_TYPE(t->scalar_type() == at::kFloat, name, " must be a float32 tensor, got ", t->scalar_type());
  const int64_t n = t->numel();
  TORCH_CHECK_VALUE(n == 1 || (heads > 1 && n == heads), name, " must have 1 element (per tensor)",
                    heads > 1 ? " or " + std::to_string(heads) + " (per head)" : std::string(), ", got shape ",
                    t->sizes());
  TORCH_CHECK_VALUE(t->is_contiguous(), name, " must be contiguous");
  check_device(*t, q, name);
  if (t->device().is_cpu()) {
    const float* p = t->data_ptr<float>();
    for (int64_t i = 0; i < n; ++i)
      TORCH_CHECK_VALUE(std::isfinite(p[i]) && p[i] > 0.f, name, " must be positive and finite, got ", p[i]);
  }
  return n == 1 ? 0 : 1;
}

void check_cu_seqlens(const at::Tensor& cu, const char* name, int64_t batch, int64_t total, bool exact_total) {
  TORCH_CHECK_VALUE(cu.numel() == batch + 1, name, " must have batch + 1 = ", batch + 1, " elements, got ",
                    cu.numel());
  const at::Tensor c = cu.contiguous();
  const int32_t* p = c.data_ptr<int32_t>();
  TORCH_CHECK_VALUE(p[0] == 0, name, "[0] must be 0, got ", p[0]);
  for (int64_t i = 0; i < batch; ++i)
    TORCH_CHECK_VALUE(p[i + 1] >= p[i], name, " must be non-decreasing, got ", p[i], " then ", p[i + 1],
                      " at index ", i);
  if (total >= 0) {
    TORCH_CHECK_VALUE(exact_total ? p[batch] == total : p[batch] <= total, name, "[-1] = ", p[batch],
                      exact_total ? " must equal the number of rows " : " must not exceed the number of rows ",
                      total);
  }
}

int64_t max_diff(const at::Tensor& cu) {
  const at::Tensor c = cu.contiguous();
  const int32_t* p = c.data_ptr<int32_t>();
  int64_t m = 0;
  for (int64_t i = 0; i + 1 < c.numel(); ++i) m = std::max<int64_t>(m, p[i + 1] - p[i]);
  return m;
}

void check_last_dim_contiguous(const at::Tensor& t, const char* name) {
  TORCH_CHECK_VALUE(t.stride(-1) == 1, name, " must be contiguous in its last (head) dimension, got strides ",
                    t.strides());
}

// Strides of a [B, S, H, D] (batch = dim 0; a cache's block) or [T, H, D] (no batch) tensor.
void set_strides(const at::Tensor& t, int64_t* batch, int64_t* row, int64_t* head) {
  const int64_t o = t.dim() - 3;
  *batch = o ? t.stride(0) : 0;
  *row = t.stride(o);
  *head = t.stride(o + 1);
}

}  // namespace

bool is_supported_head_dim(int64_t d) {
  for (int64_t h : kHeadDims)
    if (h == d) return true;
  return false;
}

bool is_fp8(at::ScalarType t) { return t == at::kFloat8_e4m3fn || t == at::kFloat8_e4m3fnuz; }

Fp8Kind fp8_kind_of(at::ScalarType t, const char* arg) {
  TORCH_CHECK_TYPE(is_fp8(t), arg, " must be float8_e4m3fn or float8_e4m3fnuz, got ", t);
  return t == at::kFloat8_e4m3fn ? Fp8Kind::E4M3FN : Fp8Kind::E4M3FNUZ;
}

FwdPlan make_fwd_params(const FwdArgs& a) {
  const at::Tensor &q = a.q, &k = a.k, &v = a.v, &out = a.out;
  FwdParams p;

  // ---- dtypes
  p.fp8_kind = fp8_kind_of(k.scalar_type(), "k");
  TORCH_CHECK_TYPE(v.scalar_type() == k.scalar_type(), "v must have k's dtype (", k.scalar_type(), "), got ",
                   v.scalar_type());
  const auto qt = q.scalar_type();
  if (is_fp8(qt)) {
    TORCH_CHECK_TYPE(qt == k.scalar_type(), "an FP8 q must have k's dtype (", k.scalar_type(), "), got ", qt);
    p.q_type = ElemType::FP8;
  } else {
    TORCH_CHECK_TYPE(qt == at::kBFloat16 || qt == at::kHalf, "q must be FP8 (k's dtype), bfloat16 or float16, got ",
                     qt);
    p.q_type = qt == at::kBFloat16 ? ElemType::BF16 : ElemType::FP16;
  }
  const bool fp8_out = a.out_scale.has_value();
  if (fp8_out) {
    TORCH_CHECK_TYPE(out.scalar_type() == k.scalar_type(), "out must have k's FP8 dtype (", k.scalar_type(),
                     ") when out_scale is given, got ", out.scalar_type());
    p.out_type = ElemType::FP8;
  } else {
    TORCH_CHECK_TYPE(out.scalar_type() == at::kBFloat16 || out.scalar_type() == at::kHalf,
                     "out must be bfloat16 or float16 without out_scale (FP8 output needs out_scale), got ",
                     out.scalar_type());
    p.out_type = out.scalar_type() == at::kBFloat16 ? ElemType::BF16 : ElemType::FP16;
  }

  // ---- devices
  check_device(k, q, "k");
  check_device(v, q, "v");
  check_device(out, q, "out");

  // ---- layouts and shapes
  const bool varlen_q = q.dim() == 3;
  TORCH_CHECK_VALUE(q.dim() == 4 || q.dim() == 3, "q must be [B, Sq, H, D] (dense) or [T, H, D] (varlen), got shape ",
                    q.sizes());
  TORCH_CHECK_VALUE(varlen_q == a.cu_seqlens_q.has_value(),
                    varlen_q ? "cu_seqlens_q is required for a 3-d (varlen) q"
                             : "cu_seqlens_q is only valid with a 3-d (varlen) q [T, H, D]");
  check_index(a.cu_seqlens_q, q, "cu_seqlens_q", 1);
  check_index(a.cu_seqlens_k, q, "cu_seqlens_k", 1);
  check_index(a.seqused_k, q, "seqused_k", 1);
  check_index(a.block_table, q, "block_table", 2);

  const int64_t H = q.size(-2), D = q.size(-1);
  const int64_t B = varlen_q ? a.cu_seqlens_q->numel() - 1 : q.size(0);
  TORCH_CHECK_VALUE(B >= 0, "cu_seqlens_q must have at least 1 element");
  TORCH_CHECK_VALUE(is_supported_head_dim(D), "head dim (q.shape[-1]) ", D, " is not supported; supported: ",
                    head_dims_str());
  const bool paged = a.block_table.has_value();
  const bool varlen_k = !paged && k.dim() == 3;
  if (paged) {
    TORCH_CHECK_VALUE(k.dim() == 4, "k must be a paged cache [num_blocks, block_size, Hkv, D] with block_table, got shape ",
                      k.sizes());
    TORCH_CHECK_VALUE(a.seqused_k || a.cu_seqlens_k, "a paged KV cache (block_table) needs seqused_k or cu_seqlens_k");
  } else {
    TORCH_CHECK_VALUE(k.dim() == 4 || k.dim() == 3, "k must be [B, Sk, Hkv, D] (dense) or [Tk, Hkv, D] (varlen), got shape ",
                      k.sizes());
    TORCH_CHECK_VALUE(varlen_k == a.cu_seqlens_k.has_value(),
                      varlen_k ? "cu_seqlens_k is required for a 3-d (varlen) k"
                               : "cu_seqlens_k is only valid with a 3-d (varlen) k or a paged cache");
  }
  TORCH_CHECK_VALUE(v.sizes() == k.sizes(), "v must have k's shape ", k.sizes(), ", got ", v.sizes());
  const int64_t Hkv = k.size(-2);
  TORCH_CHECK_VALUE(k.size(-1) == D, "k head dim ", k.size(-1), " must equal q head dim ", D);
  TORCH_CHECK_VALUE(Hkv > 0 && H % Hkv == 0, "the number of q heads (", H, ") must be a multiple of the number of k/v heads (",
                    Hkv, ")");
  TORCH_CHECK_VALUE(out.sizes() == q.sizes(), "out must have q's shape ", q.sizes(), ", got ", out.sizes());
  check_last_dim_contiguous(q, "q");
  check_last_dim_contiguous(k, "k");
  check_last_dim_contiguous(v, "v");
  check_last_dim_contiguous(out, "out");
  if (!paged && !varlen_k) {
    TORCH_CHECK_VALUE(k.size(0) == B, "k batch size ", k.size(0), " must equal the batch size ", B);
  }
  if (a.seqused_k) {
    TORCH_CHECK_VALUE(a.seqused_k->numel() == B, "seqused_k must have B = ", B, " elements, got ", a.seqused_k->numel());
  }
  if (paged) {
    TORCH_CHECK_VALUE(a.block_table->size(0) == B, "block_table must have B = ", B, " rows, got shape ",
                      a.block_table->sizes());
    TORCH_CHECK_VALUE(k.size(1) > 0, "k block_size (k.shape[1]) must be positive");
  }

  // ---- scalars
  TORCH_CHECK_VALUE(std::isfinite(a.softmax_scale) && a.softmax_scale > 0, "softmax_scale must be positive and finite, got ",
                    a.softmax_scale);
  TORCH_CHECK_VALUE(std::isfinite(a.softcap) && a.softcap >= 0, "softcap must be >= 0 and finite, got ", a.softcap);
  TORCH_CHECK_VALUE(a.window_left >= -1 && a.window_right >= -1,
                    "window_size entries must be >= -1 (-1 = unbounded), got (", a.window_left, ", ", a.window_right, ")");
  TORCH_CHECK_VALUE(a.kv_tile >= 0, "kv_tile must be >= 0, got ", a.kv_tile);
  TORCH_CHECK_VALUE(a.max_seqlen_q >= 0 && a.max_seqlen_k >= 0, "max_seqlen_q / max_seqlen_k must be >= 0");

  // ---- scales
  p.q_descale_head_stride = check_scale(a.q_descale, q, "q_descale", H);
  p.k_descale_head_stride = check_scale(a.k_descale, q, "k_descale", Hkv);
  p.v_descale_head_stride = check_scale(a.v_descale, q, "v_descale", Hkv);
  check_scale(a.p_scale, q, "p_scale", 1);
  check_scale(a.out_scale, q, "out_scale", 1);

  // ---- index values. Host tensors are always checked. Device ones only when the caller left a
  // max_seqlen unknown (0): deriving it needs a host copy anyway, so the copy is checked too. With
  // both bounds given the op never synchronises (graph capture), and the kernels clamp instead.
  const int64_t T = varlen_q ? q.size(0) : 0;
  const bool sync_ok = (varlen_q && a.max_seqlen_q == 0) || ((paged || varlen_k) && a.max_seqlen_k == 0);
  auto host = [&](const std::optional<at::Tensor>& t) -> std::optional<at::Tensor> {
    if (!t) return std::nullopt;
    if (t->device().is_cpu()) return t->contiguous();
    if (sync_ok) return t->cpu().contiguous();
    return std::nullopt;
  };
  const auto cu_q = host(a.cu_seqlens_q), cu_k = host(a.cu_seqlens_k), used_k = host(a.seqused_k),
             table = host(a.block_table);
  if (cu_q) check_cu_seqlens(*cu_q, "cu_seqlens_q", B, T, true);
  if (cu_k) check_cu_seqlens(*cu_k, "cu_seqlens_k", B, varlen_k ? k.size(0) : -1, varlen_k);
  const int64_t max_blocks = paged ? a.block_table->size(1) : 0;
  // Keys available to each sequence (and its used length) where known on the host.
  std::vector<int64_t> k_lens;
  if (!paged && !varlen_k) {
    k_lens.assign(B, k.size(1));
  } else if (cu_k) {
    const int32_t* c = cu_k->data_ptr<int32_t>();
    for (int64_t b = 0; b < B; ++b) k_lens.push_back(c[b + 1] - c[b]);
  } else if (paged && used_k) {
    k_lens.assign(B, max_blocks * k.size(1));
  }
  if (used_k && !k_lens.empty()) {
    const int32_t* u = used_k->data_ptr<int32_t>();
    for (int64_t b = 0; b < B; ++b) {
      TORCH_CHECK_VALUE(u[b] >= 0 && u[b] <= k_lens[b], "seqused_k[", b, "] = ", u[b], " must be in [0, ", k_lens[b],
                        "]");
      k_lens[b] = u[b];
    }
  } else if (a.seqused_k) {
    k_lens.clear();  // the used lengths are on the device and unknown here
  }
  if (paged && table && !k_lens.empty()) {
    const int64_t bs = k.size(1), nb = k.size(0);
    const int32_t* bt = table->data_ptr<int32_t>();
    for (int64_t b = 0; b < B; ++b) {
      const int64_t need = (k_lens[b] + bs - 1) / bs;
      TORCH_CHECK_VALUE(need <= max_blocks, "sequence ", b, " needs ", need, " cache blocks but block_table has ",
                        max_blocks, " columns");
      for (int64_t i = 0; i < need; ++i) {
        const int32_t blk = bt[b * max_blocks + i];
        TORCH_CHECK_VALUE(blk >= 0 && blk < nb, "block_table[", b, ", ", i, "] = ", blk, " is out of range [0, ", nb,
                          ")");
      }
    }
  }

  // ---- fill params
  p.q = q.data_ptr();
  p.k = k.data_ptr();
  p.v = v.data_ptr();
  p.out = out.data_ptr();
  set_strides(q, &p.q_batch_stride, &p.q_row_stride, &p.q_head_stride);
  set_strides(out, &p.o_batch_stride, &p.o_row_stride, &p.o_head_stride);
  set_strides(k, &p.k_batch_stride, &p.k_row_stride, &p.k_head_stride);
  set_strides(v, &p.v_batch_stride, &p.v_row_stride, &p.v_head_stride);
  p.cu_seqlens_q = varlen_q ? a.cu_seqlens_q->data_ptr<int32_t>() : nullptr;
  p.cu_seqlens_k = a.cu_seqlens_k ? a.cu_seqlens_k->data_ptr<int32_t>() : nullptr;
  p.seqused_k = a.seqused_k ? a.seqused_k->data_ptr<int32_t>() : nullptr;
  if (paged) {
    p.block_table = a.block_table->data_ptr<int32_t>();
    p.block_table_batch_stride = a.block_table->stride(0);
    p.page_block_size = static_cast<int32_t>(k.size(1));
    p.num_cache_blocks = static_cast<int32_t>(k.size(0));
  }
  p.batch = static_cast<int32_t>(B);
  p.num_heads = static_cast<int32_t>(H);
  p.num_heads_k = static_cast<int32_t>(Hkv);
  p.head_dim = static_cast<int32_t>(D);
  p.total_q = static_cast<int32_t>(T);
  if (varlen_k) p.total_k = static_cast<int32_t>(k.size(0));
  // Exact maxima where the lengths are known on the host; otherwise the caller's bounds.
  if (varlen_q) {
    p.seqlen_q = static_cast<int32_t>(cu_q ? max_diff(*cu_q) : a.max_seqlen_q);
  } else {
    p.seqlen_q = static_cast<int32_t>(q.size(1));
  }
  if (!paged && !varlen_k) {
    p.seqlen_k = static_cast<int32_t>(k.size(1));
  } else if (!k_lens.empty()) {
    p.seqlen_k = static_cast<int32_t>(*std::max_element(k_lens.begin(), k_lens.end()));
  } else {
    p.seqlen_k = static_cast<int32_t>(a.max_seqlen_k);
  }

  p.q_descale = a.q_descale ? a.q_descale->data_ptr<float>() : nullptr;
  p.k_descale = a.k_descale ? a.k_descale->data_ptr<float>() : nullptr;
  p.v_descale = a.v_descale ? a.v_descale->data_ptr<float>() : nullptr;
  p.p_scale_ptr = a.p_scale ? a.p_scale->data_ptr<float>() : nullptr;
  p.p_scale_default = p.fp8_kind == Fp8Kind::E4M3FN ? Fp8Traits<Fp8Kind::E4M3FN>::kDefaultPScale
                                                    : Fp8Traits<Fp8Kind::E4M3FNUZ>::kDefaultPScale;
  p.out_scale = a.out_scale ? a.out_scale->data_ptr<float>() : nullptr;
  p.softmax_scale = static_cast<float>(a.softmax_scale);
  p.softcap = static_cast<float>(a.softcap);
  p.is_causal = a.causal;
  p.window_left = static_cast<int32_t>(a.window_left);
  p.window_right = static_cast<int32_t>(a.causal ? 0 : a.window_right);
  p.kv_tile = static_cast<int32_t>(a.kv_tile);

  FwdPlan plan;
  if (a.return_softmax_lse) {
    const auto opts = q.options().dtype(at::kFloat);
    plan.lse = varlen_q ? at::empty({H, T}, opts) : at::empty({B, H, q.size(1)}, opts);
    p.lse = plan.lse.data_ptr<float>();
    if (varlen_q) {
      p.lse_head_stride = plan.lse.stride(0);
      p.lse_row_stride = plan.lse.stride(1);
    } else {
      p.lse_batch_stride = plan.lse.stride(0);
      p.lse_head_stride = plan.lse.stride(1);
      p.lse_row_stride = plan.lse.stride(2);
    }
  } else {
    plan.lse = at::empty({0}, q.options().dtype(at::kFloat));
  }
  plan.params = p;
  return plan;
}

}  // namespace fp8attn
