// FlashAttention-3's FP8 forward kernel (hopper/, built from a checkout: build.sh) timed on the shapes
// of design.md §6 and the benchmark's two GQA rows, beside fp8attn's benchmark in the same device call: whether issue 4's target
// (>= 1.10x cuDNN FP8, >= 980 TFLOP/s at 1x32x8192x128) is within reach of a published FP8 kernel on
// this card. FA3 writes bf16 output (FP8 in, P in FP8 without a calibrated scale); fp8attn writes FP8.
// Every shape is checked first against a CPU reference on a sample of rows (the inputs decoded from
// their FP8 codes, fp64 sums), so a misconfigured call cannot pass as a fast one.
//
//   fa3_peer [--seconds S]   prints one line per shape: TFLOP/s timed as fp8attn.bench times its rows,
//                            the sampled rows' max |error| against the CPU, and (with --seconds) the
//                            TFLOP/s of S seconds back to back with their epoch-ms window, for an
//                            external power sampler (nvidia-smi), as lab/scripts/power_clock.py measures.
//   fa3_peer --profile D[c]  one call of that shape (e.g. 128c: 1x32x8192x128 causal) between
//                            cudaProfilerStart / Stop, after the check and 3 more, for
//                            ncu --profile-from-start off (as lab/scripts/ncu_prefill.py for fp8attn).
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cuda_profiler_api.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "../cuda_check.h"
#include "flash.h"

// FA3's kernel for head dim D (fa3_inst.cu, one translation unit per head dim).
template <int D, bool Causal>
void run(Flash_fwd_params& p, cudaStream_t s);

// Normal-ish FP8 codes from a hash (never NaN: |x| <= 4 so the code stays far below 0x7f).
__global__ void fill(uint8_t* x, size_t n, uint32_t seed) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    uint32_t h = (uint32_t)i * 2654435761u ^ seed;
    h ^= h >> 15; h *= 2246822519u; h ^= h >> 13; h *= 3266489917u; h ^= h >> 16;
    const float u1 = ((h & 0xffff) + 0.5f) / 65536.f, u2 = ((h >> 16) + 0.5f) / 65536.f;
    const float g = sqrtf(-2.f * logf(u1)) * cosf(6.2831853f * u2);
    x[i] = __nv_cvt_float_to_fp8(fmaxf(-4.f, fminf(4.f, g)), __NV_SATFINITE, __NV_E4M3);
  }
}

static float fp8_to_float(uint8_t c) {
  __nv_fp8_e4m3 v;
  std::memcpy(&v, &c, 1);
  return float(v);
}
static float bf16_to_float(uint16_t b) {
  uint32_t u = uint32_t(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

struct Shape {
  int b, h, hk, s;  // batch, q heads, kv heads (GQA when < h), sequence length (q = k)
};

// Timed as fp8attn.bench's time_ms: warm-up calls until >= 200 ms have passed (at least 5, checked
// every 8), then the median of 20 event-timed calls issued back to back. `label` names the shape,
// `call` runs it once, `flops` is its work; the check's results are printed with the time.
template <class Call>
static void timed(const char* label, Call& call, double flops, double max_err, double max_ref, int nan, double seconds) {
  cudaStream_t st = 0;
  cudaEvent_t w0, w1;
  CK(cudaEventCreate(&w0));
  CK(cudaEventCreate(&w1));
  CK(cudaEventRecord(w0, st));
  for (int i = 1;; ++i) {
    call();
    if (i >= 5 && i % 8 == 0) {
      CK(cudaEventRecord(w1, st));
      CK(cudaEventSynchronize(w1));
      float t;
      CK(cudaEventElapsedTime(&t, w0, w1));
      if (t >= 200.f) break;
    }
  }
  std::vector<cudaEvent_t> ev(40);
  for (auto& e : ev) CK(cudaEventCreate(&e));
  for (int i = 0; i < 20; ++i) {
    CK(cudaEventRecord(ev[2 * i], st));
    call();
    CK(cudaEventRecord(ev[2 * i + 1], st));
  }
  CK(cudaDeviceSynchronize());
  std::vector<float> ms(20);
  for (int i = 0; i < 20; ++i) CK(cudaEventElapsedTime(&ms[i], ev[2 * i], ev[2 * i + 1]));
  std::sort(ms.begin(), ms.end());
  for (auto& e : ev) CK(cudaEventDestroy(e));
  CK(cudaEventDestroy(w0));
  CK(cudaEventDestroy(w1));
  const double med = ms[ms.size() / 2];
  std::printf("fa3 fp8 %s  %.3f ms  %.0f TFLOP/s  max|err| %.4f (max|ref| %.3f)  NaN outputs %d\n", label, med,
              flops / med / 1e9, max_err, max_ref, nan);
  std::fflush(stdout);
  if (seconds > 0) {  // as lab/scripts/power_clock.py: 1 s of warm-up, then the window a sampler averages over
    const auto now_ms = [] {
      return (long long)std::chrono::duration_cast<std::chrono::milliseconds>(
                 std::chrono::system_clock::now().time_since_epoch()).count();
    };
    const int reps = std::max(1, int(seconds * 1e3 / med));
    for (int i = 0; i < int(1e3 / med); ++i) call();
    CK(cudaDeviceSynchronize());
    const long long t0 = now_ms();
    for (int i = 0; i < reps; ++i) call();
    CK(cudaDeviceSynchronize());
    const long long t1 = now_ms();
    const double per_call = double(t1 - t0) / reps;
    std::printf("  power window %lld %lld  %.3f ms per call  %.0f TFLOP/s sustained\n", t0, t1, per_call,
                flops / per_call / 1e9);
    std::fflush(stdout);
  }
}

template <int D, bool Causal>
static void bench(const Shape& sh, double seconds, bool profile = false) {
  const int b = sh.b, h = sh.h, hk = sh.hk, s = sh.s;
  const size_t n = (size_t)b * s * h * D, nkv = (size_t)b * s * hk * D;
  char label[64];
  if (hk == h) std::snprintf(label, sizeof label, "%dx%dx%dx%d%s", b, h, s, D, Causal ? " causal" : "");
  else std::snprintf(label, sizeof label, "%dx%d/%dx%dx%d%s", b, h, hk, s, D, Causal ? " causal" : "");
  uint8_t *q, *k, *v;
  __nv_bfloat16* o;
  float* lse;
  int* sem;
  CK(cudaMalloc(&q, n));
  CK(cudaMalloc(&k, nkv));
  CK(cudaMalloc(&v, nkv));
  CK(cudaMalloc(&o, n * 2));
  CK(cudaMalloc(&lse, (size_t)b * h * s * 4));
  CK(cudaMalloc(&sem, 16));
  fill<<<1024, 256>>>(q, n, 1u);
  fill<<<1024, 256>>>(k, nkv, 2u);
  fill<<<1024, 256>>>(v, nkv, 3u);
  CK(cudaMemset(o, 0xff, n * 2));  // poisoned: NaN bf16
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));

  Flash_fwd_params p{};
  p.is_e4m3 = true;
  p.q_ptr = q; p.k_ptr = k; p.v_ptr = v; p.o_ptr = o;
  // [b, s, h, d] contiguous, strides in elements
  p.q_row_stride = p.o_row_stride = (int64_t)h * D;
  p.k_row_stride = p.v_row_stride = (int64_t)hk * D;
  p.q_head_stride = p.k_head_stride = p.v_head_stride = p.o_head_stride = D;
  p.q_batch_stride = p.o_batch_stride = (int64_t)s * h * D;
  p.k_batch_stride = p.v_batch_stride = (int64_t)s * hk * D;
  p.v_dim_stride = 1;
  p.softmax_lse_ptr = lse;
  p.b = p.b_k = b; p.h = h; p.h_k = hk;
  p.seqlen_q = p.seqlen_k = s;
  p.seqlen_q_rounded = p.seqlen_k_rounded = (s + 127) / 128 * 128;
  p.d = p.d_rounded = p.dv = p.dv_rounded = D;
  p.scale_softmax = 1.f / std::sqrt(float(D));
  p.softcap = 0.f;
  p.p_dropout = 1.f;
  p.rp_dropout = 1.f;
  p.p_dropout_in_uint8_t = 255;
  p.is_causal = Causal;
  p.window_size_left = s - 1;
  p.window_size_right = Causal ? 0 : s - 1;
  p.arch = 90;
  p.num_sm = prop.multiProcessorCount;
  p.num_splits = 1;
  p.pack_gqa = false;
  p.page_size = 1;
  p.head_swizzle = Causal;
  p.varlen_sort_batches = true;
  p.tile_count_semaphore = Causal ? sem : nullptr;  // the dynamic scheduler's counter, zeroed per call
  cudaStream_t st = 0;
  auto call = [&] {
    if (Causal) CK(cudaMemsetAsync(sem, 0, 4, st));
    run<D, Causal>(p, st);
  };
  call();
  CK(cudaDeviceSynchronize());

  // CPU reference on sampled rows (batch 0, heads 0 and h - 1, rows spread over the sequence).
  std::vector<uint8_t> hq(n), hkc(nkv), hv(nkv);
  std::vector<uint16_t> ho(n);
  CK(cudaMemcpy(hq.data(), q, n, cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(hkc.data(), k, nkv, cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(hv.data(), v, nkv, cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(ho.data(), o, n * 2, cudaMemcpyDeviceToHost));
  double max_err = 0, max_ref = 0;
  int nan = 0;
  for (size_t i = 0; i < n; ++i) nan += std::isnan(bf16_to_float(ho[i]));
  const int rows[] = {0, 1, 63, 127, 128, s / 2 + 5, s - 2, s - 1};
  for (int hh : {0, h - 1})
    for (int r : rows) {
      const int kh = hh / (h / hk);  // the q head's kv head
      std::vector<double> sc(s), acc(D, 0.0);
      const int kend = Causal ? r + 1 : s;
      double mx = -1e300;
      for (int j = 0; j < kend; ++j) {
        double dot = 0;
        for (int x = 0; x < D; ++x)
          dot += double(fp8_to_float(hq[((size_t)r * h + hh) * D + x])) * fp8_to_float(hkc[((size_t)j * hk + kh) * D + x]);
        sc[j] = dot * p.scale_softmax;
        mx = std::max(mx, sc[j]);
      }
      double l = 0;
      for (int j = 0; j < kend; ++j) {
        const double e = std::exp(sc[j] - mx);
        l += e;
        for (int x = 0; x < D; ++x) acc[x] += e * fp8_to_float(hv[((size_t)j * hk + kh) * D + x]);
      }
      for (int x = 0; x < D; ++x) {
        const double ref = acc[x] / l, got = bf16_to_float(ho[((size_t)r * h + hh) * D + x]);
        max_err = std::max(max_err, std::fabs(ref - got));
        max_ref = std::max(max_ref, std::fabs(ref));
      }
    }

  if (profile) {
    for (int i = 0; i < 3; ++i) call();
    CK(cudaDeviceSynchronize());
    CK(cudaProfilerStart());
    call();
    CK(cudaDeviceSynchronize());
    CK(cudaProfilerStop());
    std::printf("fa3 fp8 %s profiled once; max|err| %.4f (max|ref| %.3f)  NaN outputs %d\n", label, max_err, max_ref,
                nan);
  } else {
    timed(label, call, 4.0 * b * h * (double)s * s * D * (Causal ? 0.5 : 1.0), max_err, max_ref, nan, seconds);
  }
  for (void* x : {(void*)q, (void*)k, (void*)v, (void*)o, (void*)lse, (void*)sem}) CK(cudaFree(x));
}


int main(int argc, char** argv) {
  double seconds = 0;
  const char* profile = nullptr;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--seconds") && i + 1 < argc) {
      seconds = std::atof(argv[++i]);
    } else if (!std::strcmp(argv[i], "--profile") && i + 1 < argc) {
      profile = argv[++i];
    } else {
      std::fprintf(stderr, "fa3_peer: unknown argument %s (usage: fa3_peer [--seconds S] [--profile SHAPE])\n", argv[i]);
      return 2;
    }
  }
  if (profile) {
    const std::string want(profile);
    if (want == "128") bench<128, false>({1, 32, 32, 8192}, 0, true);
    else if (want == "128c") bench<128, true>({1, 32, 32, 8192}, 0, true);
    else if (want == "64") bench<64, false>({1, 32, 32, 8192}, 0, true);
    else if (want == "256") bench<256, false>({1, 32, 32, 8192}, 0, true);
    else {
      std::fprintf(stderr, "fa3_peer: --profile takes 64, 128, 128c or 256 (1 x 32 x 8192; c: causal), not %s\n", profile);
      return 2;
    }
    return 0;
  }
  bench<128, false>({1, 32, 32, 8192}, seconds);
  bench<128, true>({1, 32, 32, 8192}, seconds);
  bench<128, true>({4, 32, 32, 2048}, seconds);
  bench<64, false>({1, 32, 32, 8192}, seconds);
  bench<256, false>({1, 32, 32, 8192}, seconds);
  bench<128, true>({16, 32, 32, 512}, seconds);
  bench<128, true>({1, 32, 8, 8192}, seconds);  // GQA 32 / 8, as the benchmark's GQA rows
  bench<128, true>({4, 32, 8, 2048}, seconds);
  return 0;
}
