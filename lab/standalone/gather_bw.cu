// Read bandwidth of a paged FP8 KV cache [pages, 16 tokens, 8 kv heads, 128] (K and V: 537 MB, the
// 32 x 8k decode row) in the orders a decode kernel can read it, to know each order's ceiling before
// tuning a kernel that uses it:
//   stream   every block a contiguous slice, 16-byte loads (the copy ceiling of these bytes)
//   head     one kv head's 16 rows of a page per TMA box: 16 rows of 128 B, 1 KB apart, as the decode
//            kernels read (fwd_decode*: 8 blocks, one per kv head, share each page)
//   page     all 8 heads of a page per TMA box (16 KB contiguous)
// In the TMA orders every warp runs its own ring of `stages` K + V boxes on per-stage mbarriers, as
// the decode kernels do, and consumes each landed stage (one 16-byte word per lane); as many blocks
// per SM as the ring's shared memory allows.
//   gather_bw [REPS]     (default 20; median per variant)
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "cuda_check.h"
#include "kernels/arch/nv_tma.h"
#include "kernels/arch/nv_wgmma.h"

using namespace fp8attn;

constexpr int kPage = 16, kHkv = 8, kD = 128;
constexpr int64_t kPageBytes = int64_t{kPage} * kHkv * kD;  // one of K / V

__global__ void stream_read(const uint4* k, const uint4* v, int64_t n, uint32_t* sink) {
  uint32_t acc = 0;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    const uint4 a = __ldcs(k + i), b = __ldcs(v + i);
    acc ^= a.x ^ a.w ^ b.y ^ b.z;
  }
  if (acc == 0x12345678u) sink[0] = acc;
}

// kHead: boxes of one kv head (2 KB), else of a whole page (16 KB). Block b reads a contiguous range
// of pages (of head b % 8 in head mode); warp w its pages w, w + warps, ...
template <bool kHead>
__global__ void tma_read(const __grid_constant__ CUtensorMap kmap, const __grid_constant__ CUtensorMap vmap,
                         int pages, int stages, uint32_t* sink) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  extern __shared__ __align__(128) uint8_t smem[];
  constexpr uint32_t kBox = kHead ? kPage * kD : kPageBytes;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, warps = blockDim.x / 32;
  uint64_t* bars = reinterpret_cast<uint64_t*>(smem) + 8 * warp;
  uint8_t* ring = smem + 1024 + static_cast<size_t>(warp) * stages * 2 * kBox;  // (128-byte aligned boxes)
  const int groups = kHead ? gridDim.x / kHkv : gridDim.x;
  const int head = kHead ? blockIdx.x % kHkv : 0, grp = kHead ? blockIdx.x / kHkv : blockIdx.x;
  const int p0 = static_cast<int>(int64_t{pages} * grp / groups), p1 = static_cast<int>(int64_t{pages} * (grp + 1) / groups);
  if (lane == 0) {
    for (int s = 0; s < stages; ++s) nv::mbar_init(&bars[s], 1);
    nv::fence_mbarrier_init();
  }
  __syncwarp();
  const auto issue = [&](int page, int s) {
    if (lane == 0) {
      nv::mbar_arrive_expect_tx(&bars[s], 2 * kBox);
      nv::tma_load_4d(ring + s * 2 * kBox, &kmap, 0, head, 0, page, &bars[s]);
      nv::tma_load_4d(ring + s * 2 * kBox + kBox, &vmap, 0, head, 0, page, &bars[s]);
    }
  };
  int n = 0;
  for (int pg = p0 + warp; pg < p1 && n < stages; pg += warps, ++n) issue(pg, n);
  uint32_t acc = 0;
  int i = 0;
  for (int pg = p0 + warp; pg < p1; pg += warps, ++i) {
    const int s = i % stages;
    nv::mbar_wait(&bars[s], (i / stages) & 1);
    const uint4 a = reinterpret_cast<const uint4*>(ring + s * 2 * kBox)[lane];
    acc ^= a.x ^ a.w;
    __syncwarp();
    nv::fence_proxy_async();
    const int next = pg + stages * warps;
    if (next < p1) issue(next, s);
  }
  if (acc == 0x12345678u) sink[0] = acc;
#endif
}

bool page_map(CUtensorMap* map, const void* base, int pages, bool head) {
  const int64_t dims[4] = {kD, kHkv, kPage, pages};
  const int64_t strides[3] = {kD, int64_t{kHkv} * kD, kPageBytes};
  const int box[4] = {kD, head ? 1 : kHkv, kPage, 1};
  return nv::encode_tiled_map(map, base, 4, dims, strides, box, CU_TENSOR_MAP_SWIZZLE_NONE);
}

int main(int argc, char** argv) {
  const int reps = argc > 1 ? std::atoi(argv[1]) : 20;
  int sms = 0;
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  const int pages = 32 * 8192 / kPage;
  const int64_t bytes = 2 * int64_t{pages} * kPageBytes;
  uint8_t *k = nullptr, *v = nullptr;
  uint32_t* sink = nullptr;
  CK(cudaMalloc(&k, bytes / 2));
  CK(cudaMalloc(&v, bytes / 2));
  CK(cudaMalloc(&sink, 4));
  CK(cudaMemset(k, 0x11, bytes / 2));
  CK(cudaMemset(v, 0x22, bytes / 2));
  uint8_t* flush = nullptr;
  const size_t flush_bytes = size_t{256} << 20;
  CK(cudaMalloc(&flush, flush_bytes));
  CUtensorMap km[2], vm[2];
  for (int h = 0; h < 2; ++h)
    if (!page_map(&km[h], k, pages, h == 0) || !page_map(&vm[h], v, pages, h == 0)) {
      std::printf("tensor map encoding failed\n");
      return 2;
    }
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  const auto time_us = [&](auto&& launch) {
    launch();
    CK(cudaDeviceSynchronize());
    std::vector<float> t;
    for (int r = 0; r < reps; ++r) {
      CK(cudaMemsetAsync(flush, r, flush_bytes));  // the cache out of L2
      CK(cudaEventRecord(e0));
      launch();
      CK(cudaEventRecord(e1));
      CK(cudaEventSynchronize(e1));
      float ms = 0.f;
      CK(cudaEventElapsedTime(&ms, e0, e1));
      t.push_back(1e3f * ms);
    }
    CK(cudaGetLastError());
    std::sort(t.begin(), t.end());
    return t[t.size() / 2];
  };
  std::printf("%d SMs; paged FP8 cache [%d pages, %d, %d, %d], K + V %.0f MB; median of %d reps after an L2 flush\n",
              sms, pages, kPage, kHkv, kD, bytes / 1e6, reps);
  std::printf("%-8s %6s %6s %6s %9s %8s\n", "order", "warps", "stages", "blk/SM", "us", "GB/s");
  const int64_t n16 = bytes / 2 / 16;
  for (int bps : {4, 8, 16}) {
    const float us = time_us([&] {
      stream_read<<<sms * bps, 256>>>(reinterpret_cast<const uint4*>(k), reinterpret_cast<const uint4*>(v), n16, sink);
    });
    std::printf("%-8s %6d %6s %6d %9.1f %8.0f\n", "stream", 8, "-", bps, us, bytes / (us * 1e3));
  }
  struct Cfg {
    bool head;
    int warps, stages;
  };
  const Cfg cfgs[] = {{true, 4, 2}, {true, 4, 3}, {true, 4, 4}, {true, 4, 6}, {true, 8, 2},
                      {false, 1, 2}, {false, 2, 2}, {false, 1, 3}, {false, 4, 1}};
  for (const Cfg& c : cfgs) {
    const int box = c.head ? kPage * kD : static_cast<int>(kPageBytes);
    const int smem = 1024 + c.warps * c.stages * 2 * box;
    const int bps = std::min(32, (227 * 1024) / (smem + 1024));
    if (bps < 1) continue;
    auto* kern = c.head ? &tma_read<true> : &tma_read<false>;
    CK(cudaFuncSetAttribute(reinterpret_cast<const void*>(kern), cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    const int grid = c.head ? (sms * bps / kHkv) * kHkv : sms * bps;
    const int h = c.head ? 0 : 1;
    const float us = time_us([&] { kern<<<grid, 32 * c.warps, smem>>>(km[h], vm[h], pages, c.stages, sink); });
    std::printf("%-8s %6d %6d %6d %9.1f %8.0f\n", c.head ? "head" : "page", c.warps, c.stages, bps, us, bytes / (us * 1e3));
  }
  return 0;
}
