// Op schemas (schema first, as vLLM does) and the Python module that loads them.
#include <Python.h>
#include <torch/library.h>

#include "ops.h"

namespace fp8attn {

FwdArgs pack_forward_args(FP8ATTN_FORWARD_PARAMS) {
  FwdArgs a;
  a.q = q;
  a.k = k;
  a.v = v;
  a.out = out;
  a.cu_seqlens_q = cu_seqlens_q;
  a.cu_seqlens_k = cu_seqlens_k;
  a.seqused_k = seqused_k;
  a.max_seqlen_q = max_seqlen_q;
  a.max_seqlen_k = max_seqlen_k;
  a.block_table = block_table;
  a.softmax_scale = softmax_scale;
  a.causal = causal;
  a.window_left = window_left;
  a.window_right = window_right;
  a.softcap = softcap;
  a.q_descale = q_descale;
  a.k_descale = k_descale;
  a.v_descale = v_descale;
  a.p_scale = p_scale;
  a.out_scale = out_scale;
  a.return_softmax_lse = return_softmax_lse;
  a.kv_tile = kv_tile;
  return a;
}

}  // namespace fp8attn

TORCH_LIBRARY(fp8attn, m) {
  m.def(
      "forward(Tensor q, Tensor k, Tensor v, Tensor(a!) out, Tensor? cu_seqlens_q, Tensor? cu_seqlens_k, "
      "Tensor? seqused_k, int max_seqlen_q, int max_seqlen_k, Tensor? block_table, float softmax_scale, "
      "bool causal, int window_left, int window_right, float softcap, Tensor? q_descale, Tensor? k_descale, "
      "Tensor? v_descale, Tensor? p_scale, Tensor? out_scale, bool return_softmax_lse, int kv_tile) -> Tensor");
  // The GPU kernel instance forward would run for these arguments ("cpu" on the CPU); out is not
  // written. For tests and benchmarks that need to know which pipeline served a call.
  m.def(
      "forward_kernel(Tensor q, Tensor k, Tensor v, Tensor(a!) out, Tensor? cu_seqlens_q, Tensor? cu_seqlens_k, "
      "Tensor? seqused_k, int max_seqlen_q, int max_seqlen_k, Tensor? block_table, float softmax_scale, "
      "bool causal, int window_left, int window_right, float softcap, Tensor? q_descale, Tensor? k_descale, "
      "Tensor? v_descale, Tensor? p_scale, Tensor? out_scale, bool return_softmax_lse, int kv_tile) -> str");
  m.def(
      "write_kv_cache(Tensor key, Tensor value, Tensor(a!) key_cache, Tensor(b!) value_cache, "
      "Tensor slot_mapping, Tensor? k_scale, Tensor? v_scale) -> ()");
}

// `import fp8attn._C` loads the library and so registers the ops; the module itself is empty.
static struct PyModuleDef fp8attn_module = {PyModuleDef_HEAD_INIT, "_C", nullptr, -1, nullptr};
PyMODINIT_FUNC PyInit__C(void) { return PyModule_Create(&fp8attn_module); }
