// How many thread-block clusters of the decode kernels fit on the card at once
// (cudaOccupancyMaxActiveClusters), per cluster size along the split dimension, against the blocks per
// SM the kernel's registers and shared memory allow: whether a cluster launch of the splits of every
// (batch, kv head) can run as one wave. No inputs are read (occupancy only).
//   cluster_occupancy
#include <cstdio>

#include "cuda_check.h"
#include "kernels/fwd/pipeline_decode.h"

using namespace fp8attn;
using Prob = FwdProblem<128, Fp8Kind::E4M3FN, MaskKind::kBand>;

template <class Policy>
void report(const char* name) {
  auto* kern = &fwd_kernel_decode<Prob, Policy>;
  CK(cudaFuncSetAttribute(reinterpret_cast<const void*>(kern), cudaFuncAttributeMaxDynamicSharedMemorySize,
                          Policy::kSmemBytes));
  CK(cudaFuncSetAttribute(reinterpret_cast<const void*>(kern), cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
  int per_sm = 0, sms = 0;
  CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kern, Policy::kThreads, Policy::kSmemBytes));
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  std::printf("%s: %d blocks per SM x %d SMs = %d slots (smem %d B)\n", name, per_sm, sms, per_sm * sms,
              Policy::kSmemBytes);
  for (int c = 1; c <= 16; ++c) {
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(1, c * 64);
    cfg.blockDim = dim3(Policy::kThreads);
    cfg.dynamicSmemBytes = Policy::kSmemBytes;
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeClusterDimension;
    attr[0].val.clusterDim.x = 1;
    attr[0].val.clusterDim.y = c;
    attr[0].val.clusterDim.z = 1;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
    int clusters = 0;
    const cudaError_t e = cudaOccupancyMaxActiveClusters(&clusters, kern, &cfg);
    if (e != cudaSuccess) {
      std::printf("  cluster %2d: %s\n", c, cudaGetErrorString(e));
      (void)cudaGetLastError();
      continue;
    }
    std::printf("  cluster %2d: %4d clusters = %4d blocks (%.0f %% of the slots)\n", c, clusters, clusters * c,
                100.0 * clusters * c / (per_sm * sms));
  }
}

int main() {
  report<FwdPolicyNvDecode<Prob, 1>>("fwd_decode8_hd128_e4m3fn_band_kv64");
  report<FwdPolicyNvDecode<Prob, 2>>("fwd_decode16_hd128_e4m3fn_band_kv64");
  return 0;
}
