// Event recorder for the FP8ATTN_TRACE hooks (csrc/kernels/trace.h), included first by the
// standalone checks when built with -DFP8ATTN_EVENT_TRACE (build.sh builds *_trace binaries): lane
// 0 of every warp of the first kTraceBlocks blocks (linear over blockIdx.x, blockIdx.y) appends
// (event, %globaltimer ns) to a device buffer; trace_dump prints them relative to the earliest one.
// The per-warp event count lives in shared memory (a counter in global memory put a dependent
// global load on every event: the traced blocks ran at half speed, lab-notes:lab/h200-logs/43-*); it is reset
// when the launch generation (set by trace_reset, read from constant memory) changes, and only
// stored to global memory, for trace_dump.
#pragma once
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "cuda_check.h"

constexpr int kTraceBlocks = 4, kTraceWarps = 12, kTraceEvents = 512;
__device__ unsigned long long g_trace[kTraceBlocks][kTraceWarps][kTraceEvents];
__device__ int g_trace_n[kTraceBlocks][kTraceWarps];
__constant__ unsigned c_trace_gen;

__device__ __forceinline__ void trace_record(int event) {
  __shared__ unsigned s_gen[kTraceWarps], s_n[kTraceWarps];
  const int b = blockIdx.x + gridDim.x * blockIdx.y, w = threadIdx.x / 32;
  if (b >= kTraceBlocks || w >= kTraceWarps || threadIdx.x % 32 != 0) return;
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  // (the block index in the tag: an earlier block of the same launch may have used this shared memory)
  const unsigned tag = c_trace_gen ^ static_cast<unsigned>(b);
  if (s_gen[w] != tag) {  // this warp's first event of the launch
    s_gen[w] = tag;
    s_n[w] = 0;
  }
  const unsigned n = s_n[w]++;  // (unsigned: untraced timing launches may leave any value)
  g_trace_n[b][w] = static_cast<int>(n < kTraceEvents ? n + 1 : kTraceEvents);
  if (n < kTraceEvents) g_trace[b][w][n] = (static_cast<unsigned long long>(event) << 56) | (t & ((1ull << 56) - 1));
}
#define FP8ATTN_TRACE(event) trace_record(event)
#include "kernels/trace.h"  // the event names (no kernel includes it)

// Before a traced launch: clears the counts and starts a new generation (so the shared counters,
// whatever an earlier launch left in that shared memory, restart at 0).
inline void trace_reset() {
  static unsigned gen = 0x9e3779b9u;
  gen = gen * 1664525u + 1013904223u;
  CK(cudaMemcpyToSymbol(c_trace_gen, &gen, sizeof(gen)));
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
