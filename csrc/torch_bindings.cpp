// Op schemas (schema first, as vLLM does) and the Python module that loads them.
#include <Python.h>
#include <torch/library.h>

#include <string>

#include "fwd_args.h"

TORCH_LIBRARY(fp8attn, m) {
  const std::string args = fp8attn::kForwardArgs;
  m.def(("forward(" + args + ") -> Tensor").c_str());
  // The kernel forward would run for these arguments: its name, pipeline and KV tile ("cpu", "cpu" and
  // the tile on the CPU); out is not written. For tests and benchmarks that need to know which kernel
  // served a call and at which tile its oracle quantizes P.
  m.def(("forward_kernel(" + args + ") -> (str name, str pipeline, int kv_tile)").c_str());
  m.def(
      "write_kv_cache(Tensor key, Tensor value, Tensor(a!) key_cache, Tensor(b!) value_cache, "
      "Tensor slot_mapping, Tensor? k_scale, Tensor? v_scale) -> ()");
}

// `import fp8attn._C` loads the library and so registers the ops; the module itself is empty.
static struct PyModuleDef fp8attn_module = {PyModuleDef_HEAD_INIT, "_C", nullptr, -1, nullptr};
PyMODINIT_FUNC PyInit__C(void) { return PyModule_Create(&fp8attn_module); }
