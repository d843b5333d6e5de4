// Event recorder for the FP8ATTN_TRACE hooks (csrc/kernels/trace.h), included first by the
// standalone checks when built with -DFP8ATTN_EVENT_TRACE (build.sh builds *_trace binaries): lane
// 0 of every warp of the first kTraceBlocks blocks (linear over blockIdx.x, blockIdx.y) appends
// (event, %globaltimer ns) to a device buffer; trace_dump prints them relative to the earliest one.
#pragma once
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "cuda_check.h"

constexpr int kTraceBlocks = 4, kTraceWarps = 12, kTraceEvents = 512;
__device__ unsigned long long g_trace[kTraceBlocks][kTraceWarps][kTraceEvents];
__device__ int g_trace_n[kTraceBlocks][kTraceWarps];

__device__ __forceinline__ void trace_record(int event) {
  const int b = blockIdx.x + gridDim.x * blockIdx.y, w = threadIdx.x / 32;
  if (b >= kTraceBlocks || w >= kTraceWarps || threadIdx.x % 32 != 0) return;
  const int n = g_trace_n[b][w]++;
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  if (n < kTraceEvents) g_trace[b][w][n] = (static_cast<unsigned long long>(event) << 56) | (t & ((1ull << 56) - 1));
}
#define FP8ATTN_TRACE(event) trace_record(event)

inline void trace_reset() {
  const std::vector<int> zero(kTraceBlocks * kTraceWarps, 0);
  CK(cudaMemcpyToSymbol(g_trace_n, zero.data(), zero.size() * sizeof(int)));
}

// Prints "event@ns" per block and recorded warp (every warp_step-th warp from 0), at most
// max_events per warp.
inline void trace_dump(int warp_step, int max_events) {
  constexpr unsigned long long kMask = (1ull << 56) - 1;
  std::vector<unsigned long long> ev(static_cast<size_t>(kTraceBlocks) * kTraceWarps * kTraceEvents);
  std::vector<int> n(kTraceBlocks * kTraceWarps);
  CK(cudaMemcpyFromSymbol(ev.data(), g_trace, ev.size() * sizeof(unsigned long long)));
  CK(cudaMemcpyFromSymbol(n.data(), g_trace_n, n.size() * sizeof(int)));
  unsigned long long t0 = ~0ull;
  for (int i = 0; i < kTraceBlocks * kTraceWarps; ++i)
    for (int j = 0; j < std::min(n[i], kTraceEvents); ++j) t0 = std::min(t0, ev[static_cast<size_t>(i) * kTraceEvents + j] & kMask);
  for (int b = 0; b < kTraceBlocks; ++b)
    for (int w = 0; w < kTraceWarps; w += warp_step) {
      const int i = b * kTraceWarps + w;
      if (n[i] == 0) continue;
      std::printf("block %d warp %2d (%d events):", b, w, n[i]);
      for (int j = 0; j < std::min({n[i], kTraceEvents, max_events}); ++j) {
        const unsigned long long e = ev[static_cast<size_t>(i) * kTraceEvents + j];
        std::printf(" %d@%llu", static_cast<int>(e >> 56), (e & kMask) - t0);
      }
      std::printf("\n");
    }
}
