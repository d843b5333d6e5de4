#include "fwd_args.h"

#include <ATen/MemoryOverlap.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "kernels/numeric/fp8.h"
#include "kernels/shapes.h"
#include "kernels/variant.h"

namespace fp8attn {
namespace {

// The widest KV tile of any implementation (the Hopper wgmma pipeline's); the CPU takes any tile
// up to it, the GPU kernels their own (fwd_unsupported_reason).
constexpr int64_t kMaxKvTile = 128;
constexpr int64_t kInt32Max = std::numeric_limits<int32_t>::max();

using Named = std::pair<const char*, const at::Tensor*>;
using NamedOpt = std::pair<const char*, const std::optional<at::Tensor>*>;

std::string head_dims_str() {
  std::string s;
  for (const int32_t d : kHeadDims) s += (s.empty() ? "" : ", ") + std::to_string(d);
  return s;
}

// ---- the layout of a call, as the shape checks found it
struct Layout {
  bool varlen_q = false, varlen_k = false, paged = false;
  int64_t B = 0, H = 0, Hkv = 0, D = 0;
  int64_t T = 0;  // varlen q rows (0 when dense)
  const char* batch_from = "";  // where B comes from, for messages
};

// Every tensor argument with its name, q first (the device the others must share).
std::vector<Named> named_tensors(const FwdArgs& a) {
  std::vector<Named> t = {{"q", &a.q}, {"k", &a.k}, {"v", &a.v}, {"out", &a.out}};
  const NamedOpt opt[] = {
      {"cu_seqlens_q", &a.cu_seqlens_q}, {"cu_seqlens_k", &a.cu_seqlens_k}, {"seqused_k", &a.seqused_k},
      {"block_table", &a.block_table},   {"q_descale", &a.q_descale},       {"k_descale", &a.k_descale},
      {"v_descale", &a.v_descale},       {"p_scale", &a.p_scale},           {"out_scale", &a.out_scale},
      {"sinks", &a.sinks}};
  for (const auto& [name, o] : opt)
    if (o->has_value()) t.emplace_back(name, &o->value());
  return t;
}

void check_fits_int32(int64_t x, const char* what) {
  TORCH_CHECK_VALUE(x <= kInt32Max, what, " = ", x, " does not fit the kernels' int32 (at most ", kInt32Max, ")");
}

void check_dtypes(const FwdArgs& a, FwdParams& p) {
  const at::Tensor &q = a.q, &k = a.k, &v = a.v, &out = a.out;
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
  if (a.out_scale) {
    TORCH_CHECK_TYPE(out.scalar_type() == k.scalar_type(), "out must have k's FP8 dtype (", k.scalar_type(),
                     ") when out_scale is given, got ", out.scalar_type());
    p.out_type = ElemType::FP8;
  } else {
    TORCH_CHECK_TYPE(out.scalar_type() == at::kBFloat16 || out.scalar_type() == at::kHalf,
                     "out must be bfloat16 or float16 without out_scale (FP8 output needs out_scale), got ",
                     out.scalar_type());
    p.out_type = out.scalar_type() == at::kBFloat16 ? ElemType::BF16 : ElemType::FP16;
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

// Every tensor on q's device. (A meta tensor among real ones never gets here: the dispatcher sends
// such a call to the fake implementation, which refuses it the same way, fp8attn/_fake.py.)
void check_devices(const FwdArgs& a) {
  for (const auto& [name, t] : named_tensors(a))
    TORCH_CHECK_VALUE(t->device() == a.q.device(), name, " must be on q's device (", a.q.device(), "), got ",
                      t->device());
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

Layout check_layout(const FwdArgs& a) {
  const at::Tensor &q = a.q, &k = a.k, &v = a.v, &out = a.out;
  Layout L;
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
  for (const Named& t : {Named{"q", &q}, Named{"k", &k}, Named{"v", &v}, Named{"out", &out}})
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
  return L;
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
  for (float x : v) TORCH_CHECK_VALUE(std::isfinite(x) && x > 0.f, name, " must be positive and finite, got ", x);
  return v;
}

// The bounds that keep the kernels' float32 arithmetic finite and meaningful for every scale whose
// value is on the host (docs/numerics.md, "Scale bounds"; on the device they are the caller's contract:
// the op never synchronises to read them).
template <Fp8Kind K>
void check_scale_values(const FwdArgs& a, const Layout& L, const FwdParams& p) {
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
  for (const auto& [name, v] : {NamedValues{"q_descale", p.q_type == ElemType::FP8 ? &none : &qd},
                                NamedValues{"p_scale", &ps}, NamedValues{"out_scale", &os}})
    for (float x : *v)
      TORCH_CHECK_VALUE(std::isfinite(1.f / x), name, " = ", x, " has no finite float32 reciprocal (the kernels ",
                        "multiply by 1 / ", name, "): it must be at least ", 1.f / kFMax);
  // P = 1 (every row's largest probability in a tile) quantizes to a non-zero code, or l = 0: p_scale
  // < 2 / (the smallest subnormal of the FP8 type).
  for (float x : ps)
    TORCH_CHECK_VALUE(PQuantize<K>{1.f / x}(1.f) > 0.f, "p_scale = ", x,
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
void check_sinks(const FwdArgs& a, const Layout& L) {
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

// What the index checks learned: the keys of each sequence (empty when unknown on the host) and the
// exact maximum q length (-1 when unknown).
struct IndexInfo {
  std::vector<int64_t> k_lens;
  int64_t max_q_len = -1;
};

// Host index tensors are always checked. Device ones only when the caller left a max_seqlen unknown
// (0): deriving it needs a host copy anyway, so the copy is checked too. With both bounds given the
// op never synchronises (graph capture), and the kernels clamp instead.
IndexInfo check_index_values(const FwdArgs& a, const Layout& L) {
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
  IndexInfo info;
  if (cu_q) {
    check_cu_seqlens(*cu_q, "cu_seqlens_q", L.B, "", L.T, "q.shape[0]");
    info.max_q_len = max_diff(*cu_q);
  }
  if (cu_k)
    check_cu_seqlens(*cu_k, "cu_seqlens_k", L.B, std::string(": ").append(L.batch_from).c_str(),
                     L.varlen_k ? k.size(0) : -1, "k.shape[0]");
  // Keys each sequence may use: dense Sk, varlen its cu_seqlens_k span, paged whatever its table holds.
  std::vector<int64_t>& k_lens = info.k_lens;
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
  return info;
}

// Strides of a [B, S, H, D] (batch = dim 0; a cache's block) or [T, H, D] (no batch) tensor.
void set_strides(const at::Tensor& t, int64_t* batch, int64_t* row, int64_t* head) {
  const int64_t o = t.dim() - 3;
  *batch = o ? t.stride(0) : 0;
  *row = t.stride(o);
  *head = t.stride(o + 1);
}

void fill_params(const FwdArgs& a, const Layout& L, const IndexInfo& info, FwdParams& p) {
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
  p.seqlen_q = static_cast<int32_t>(L.varlen_q ? (info.max_q_len >= 0 ? info.max_q_len : a.max_seqlen_q) : q.size(1));
  if (!L.paged && !L.varlen_k) {
    p.seqlen_k = static_cast<int32_t>(k.size(1));
  } else if (!info.k_lens.empty()) {
    p.seqlen_k = static_cast<int32_t>(*std::max_element(info.k_lens.begin(), info.k_lens.end()));
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
  p.sinks = a.sinks ? a.sinks->data_ptr<float>() : nullptr;
  p.softmax_scale = static_cast<float>(a.softmax_scale);
  p.softcap = static_cast<float>(a.softcap);
  p.is_causal = a.causal;
  p.window_left = static_cast<int32_t>(a.window_left);
  p.window_right = static_cast<int32_t>(a.causal ? 0 : a.window_right);
  p.kv_tile = static_cast<int32_t>(a.kv_tile);
}

at::Tensor make_lse(const FwdArgs& a, const Layout& L, FwdParams& p) {
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

void check_no_overlap(const at::Tensor& dst, const char* dst_name,
                      const std::vector<std::pair<const char*, const at::Tensor*>>& inputs) {
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

bool is_supported_head_dim(int64_t d) {
  for (const int32_t h : kHeadDims)
    if (h == d) return true;
  return false;
}

bool is_fp8(at::ScalarType t) { return t == at::kFloat8_e4m3fn || t == at::kFloat8_e4m3fnuz; }

Fp8Kind fp8_kind_of(at::ScalarType t, const char* arg) {
  TORCH_CHECK_TYPE(is_fp8(t), arg, " must be float8_e4m3fn or float8_e4m3fnuz, got ", t);
  return t == at::kFloat8_e4m3fn ? Fp8Kind::E4M3FN : Fp8Kind::E4M3FNUZ;
}

FwdArgs forward_args(const c10::FunctionSchema& schema, const torch::jit::Stack& stack) {
  const size_t n = schema.arguments().size();
  const auto args = torch::jit::last(stack, n);
  size_t read = 0;
  auto arg = [&](const char* name) -> const c10::IValue& {
    const auto i = schema.argumentIndexWithName(name);
    TORCH_INTERNAL_ASSERT(i.has_value(), schema.name(), " has no argument ", name);
    ++read;
    return args[*i];
  };
  FwdArgs a;
  a.q = arg("q").toTensor();
  a.k = arg("k").toTensor();
  a.v = arg("v").toTensor();
  a.out = arg("out").toTensor();
  a.cu_seqlens_q = arg("cu_seqlens_q").toOptional<at::Tensor>();
  a.cu_seqlens_k = arg("cu_seqlens_k").toOptional<at::Tensor>();
  a.seqused_k = arg("seqused_k").toOptional<at::Tensor>();
  a.max_seqlen_q = arg("max_seqlen_q").toInt();
  a.max_seqlen_k = arg("max_seqlen_k").toInt();
  a.block_table = arg("block_table").toOptional<at::Tensor>();
  a.softmax_scale = arg("softmax_scale").toDouble();
  a.causal = arg("causal").toBool();
  a.window_left = arg("window_left").toInt();
  a.window_right = arg("window_right").toInt();
  a.softcap = arg("softcap").toDouble();
  a.q_descale = arg("q_descale").toOptional<at::Tensor>();
  a.k_descale = arg("k_descale").toOptional<at::Tensor>();
  a.v_descale = arg("v_descale").toOptional<at::Tensor>();
  a.p_scale = arg("p_scale").toOptional<at::Tensor>();
  a.out_scale = arg("out_scale").toOptional<at::Tensor>();
  a.return_softmax_lse = arg("return_softmax_lse").toBool();
  a.kv_tile = arg("kv_tile").toInt();
  a.sinks = arg("sinks").toOptional<at::Tensor>();
  TORCH_INTERNAL_ASSERT(read == n, schema.name(), " has ", n, " arguments, FwdArgs reads ", read);
  return a;
}

FwdPlan make_fwd_params(const FwdArgs& a) {
  FwdParams p;
  check_dtypes(a, p);
  check_devices(a);
  const Layout L = check_layout(a);
  check_no_overlap(a.out, "out", named_tensors(a));
  check_scalars(a);
  p.q_descale_head_stride = check_scale_shape(a.q_descale, "q_descale", L.H, "q.shape[-2]");
  p.k_descale_head_stride = check_scale_shape(a.k_descale, "k_descale", L.Hkv, "k.shape[-2]");
  p.v_descale_head_stride = check_scale_shape(a.v_descale, "v_descale", L.Hkv, "k.shape[-2]");
  check_scale_shape(a.p_scale, "p_scale", 1, "");
  check_scale_shape(a.out_scale, "out_scale", 1, "");
  check_sinks(a, L);
  if (p.fp8_kind == Fp8Kind::E4M3FN) {
    check_scale_values<Fp8Kind::E4M3FN>(a, L, p);
  } else {
    check_scale_values<Fp8Kind::E4M3FNUZ>(a, L, p);
  }
  const IndexInfo info = check_index_values(a, L);
  fill_params(a, L, info, p);
  FwdPlan plan;
  plan.lse = make_lse(a, L, p);
  plan.params = p;
  plan.empty = p.batch == 0 || p.num_heads == 0 || p.seqlen_q == 0 || (L.varlen_q && L.T == 0);
  return plan;
}

}  // namespace fp8attn
