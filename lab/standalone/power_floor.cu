// The board power of one block per SM doing (almost) nothing, to split a kernel's power at the H200's
// limit into a floor that every cycle pays and the work's own share (lab-notes:lab/hopper-wgmma-diary.md, twelfth
// session): 384 threads per block, like the attention kernels, for SECONDS of wall time each mode:
//   0  every warp in __nanosleep (resident, no issue)
//   1  every warp in a dependent FMA chain (one instruction per ~4 cycles per warp)
//   2  every warp in four independent FMA chains (the FMA pipe about as busy as issue allows)
// Run under an nvidia-smi sampler, one mode per process:
//   nvidia-smi --query-gpu=power.draw,clocks.sm --format=csv,noheader,nounits -lms 100 & power_floor MODE [SECONDS]
#include <cstdio>
#include <cstdlib>

#include "cuda_check.h"

__device__ unsigned long long now_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__global__ void __launch_bounds__(384, 1) spin(int mode, unsigned long long end_ns, float* sink) {
  float a = threadIdx.x * 1e-3f, b = a + 1.f, c = a + 2.f, d = a + 3.f;
  while (now_ns() < end_ns) {
    if (mode == 0) {
      __nanosleep(1000);
    } else {
#pragma unroll 1
      for (int i = 0; i < 4096; ++i) {
        a = fmaf(a, 0.999f, 1e-3f);
        if (mode == 2) {
          b = fmaf(b, 0.999f, 1e-3f);
          c = fmaf(c, 0.999f, 1e-3f);
          d = fmaf(d, 0.999f, 1e-3f);
        }
      }
    }
  }
  if (a + b + c + d == 1.2345f) sink[threadIdx.x] = a;  // keeps the chains
}

__global__ void read_timer(unsigned long long* out) { *out = now_ns(); }

int main(int argc, char** argv) {
  const int mode = argc > 1 ? std::atoi(argv[1]) : 0;
  const double seconds = argc > 2 ? std::atof(argv[2]) : 3.0;
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  float* sink;
  unsigned long long* d_t;
  CK(cudaMalloc(&sink, 384 * sizeof(float)));
  CK(cudaMalloc(&d_t, sizeof(unsigned long long)));
  // Launches of 0.5 s each (the device's own timer sets their end) until `seconds` have passed.
  const int launches = static_cast<int>(seconds / 0.5 + 0.5);
  for (int i = 0; i < launches; ++i) {
    read_timer<<<1, 1>>>(d_t);
    unsigned long long t;
    CK(cudaMemcpy(&t, d_t, sizeof(t), cudaMemcpyDeviceToHost));
    spin<<<prop.multiProcessorCount, 384>>>(mode, t + 500000000ull, sink);
    CK(cudaDeviceSynchronize());
  }
  CK(cudaGetLastError());
  std::printf("mode %d on %s: %d SMs x 384 threads, %d launches of 0.5 s\n", mode, prop.name,
              prop.multiProcessorCount, launches);
  CK(cudaFree(sink));
  CK(cudaFree(d_t));
  return 0;
}
