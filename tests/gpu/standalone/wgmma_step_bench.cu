// Cycles per KV step of the wgmma consumer loop with nothing else running: the two consumer
// warpgroups of the Hopper pipeline issue S = Q.K^T, O += P8.Vt and l += P8.1 (the pipeline's own
// issue_qk / issue_pv) on one resident tile and run its softmax, in the kernel's wait order, for
// `steps` steps -- no global memory, no producer, no mbarriers. Parts are switched off one at a
// time to measure the fixed cost per step that the part-removed kernel builds found
// (docs/h200-logs/44-*: without any softmax the kernel still takes twice its tensor time per step).
// Operands are constant FP8 codes: the results are not checked, only the time.
//   wgmma_step_bench [STEPS]     (build: tests/gpu/standalone/build.sh)
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "cuda_check.h"
#include "kernels/fwd/kernel_wgmma.h"

using namespace fp8attn;

// Counts this warp's arrival at named barrier `id` (of `threads`) without waiting (the ping-pong hand-over).
__device__ void named_barrier_arrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

enum StepFlags : int {
  kS = 1,          // issue S = Q.K^T
  kPV = 2,         // issue O += P8.Vt, l += P8.1
  kSoftmax = 4,    // the pipeline's softmax on S, then the rescale
  kOneWg = 8,      // only consumer warpgroup 0 runs (the other exits)
  kTurns = 16,     // ping-pong: issue in turns, the turn handed on right after the issue
  kLateHand = 32,  // with kTurns: handed on once S has landed
  kOverlap = 64,   // a never-taken branch on the softmax's P8 codes before the P.V wait, so that
                   // ptxas cannot move that wait above the softmax (the kernel's SASS waits first);
                   // fits 64-key tiles at D 128 and D 64 (at 128 keys and D 128: C7512 and spills)
};

template <int kD, int kBN, int kFlags>
__global__ void __launch_bounds__(384, 1) step_bench(int steps, long long* cycles, float* sink) {
#if FP8ATTN_NV_WGMMA
  using Problem = FwdProblem<kD, Fp8Kind::E4M3FN, MaskKind::kNone>;
  using Policy = FwdPolicyNvWgmma<Problem, kBN>;
  using Pipe = FwdPipelineNvWgmma<Problem, Policy>;
  static_assert(Policy::kThreads == 384, "one producer and two consumer warpgroups");
  extern __shared__ __align__(1024) uint8_t smem_raw[];
  uint8_t* smem = smem_raw + ((1024 - nv::smem_addr(smem_raw) % 1024) % 1024);
  auto* bars = reinterpret_cast<typename Pipe::Barriers*>(smem + Policy::kOffBar);
  // FP8 0.5 (e4m3 0x30) in every operand byte: finite products, no NaN / Inf paths.
  for (int i = threadIdx.x; i < Policy::kOffOnes / 16; i += blockDim.x)
    reinterpret_cast<uint4*>(smem)[i] = make_uint4(0x30303030u, 0x30303030u, 0x30303030u, 0x30303030u);
  Pipe::init(smem, bars);  // the ones tile (and barriers, unused)
  nv::fence_proxy_async();
  __syncthreads();
  const int wg = __shfl_sync(0xffffffffu, static_cast<int>(threadIdx.x / 128), 0);
  if (wg == 0) {  // the producer warpgroup only gives its registers away, as in the kernel
    nv::regs_dealloc<Policy::kProducerRegs>();
    return;
  }
  nv::regs_alloc<Policy::kConsumerRegs>();
  const int w = wg - 1;
  if ((kFlags & kOneWg) && w == 1) return;
  constexpr int kBarTurn = 4;  // + warpgroup
  const auto hand_turn = [&] { named_barrier_arrive(kBarTurn + (w ^ 1), 256); };
  const auto take_turn = [&] { nv::named_barrier_sync(kBarTurn + w, 256); };

  typename Pipe::Consumer cons(w, smem);
  const uint64_t dq = Policy::QK::desc(Pipe::q_buf(smem, 0), Policy::kBlockM, 64 * w, 0);
  FwdState<Policy> st;
  init_state(st);
  float(&acc)[kD / 2] = reinterpret_cast<float(&)[kD / 2]>(st.acc);
  const LogitsTransform lg[2] = {LogitsTransform::make(0.088f, 1.f, 0.f), LogitsTransform::make(0.088f, 1.f, 0.f)};
  const typename Policy::PQuant pq{1.f};
  const int32_t lo[2] = {0, 0}, hi[2] = {1 << 30, 1 << 30};
  const int t = threadIdx.x % 4;
  float s[Pipe::kSElems], lt[4] = {0.f, 0.f, 0.f, 0.f}, alpha[2];
  uint32_t pa[Pipe::kPWords];
#pragma unroll
  for (int i = 0; i < Pipe::kPWords; ++i) pa[i] = 0x30303030u;
#pragma unroll
  for (int i = 0; i < Pipe::kSElems; ++i) s[i] = 0.f;

  if ((kFlags & kTurns) && w == 1) hand_turn();  // warpgroup 0 issues first
  const long long t0 = clock64();
#pragma unroll 1
  for (int i = 0; i < steps; ++i) {
    if (kFlags & kTurns) take_turn();
    nv::fence_operands(acc);
    nv::fence_operands(pa);
    nv::wgmma_fence();
    if (kFlags & kS) cons.issue_qk(s, dq, 0);
    if (kFlags & kPV) cons.issue_pv(acc, lt, pa, 0);
    if ((kFlags & kTurns) && !(kFlags & kLateHand)) hand_turn();
    nv::fence_operands(acc);
    if (kFlags & kS) nv::wgmma_wait<(kFlags & kPV) ? 1 : 0>();
    if ((kFlags & kTurns) && (kFlags & kLateHand)) hand_turn();
    uint32_t pn[Pipe::kPWords];
    if (kFlags & kSoftmax) {
      Pipe::softmax(s, i, false, lo, hi, lg, pq, t, st, alpha, pn);
      if constexpr ((kFlags & kOverlap) != 0) {
        uint32_t all = 0;
#pragma unroll
        for (int k = 0; k < Pipe::kPWords; ++k) all |= pn[k];
        if (all == 0xffffffffu) asm volatile("trap;");  // never: the codes of p >= 0 stay below 0x7f
      }
    } else {
#pragma unroll
      for (int k = 0; k < Pipe::kPWords; ++k) pn[k] = 0x30303030u;  // as the diag/no-softmax kernel build
      // (anything computed from pa or s here makes ptxas serialize the wgmmas, C7513)
    }
    nv::fence_operands(pn);
    nv::wgmma_wait<0>();
    nv::fence_operands(pa);
    st.l[0] += lt[0];
    st.l[1] += lt[2];
    if (kFlags & kSoftmax) Pipe::rescale(alpha, st);
#pragma unroll
    for (int k = 0; k < Pipe::kPWords; ++k) pa[k] = pn[k];
  }
  const long long t1 = clock64();
  if ((kFlags & kTurns) && w == 0) take_turn();  // the turn handed over at the start
  float sum = st.l[0] + st.l[1];
#pragma unroll
  for (int n = 0; n < kD / 2; ++n) sum += acc[n];
  if (sum == 1.2345f) sink[threadIdx.x] = sum;  // keeps the results (never true in practice)
  if (threadIdx.x % 128 == 0) cycles[blockIdx.x * 2 + w] = t1 - t0;
#endif
}

template <int kD, int kBN, int kFlags>
void run(const char* name, int steps, int sms) {
  using Problem = FwdProblem<kD, Fp8Kind::E4M3FN, MaskKind::kNone>;
  using Policy = FwdPolicyNvWgmma<Problem, kBN>;
  auto* kernel = &step_bench<kD, kBN, kFlags>;
  CK(cudaFuncSetAttribute(reinterpret_cast<const void*>(kernel), cudaFuncAttributeMaxDynamicSharedMemorySize,
                          Policy::kSmemBytes));
  long long* d_cycles;
  float* d_sink;
  CK(cudaMalloc(&d_cycles, sizeof(long long) * 2 * sms));
  CK(cudaMalloc(&d_sink, sizeof(float) * 384));
  CK(cudaMemset(d_cycles, 0, sizeof(long long) * 2 * sms));
  cudaEvent_t a, z;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&z));
  kernel<<<sms, 384, Policy::kSmemBytes>>>(steps / 8, d_cycles, d_sink);  // warm-up (clocks)
  CK(cudaEventRecord(a));
  kernel<<<sms, 384, Policy::kSmemBytes>>>(steps, d_cycles, d_sink);
  CK(cudaEventRecord(z));
  CK(cudaEventSynchronize(z));
  CK(cudaGetLastError());
  float ms;
  CK(cudaEventElapsedTime(&ms, a, z));
  std::vector<long long> cyc(2 * sms);
  CK(cudaMemcpy(cyc.data(), d_cycles, sizeof(long long) * 2 * sms, cudaMemcpyDeviceToHost));
  double sum = 0;
  int n = 0;
  for (long long c : cyc)
    if (c > 0) sum += static_cast<double>(c), ++n;
  // "Attention TFLOP/s": both warpgroups' S and P.V counted per step whatever the flags, so the
  // figure compares with the kernel rows of docs/h200-logs/44-* (4 . 64 rows . kBN . kD per warpgroup).
  const double flops = 2.0 * 4.0 * 64 * kBN * kD * steps * sms;
  std::printf("%-34s D %3d kv %3d: %7.0f cycles / step (%d warpgroups), %6.1f ns / step, %6.0f TFLOP/s eq.\n", name,
              kD, kBN, n ? sum / n / steps : 0.0, n / sms, ms * 1e6 / steps, flops / (ms * 1e-3) / 1e12);
  CK(cudaFree(d_cycles));
  CK(cudaFree(d_sink));
}

int main(int argc, char** argv) {
  const int steps = argc > 1 ? std::atoi(argv[1]) : 4096;
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  const int sms = prop.multiProcessorCount;
  std::printf("%s, %d SMs, %d steps per warpgroup\n", prop.name, sms, steps);
  constexpr int kAll = kS | kPV | kSoftmax;
  run<128, 128, kAll>("kernel's step", steps, sms);
  run<128, 128, kS | kPV>("no softmax", steps, sms);
  run<128, 128, kS>("S only", steps, sms);
  run<128, 128, kPV>("P.V + row sums only", steps, sms);
  run<128, 128, kAll | kOneWg>("kernel's step, one warpgroup", steps, sms);
  run<128, 128, kS | kPV | kOneWg>("no softmax, one warpgroup", steps, sms);
  run<128, 128, kSoftmax | kOneWg>("softmax only, one warpgroup", steps, sms);
  run<128, 128, kSoftmax>("softmax only", steps, sms);
  run<128, 128, kAll | kTurns>("ping-pong, hand on at issue", steps, sms);
  run<128, 128, kAll | kTurns | kLateHand>("ping-pong, hand on when S landed", steps, sms);
  run<128, 64, kAll>("kernel's step", steps, sms);
  run<128, 64, kAll | kOverlap>("softmax during P.V (forced)", steps, sms);
  run<128, 64, kAll | kOverlap | kTurns>("forced overlap + ping-pong (FA3)", steps, sms);
  run<64, 128, kAll>("kernel's step", steps, sms);
  run<64, 128, kAll | kOverlap>("softmax during P.V (forced)", steps, sms);
  run<64, 128, kS | kPV>("no softmax", steps, sms);
  run<256, 64, kAll>("kernel's step", steps, sms);
  run<256, 64, kS | kPV>("no softmax", steps, sms);
  return 0;
}
