// The commit this extension was built from (setup.py passes it to CMake; "-dirty": with uncommitted
// changes; "unknown" outside the tree's own git repository): what a benchmark or a bug report records,
// wherever the wheel is.
#include <torch/library.h>

#include <string>

#ifndef FP8ATTN_COMMIT
#define FP8ATTN_COMMIT "unknown"
#endif

namespace {
std::string build_commit() { return FP8ATTN_COMMIT; }
}  // namespace

TORCH_LIBRARY_FRAGMENT(fp8attn, m) { m.def("build_commit() -> str", &build_commit); }
