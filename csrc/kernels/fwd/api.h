// Host-side API of the GPU forward kernels for the torch entry point (no kernel code): the
// generated table and selection (dispatch.h) and each kernel's launcher (generated fwd_launch.cu).
#pragma once
#include <cuda_runtime.h>

#include "dispatch.h"

namespace fp8attn {

using FwdLaunchFn = void (*)(const FwdParams&, cudaStream_t);

// The launcher of a kernel of fwd_table().
FwdLaunchFn fwd_launcher(const FwdKernel& k);

}  // namespace fp8attn
