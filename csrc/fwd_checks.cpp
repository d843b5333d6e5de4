#include "fwd_checks.h"

#include <cmath>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "kernels/numeric/fp8.h"
#include "kernels/shapes.h"
#include "kernels/variant.h"
#include "overlap.h"

namespace fp8attn {
namespace {

constexpr int64_t kInt32Max = std::numeric_limits<int32_t>::max();

using NamedOpt = std::pair<const char*, const std::optional<at::Tensor>*>;

bool is_supported_head_dim(int64_t d) {
  for (const int32_t h : kHeadDims)
    if (h == d) return true;
  return false;
}

std::string head_dims_str() {
  std::string s;
  for (const int32_t d : kHeadDims) s += (s.empty() ? "" : ", ") + std::to_string(d);
  return s;
}

void check_fits_int32(int64_t x, const char* what) {
  TORCH_CHECK_VALUE(x <= kInt32Max, what, " = ", x, " does not fit the kernels' int32 (at most ", kInt32Max, ")");
}

void check_dtypes(const FwdArgs& a, FwdLayout& L) {
  const at::Tensor &q = a.q, &k = a.k, &v = a.v, &out = a.out;
  L.fp8_kind = fp8_kind_of(k.scalar_type(), "k");
  TORCH_CHECK_TYPE(v.scalar_type() == k.scalar_type(), "v must have k's dtype (", k.scalar_type(), "), got ",
                   v.scalar_type());
  const auto qt = q.scalar_type();
  if (is_fp8(qt)) {
    TORCH_CHECK_TYPE(qt == k.scalar_type(), "an FP8 q must have k's dtype (", k.scalar_type(), "), got ", qt);
    L.q_type = ElemType::FP8;
  } else {
    TORCH_CHECK_TYPE(qt == at::kBFloat16 || qt == at::kHalf, "q must be FP8 (k's dtype), bfloat16 or float16, got ",
                     qt);
    L.q_type = qt == at::kBFloat16 ? ElemType::BF16 : ElemType::FP16;
  }
  if (a.out_scale) {
    TORCH_CHECK_TYPE(out.scalar_type() == k.scalar_type(), "out must have k's FP8 dtype (", k.scalar_type(),
                     ") when out_scale is given, got ", out.scalar_type());
    L.out_type = ElemType::FP8;
  } else {
    TORCH_CHECK_TYPE(out.scalar_type() == at::kBFloat16 || out.scalar_type() == at::kHalf,
                     "out must be bfloat16 or float16 without out_scale (FP8 output needs out_scale), got ",
                     out.scalar_type());
    L.out_type = out.scalar_type() == at::kBFloat16 ? ElemType::BF16 : ElemType::FP16;
  }
  const NamedOpt index[] = {{"cu_seqlens_q", &a.cu_seqlens_q}, {"cu_seqlens_k", &a.cu_seqlens_k},
                            {"seqused_k", &a.seqused_k}, {"block_table", &a.block_table}};
  for (const auto& [name, t] : index)
    TORCH_CHECK_TYPE(!*t || (*t)->scalar_type() == at::kInt, name, " must be int32, got ", (*t)->scalar_type());
  const NamedOpt scales[] = {{"q_descale", &a.q_descale}, {"k_descale", &a.k_descale}, {"v_descale", &a.v_descale},
                             {"p_scale", &a.p_scale}, {"out_scale", &a.out_scale}};
  for (const auto& [name, t] : scales)
    TORCH_CHECK_TYPE(!*t || (*t)->scalar_type() == at::kFloat, name, " must be a float32 tensor, got ",
                     (*t)->scalar_type());
}

void check_last_dim_contiguous(const at::Tensor& t, const char* name) {
  TORCH_CHECK_VALUE(t.stride(-1) == 1 || t.size(-1) <= 1, name,
                    " must be contiguous in its last (head) dimension, got strides ", t.strides());
}

void check_index_shape(const std::optional<at::Tensor>& t, const char* name, int64_t rank) {
  if (!t) return;
  TORCH_CHECK_VALUE(t->dim() == rank, name, " must have ", rank, " dimension(s), got shape ", t->sizes());
  check_last_dim_contiguous(*t, name);
}

void check_layout(const FwdArgs& a, FwdLayout& L) {
  const at::Tensor &q = a.q, &k = a.k, &v = a.v, &out = a.out;
  L.varlen_q = q.dim() == 3;
  TORCH_CHECK_VALUE(q.dim() == 4 || q.dim() == 3, "q must be [B, Sq, H, D] (dense) or [T, H, D] (varlen), got shape ",
                    q.sizes());
  TORCH_CHECK_VALUE(L.varlen_q == a.cu_seqlens_q.has_value(),
                    L.varlen_q ? "cu_seqlens_q is required for a 3-d (varlen) q"
                               : "cu_seqlens_q is only valid with a 3-d (varlen) q [T, H, D]");
  check_index_shape(a.cu_seqlens_q, "cu_seqlens_q", 1);
  check_index_shape(a.cu_seqlens_k, "cu_seqlens_k", 1);
  check_index_shape(a.seqused_k, "seqused_k", 1);
  check_index_shape(a.block_table, "block_table", 2);

  L.H = q.size(-2);
  L.D = q.size(-1);
  L.B = L.varlen_q ? a.cu_seqlens_q->numel() - 1 : q.size(0);
  L.batch_from = L.varlen_q ? "len(cu_seqlens_q) - 1" : "q.shape[0]";
  L.T = L.varlen_q ? q.size(0) : 0;
  TORCH_CHECK_VALUE(L.B >= 0, "cu_seqlens_q must have at least 1 element");
  TORCH_CHECK_VALUE(is_supported_head_dim(L.D), "head dim (q.shape[-1]) ", L.D, " is not supported; supported: ",
                    head_dims_str());
  L.paged = a.block_table.has_value();
  L.varlen_k = !L.paged && k.dim() == 3;
  if (L.paged) {
    TORCH_CHECK_VALUE(k.dim() == 4,
                      "k must be a paged cache [num_blocks, block_size, Hkv, D] with block_table, got shape ", k.sizes());
    TORCH_CHECK_VALUE(a.seqused_k || a.cu_seqlens_k, "a paged KV cache (block_table) needs seqused_k or cu_seqlens_k");
  } else {
    TORCH_CHECK_VALUE(k.dim() == 4 || k.dim() == 3,
                      "k must be [B, Sk, Hkv, D] (dense) or [Tk, Hkv, D] (varlen), got shape ", k.sizes());
    TORCH_CHECK_VALUE(L.varlen_k == a.cu_seqlens_k.has_value(),
                      L.varlen_k ? "cu_seqlens_k is required for a 3-d (varlen) k"
                                 : "cu_seqlens_k is only valid with a 3-d (varlen) k or a paged cache");
  }
  TORCH_CHECK_VALUE(v.sizes() == k.sizes(), "v must have k's shape ", k.sizes(), ", got ", v.sizes());
  L.Hkv = k.size(-2);
  TORCH_CHECK_VALUE(k.size(-1) == L.D, "k head dim ", k.size(-1), " must equal q head dim ", L.D);
  TORCH_CHECK_VALUE(L.Hkv > 0, "k must have at least one head (k.shape[-2] = 0)");
  TORCH_CHECK_VALUE(L.H % L.Hkv == 0, "the number of q heads (", L.H,
                    ") must be a multiple of the number of k/v heads (", L.Hkv, ")");
  TORCH_CHECK_VALUE(out.sizes() == q.sizes(), "out must have q's shape ", q.sizes(), ", got ", out.sizes());
  for (const NamedTensor& t : {NamedTensor{"q", &q}, NamedTensor{"k", &k}, NamedTensor{"v", &v}, NamedTensor{"out", &out}})
    check_last_dim_contiguous(*t.second, t.first);
  if (!L.paged && !L.varlen_k)
    TORCH_CHECK_VALUE(k.size(0) == L.B, "k batch size ", k.size(0), " must equal the batch size ", L.B, " (",
                      L.batch_from, "; a 4-d k without block_table is dense [B, Sk, Hkv, D])");
  if (a.seqused_k)
    TORCH_CHECK_VALUE(a.seqused_k->numel() == L.B, "seqused_k must have B = ", L.B, " (", L.batch_from, ") elements, got ",
                      a.seqused_k->numel());
  if (L.paged) {
    TORCH_CHECK_VALUE(a.block_table->size(0) == L.B, "block_table must have B = ", L.B, " (", L.batch_from, ") rows, got shape ",
                      a.block_table->sizes());
    TORCH_CHECK_VALUE(k.size(1) > 0, "k block_size (k.shape[1]) must be positive");
    // (No-sync calls clamp a block-table entry into the cache, which needs a block to clamp to.)
    TORCH_CHECK_VALUE(k.size(0) > 0, "k, a paged cache, must have at least one block (k.shape[0] = 0)");
  }
  // Sizes that become int32 fields of the params.
  check_fits_int32(L.B, "the batch size");
  check_fits_int32(q.size(q.dim() - 3), L.varlen_q ? "q.shape[0] (T)" : "q.shape[1] (Sq)");
  check_fits_int32(k.size(0), "k.shape[0]");
  check_fits_int32(k.size(1), "k.shape[1]");
  check_fits_int32(L.H, "the number of q heads");
  if (L.paged) check_fits_int32(a.block_table->size(1), "block_table.shape[1]");
}

void check_scalars(const FwdArgs& a) {
  // softmax_scale and softcap become float32: finite (and, where non-zero, non-zero) there too.
  const float ss = static_cast<float>(a.softmax_scale), sc = static_cast<float>(a.softcap);
  TORCH_CHECK_VALUE(std::isfinite(a.softmax_scale) && a.softmax_scale > 0 && std::isfinite(ss) && ss > 0,
                    "softmax_scale must be positive and finite as a float32, got ", a.softmax_scale);
  TORCH_CHECK_VALUE(std::isfinite(a.softcap) && a.softcap >= 0 && std::isfinite(sc) && (a.softcap == 0 || sc > 0),
                    "softcap must be 0 (off) or positive and finite as a float32, got ", a.softcap);
  TORCH_CHECK_VALUE(a.window_left >= -1 && a.window_right >= -1 && a.window_left <= kInt32Max &&
                        a.window_right <= kInt32Max,
                    "window_size entries must be in [-1, ", kInt32Max, "] (-1 = unbounded), got (", a.window_left,
                    ", ", a.window_right, ")");
  TORCH_CHECK_VALUE(a.kv_tile >= 0 && a.kv_tile <= kMaxKvTile, "kv_tile must be in [0, ", kMaxKvTile,
                    "] (0: the implementation's default; ", kMaxKvTile,
                    ": the widest tile of any implementation), got ", a.kv_tile);
  TORCH_CHECK_VALUE(a.max_seqlen_q >= 0 && a.max_seqlen_q <= kInt32Max, "max_seqlen_q must be in [0, ", kInt32Max,
                    "], got ", a.max_seqlen_q);
  TORCH_CHECK_VALUE(a.max_seqlen_k >= 0 && a.max_seqlen_k <= kInt32Max, "max_seqlen_k must be in [0, ", kInt32Max,
                    "], got ", a.max_seqlen_k);
}

// ---- scales
template <Fp8Kind K>
float smallest_subnormal() {
  return fp8_decode<K>(1);
}

// Returns the per-head stride (0: per tensor, 1: per head) of a scale tensor (heads: from heads_from).
int32_t check_scale_shape(const std::optional<at::Tensor>& t, const char* name, int64_t heads,
                          const char* heads_from) {
  if (!t) return 0;
  const int64_t n = t->numel();
  TORCH_CHECK_VALUE(n == 1 || (heads > 1 && n == heads), name, " must have 1 element (per tensor)",
                    heads != 1 ? " or " + std::to_string(heads) + " (per head: " + heads_from + ")" : std::string(), ", got shape ",
                    t->sizes());
  TORCH_CHECK_VALUE(t->is_contiguous(), name, " must be contiguous");
  return n == 1 ? 0 : 1;
}

// The values of a host scale (empty when absent: 1.0; or on the device: not checked).
std::vector<float> host_values(const std::optional<at::Tensor>& t, const char* name) {
  if (!t || !t->device().is_cpu()) return {};
  const float* p = t->data_ptr<float>();
  std::vector<float> v(p, p + t->numel());
  for (float x : v) check_scale_value(x, name);
  return v;
}

// The bounds that keep the kernels' float32 arithmetic finite and meaningful for every scale whose
// value is on the host (docs/numerics.md, "Scale bounds"; on the device they are the caller's contract:
// the op never synchronises to read them).
template <Fp8Kind K>
void check_scale_values(const FwdArgs& a, const FwdLayout& L) {
  constexpr float kFMax = std::numeric_limits<float>::max();
  const float fp8_max = Fp8Traits<K>::kMax;
  const auto qd = host_values(a.q_descale, "q_descale"), kd = host_values(a.k_descale, "k_descale"),
             vd = host_values(a.v_descale, "v_descale"), ps = host_values(a.p_scale, "p_scale"),
             os = host_values(a.out_scale, "out_scale");
  // Dequantized values (fp8 x scale) are finite in float32.
  using NamedValues = std::pair<const char*, const std::vector<float>*>;
  for (const auto& [name, v] : {NamedValues{"q_descale", &qd}, NamedValues{"k_descale", &kd},
                                NamedValues{"v_descale", &vd}})
    for (float x : *v)
      TORCH_CHECK_VALUE(x <= kFMax / fp8_max, name, " = ", x, " makes dequantized values (fp8 x ", name,
                        ", up to ", fp8_max, " x ", name, ") overflow float32: it must be at most ", kFMax / fp8_max);
  // Scales the kernels invert have a finite float32 reciprocal: q_descale when q is 16-bit (quantized
  // by it), p_scale, out_scale.
  const std::vector<float> none;
  for (const auto& [name, v] : {NamedValues{"q_descale", L.q_type == ElemType::FP8 ? &none : &qd},
                                NamedValues{"p_scale", &ps}, NamedValues{"out_scale", &os}})
    for (float x : *v) check_scale_reciprocal(x, name);
  // P = 1 (every row's largest probability in a tile) quantizes to a non-zero code, or l = 0: p_scale
  // < 2 / (the smallest subnormal of the FP8 type).
  for (float x : ps)
    TORCH_CHECK_VALUE(PQuantize<K>::of_scale(x)(1.f) > 0.f, "p_scale = ", x,
                      " quantizes P = 1 to the FP8 code 0 (every probability would be 0): it must be below ",
                      2.f / smallest_subnormal<K>(), " = 2 / the smallest subnormal of the FP8 type");
  // The largest logit the kernels can form, |q8 . k8| <= D max_F^2 times softmax_scale q_descale k_descale
  // (over softcap, when capped), is finite in float32: checked when every descale is known here.
  const bool known = (!a.q_descale || !qd.empty()) && (!a.k_descale || !kd.empty());
  if (!known) return;
  const int64_t group = L.H / L.Hkv;
  for (int64_t h = 0; h < L.H; ++h) {
    const float q_s = qd.empty() ? 1.f : qd[qd.size() == 1 ? 0 : h];
    const float k_s = kd.empty() ? 1.f : kd[kd.size() == 1 ? 0 : h / group];
    const LogitsTransform t =
        LogitsTransform::make(static_cast<float>(a.softmax_scale), q_s * k_s, static_cast<float>(a.softcap));
    const float reach = t.has_softcap ? t.inv_softcap : t.scale_log2 * static_cast<float>(L.D) * fp8_max * fp8_max;
    TORCH_CHECK_VALUE(std::isfinite(reach), "softmax_scale (", a.softmax_scale, ") x q_descale (", q_s,
                      ") x k_descale (", k_s, t.has_softcap ? ") / softcap" : ") x the largest |q8 . k8|",
                      " overflows float32 (head ", h, "): the logits would not be finite");
  }
}

// Attention sinks: float32 [H] (one logit per q head), contiguous; on the host each finite, and finite in
// the kernels' log2 units (sink x log2(e) in float32). On a device the values are the caller's contract,
// as the scales' are.
void check_sinks(const FwdArgs& a, const FwdLayout& L) {
  if (!a.sinks) return;
  const at::Tensor& s = *a.sinks;
  TORCH_CHECK_TYPE(s.scalar_type() == at::kFloat, "sinks must be a float32 tensor, got ", s.scalar_type());
  TORCH_CHECK_VALUE(s.dim() == 1 && s.size(0) == L.H, "sinks must have shape [H] = [", L.H,
                    "] (one logit per q head: q.shape[-2]), got shape ", s.sizes());
  TORCH_CHECK_VALUE(s.is_contiguous(), "sinks must be contiguous, got strides ", s.strides());
  if (!s.device().is_cpu()) return;
  const float* v = s.data_ptr<float>();
  for (int64_t h = 0; h < L.H; ++h) {
    TORCH_CHECK_VALUE(std::isfinite(v[h]), "sinks must be finite, got ", v[h], " (head ", h, ")");
    TORCH_CHECK_VALUE(std::isfinite(v[h] * kLog2e), "sinks[", h, "] = ", v[h],
                      " overflows float32 in the kernels' log2 units (x log2(e)): |sinks| must be at most ",
                      std::numeric_limits<float>::max() / kLog2e);
  }
}

// ---- index values
void check_cu_seqlens(const at::Tensor& cu, const char* name, int64_t batch, const char* batch_from, int64_t rows,
                      const char* rows_from) {
  TORCH_CHECK_VALUE(cu.numel() == batch + 1, name, " must have B + 1 = ", batch + 1, " elements (B = ", batch,
                    batch_from, "), got ", cu.numel());
  const int32_t* p = cu.data_ptr<int32_t>();
  TORCH_CHECK_VALUE(p[0] == 0, name, "[0] must be 0, got ", p[0]);
  for (int64_t i = 0; i < batch; ++i)
    TORCH_CHECK_VALUE(p[i + 1] >= p[i], name, " must be non-decreasing, got ", p[i], " then ", p[i + 1],
                      " at index ", i);
  // Rows past cu[-1] are padding (vLLM pads a captured batch): never read, out never written there.
  if (rows >= 0)
    TORCH_CHECK_VALUE(p[batch] <= rows, name, "[-1] = ", p[batch], " must not exceed the number of rows ", rows, " (",
                      rows_from, ")");
}

int64_t max_diff(const at::Tensor& cu) {
  const int32_t* p = cu.data_ptr<int32_t>();
  int64_t m = 0;
  for (int64_t i = 0; i + 1 < cu.numel(); ++i) m = std::max<int64_t>(m, p[i + 1] - p[i]);
  return m;
}

// Host index tensors are always checked. Device ones only when the caller left a max_seqlen unknown
// (0): deriving it needs a host copy anyway, so the copy is checked too. With both bounds given the
// op never synchronises (graph capture), and the kernels clamp instead.
void check_index_values(const FwdArgs& a, FwdLayout& L) {
  const at::Tensor& k = a.k;
  const bool sync_ok = (L.varlen_q && a.max_seqlen_q == 0) || ((L.paged || L.varlen_k) && a.max_seqlen_k == 0);
  auto host = [&](const std::optional<at::Tensor>& t) -> std::optional<at::Tensor> {
    if (!t) return std::nullopt;
    if (t->device().is_cpu()) return t->contiguous();
    if (sync_ok) return t->cpu().contiguous();
    return std::nullopt;
  };
  const auto cu_q = host(a.cu_seqlens_q), cu_k = host(a.cu_seqlens_k), used_k = host(a.seqused_k),
             table = host(a.block_table);
  if (cu_q) {
    check_cu_seqlens(*cu_q, "cu_seqlens_q", L.B, "", L.T, "q.shape[0]");
    L.max_q_len = max_diff(*cu_q);
  }
  if (cu_k)
    check_cu_seqlens(*cu_k, "cu_seqlens_k", L.B, std::string(": ").append(L.batch_from).c_str(),
                     L.varlen_k ? k.size(0) : -1, "k.shape[0]");
  // Keys each sequence may use: dense Sk, varlen its cu_seqlens_k span, paged whatever its table holds.
  std::vector<int64_t>& k_lens = L.k_lens;
  const char* k_lens_from = "cu_seqlens_k";
  if (!L.paged && !L.varlen_k) {
    k_lens.assign(L.B, k.size(1));
  } else if (cu_k) {
    const int32_t* c = cu_k->data_ptr<int32_t>();
    for (int64_t b = 0; b < L.B; ++b) k_lens.push_back(c[b + 1] - c[b]);
  }
  if (a.seqused_k && !used_k) {
    k_lens.clear();  // the used lengths are on the device and unknown here
  } else if (used_k) {
    const int32_t* u = used_k->data_ptr<int32_t>();
    const bool bounded = !k_lens.empty();
    k_lens.resize(L.B);
    for (int64_t b = 0; b < L.B; ++b) {
      TORCH_CHECK_VALUE(u[b] >= 0, "seqused_k[", b, "] = ", u[b], " must be >= 0");
      if (bounded)
        TORCH_CHECK_VALUE(u[b] <= k_lens[b], "seqused_k[", b, "] = ", u[b], " must not exceed the ", k_lens[b],
                          " keys of sequence ", b, L.paged || L.varlen_k ? " (cu_seqlens_k)" : " (k.shape[1])");
      k_lens[b] = u[b];
    }
    k_lens_from = "seqused_k";
  }
  if (L.paged && table && !k_lens.empty()) {
    const int64_t bs = k.size(1), nb = k.size(0), max_blocks = a.block_table->size(1);
    const int32_t* bt = table->data_ptr<int32_t>();
    for (int64_t b = 0; b < L.B; ++b) {
      const int64_t need = (k_lens[b] + bs - 1) / bs;
      TORCH_CHECK_VALUE(need <= max_blocks, "block_table is too narrow: sequence ", b, " uses ", k_lens[b], " keys (",
                        k_lens_from, "), ", need, " blocks of ", bs, ", but block_table has ", max_blocks,
                        " columns");
      // Entries past `need` are never read (vLLM leaves its null block 0 there).
      for (int64_t i = 0; i < need; ++i) {
        const int32_t blk = bt[b * max_blocks + i];
        TORCH_CHECK_VALUE(blk >= 0 && blk < nb, "block_table[", b, ", ", i, "] = ", blk, " is out of range [0, ", nb,
                          ")");
      }
    }
  }
}

}  // namespace

FwdLayout check_fwd_args(const FwdArgs& a) {
  FwdLayout L;
  check_dtypes(a, L);
  const std::vector<NamedTensor> tensors = named_tensors(a);
  check_one_device(tensors);
  check_layout(a, L);
  check_no_overlap(a.out, "out", tensors);
  check_scalars(a);
  L.q_descale_head_stride = check_scale_shape(a.q_descale, "q_descale", L.H, "q.shape[-2]");
  L.k_descale_head_stride = check_scale_shape(a.k_descale, "k_descale", L.Hkv, "k.shape[-2]");
  L.v_descale_head_stride = check_scale_shape(a.v_descale, "v_descale", L.Hkv, "k.shape[-2]");
  check_scale_shape(a.p_scale, "p_scale", 1, "");
  check_scale_shape(a.out_scale, "out_scale", 1, "");
  check_sinks(a, L);
  if (L.fp8_kind == Fp8Kind::E4M3FN) {
    check_scale_values<Fp8Kind::E4M3FN>(a, L);
  } else {
    check_scale_values<Fp8Kind::E4M3FNUZ>(a, L);
  }
  check_index_values(a, L);
  return L;
}

}  // namespace fp8attn
