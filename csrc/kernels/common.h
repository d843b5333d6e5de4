// Portability macros shared by the host (CPU implementation), nvcc and hipcc/clang builds.
#pragma once

#if defined(__CUDACC__) || defined(__HIPCC__)
#define FP8ATTN_HD __host__ __device__ __forceinline__
#define FP8ATTN_DEVICE __device__ __forceinline__
#else
#define FP8ATTN_HD inline
#define FP8ATTN_DEVICE inline
#endif

#if (defined(__CUDA_ARCH__) || defined(__HIP_DEVICE_COMPILE__))
#define FP8ATTN_DEVICE_PASS 1
#else
#define FP8ATTN_DEVICE_PASS 0
#endif

// Event-trace hooks of the GPU pipelines: nothing (their argument is not even compiled) unless a lab
// build defines FP8ATTN_TRACE before including the kernels, and then includes kernels/trace.h for
// the event names.
#ifndef FP8ATTN_TRACE
#define FP8ATTN_TRACE(event) ((void)0)
#endif
