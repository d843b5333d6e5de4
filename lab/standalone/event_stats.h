// Cycle accounting for the FP8ATTN_TRACE hooks (csrc/kernels/trace.h), included first by the
// standalone checks when built with -DFP8ATTN_EVENT_STATS (build.sh builds *_stats binaries): lane 0
// of every warp of every block adds the SM cycles since its previous event to that event's sum
// (a fire-and-forget global reduction; the previous timestamp lives in shared memory), so
// stat_dump reports where each role's time goes per step and per item over a whole launch --
// what the event trace could not: it stores every event, which made traced runs 1.76x slower
// than plain ones (lab-notes:lab/h200-logs/45-*), and covers only the first blocks.
// Also the phase of the two consumer warpgroups: at each of warp 8's step starts (its v_full passed),
// the cycles since warp 4's latest one, as a histogram -- near 0 the two run in lockstep (their
// softmax and tensor work at the same time, not overlapped), near half a step they alternate.
#pragma once
#include <cstdint>
#include <cstdio>
#include <vector>

#include "cuda_check.h"
#define FP8ATTN_TRACE(event) stat_record(event)  // (before trace.h, which otherwise defines it empty)
#include "kernels/trace.h"

constexpr int kStatWarps = 12, kStatEvents = 32, kPhaseBins = 40, kPhaseBin = 128;  // cycles per bin
__device__ unsigned long long g_stat_cycles[kStatWarps][kStatEvents];
__device__ unsigned long long g_stat_count[kStatWarps][kStatEvents];
__device__ unsigned long long g_phase[kPhaseBins];
__constant__ unsigned c_stat_gen;

__device__ __forceinline__ void stat_record(int event) {
  __shared__ unsigned s_gen[kStatWarps];
  __shared__ long long s_last[kStatWarps];
  __shared__ long long s_go4;  // warp 4's latest step start (valid once warp 4 recorded one this launch)
  const int w = threadIdx.x / 32;
  if (w >= kStatWarps || threadIdx.x % 32 != 0) return;
  const long long t = clock64();
  // (the block index in the tag: an earlier block of the same launch may have used this shared memory)
  const unsigned tag = c_stat_gen ^ (blockIdx.x + gridDim.x * blockIdx.y);
  if (event == fp8attn::kTraceConsumerStepGo && s_gen[4] == tag) {
    if (w == 4) s_go4 = t;
    if (w == 8) {
      const long long d = (t - s_go4) / kPhaseBin;
      atomicAdd(&g_phase[d < 0 ? 0 : d >= kPhaseBins ? kPhaseBins - 1 : d], 1ull);
    }
  }
  if (s_gen[w] == tag) {
    atomicAdd(&g_stat_cycles[w][event], static_cast<unsigned long long>(t - s_last[w]));
    atomicAdd(&g_stat_count[w][event], 1ull);
  } else {  // this warp's first event of the launch: nothing before it to account
    s_gen[w] = tag;
  }
  s_last[w] = t;
}

// Before an accounted launch: clears the sums and starts a new generation.
inline void stat_reset() {
  static unsigned gen = 0x2545f491u;
  gen = gen * 1664525u + 1013904223u;
  CK(cudaMemcpyToSymbol(c_stat_gen, &gen, sizeof(gen)));
  const std::vector<unsigned long long> zero(kStatWarps * kStatEvents, 0);
  CK(cudaMemcpyToSymbol(g_stat_cycles, zero.data(), zero.size() * sizeof(unsigned long long)));
  CK(cudaMemcpyToSymbol(g_stat_count, zero.data(), zero.size() * sizeof(unsigned long long)));
  CK(cudaMemcpyToSymbol(g_phase, zero.data(), kPhaseBins * sizeof(unsigned long long)));
}

// Per event of the given warps: how often it happened and the mean cycles since the warp's previous
// event (the time that led to it: for a wait's "passed" event, the wait), named by `names`.
inline void stat_dump(const std::vector<int>& warps, const char* (*names)(int)) {
  std::vector<unsigned long long> cyc(kStatWarps * kStatEvents), cnt(kStatWarps * kStatEvents);
  CK(cudaMemcpyFromSymbol(cyc.data(), g_stat_cycles, cyc.size() * sizeof(unsigned long long)));
  CK(cudaMemcpyFromSymbol(cnt.data(), g_stat_count, cnt.size() * sizeof(unsigned long long)));
  std::vector<unsigned long long> ph(kPhaseBins);
  CK(cudaMemcpyFromSymbol(ph.data(), g_phase, ph.size() * sizeof(unsigned long long)));
  unsigned long long n = 0;
  for (unsigned long long x : ph) n += x;
  if (n) {
    std::printf("  consumer phase (warp 8's step start - warp 4's latest, %d-cycle bins, %% of %llu):", kPhaseBin, n);
    for (int i = 0; i < kPhaseBins; ++i) std::printf(" %.0f", 100.0 * ph[i] / n);
    std::printf("\n");
  }
  for (int w : warps) {
    std::printf("  warp %d:\n", w);
    for (int e = 0; e < kStatEvents; ++e) {
      const size_t i = static_cast<size_t>(w) * kStatEvents + e;
      if (cnt[i] == 0) continue;
      std::printf("    %-28s %10llu x %9.1f cycles (total %6.2f Gcycles)\n", names(e), cnt[i],
                  static_cast<double>(cyc[i]) / cnt[i], cyc[i] / 1e9);
    }
  }
}
