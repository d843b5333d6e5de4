// FlashAttention-3's FP8 forward kernel (hopper/, built from a checkout: build.sh) timed on the shapes
// of docs/design.md §5 and the benchmark's two GQA rows, beside fp8attn's benchmark in the same device call: whether issue 4's target
// (>= 1.10x cuDNN FP8, >= 980 TFLOP/s at 1x32x8192x128) is within reach of a published FP8 kernel on
// this card. FA3 writes bf16 output (FP8 in, P in FP8 without a calibrated scale); fp8attn writes FP8.
// Every shape is checked first against a CPU reference on a sample of rows (the inputs decoded from
// their FP8 codes, fp64 sums), so a misconfigured call cannot pass as a fast one: a line whose check
// fails ends in CHECK FAILED. `python -m fp8attn.bench --fa3-peer PATH` runs this binary and merges its
// lines into its rows (fp8attn/bench/fa3.py parses them: keep the two in step).
//
//   fa3_peer [--prefill-only | --decode-only] [--num-splits N] [--seconds S]
//                            prefill rows, then decode rows (both by default; below).
//   fa3_peer [--seconds S]   prefill: prints one line per shape: TFLOP/s timed as fp8attn.bench times its rows,
//                            the sampled rows' max |error| against the CPU, and (with --seconds) the
//                            TFLOP/s of S seconds back to back with their epoch-ms window, for an
//                            external power sampler (nvidia-smi), as lab/scripts/power_clock.py measures.
//   fa3_peer --profile D[c]  one call of that shape (e.g. 128c: 1x32x8192x128 causal) between
//                            cudaProfilerStart / Stop, after the check and 3 more, for
//                            ncu --profile-from-start off (as lab/scripts/ncu_prefill.py for fp8attn).
//
// Decode rows (decode_bench): FA3's paged FP8-KV decode as vLLM's FLASH_ATTN backend calls it on Hopper
// with --kv-cache-dtype fp8: flash_attn_varlen_func(q e4m3 [B*q_len, 32, 128], K/V cache e4m3
// [num_blocks, 16, 8, 128] with a shuffled block table, cu_seqlens_q, seqused_k = context, causal,
// q/k/v descale 1.0 as (B, Hkv) tensors of stride 0), bf16 out. Params are set as hopper/flash_api.cpp's
// mha_fwd sets them; num_splits, pack_gqa and the paged path come from its heuristics (transcribed
// below: fa3_get_pagedkv_tma / fa3_get_num_splits / fa3_get_pack_gqa), then the split-KV kernel and
// the combine kernel run (fa3_inst_decode.cu). Each row prints
//   fa3 decode B ctx q_len  <us per call> us  <GB/s> GB/s  ...
// where the call is what vLLM runs per layer: the scheduler metadata (prepare_varlen_num_blocks)
// computed once beforehand, as vLLM's get_scheduler_metadata does once per step, then the attention
// kernel + combine; `+prepare` is the same with FA3's prepare kernel inside every call (mha_fwd
// without scheduler_metadata). Time: 20 calls captured in a CUDA graph, the median of 20 replays / 20,
// after warm-up. GB/s: K+V bytes (B*ctx*8*128*2, FP8) per call time. Before timing, both variants are
// checked against a CPU fp64 reference on sampled (batch, head) rows with a NaN-poisoned output.
// --num-splits N (N > 0) fixes num_splits as an upper bound instead of the heuristic (vLLM passes 32
// under full CUDA graphs); the default 0 is flash_api's num_splits <= 0: its heuristic.
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
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "../cuda_check.h"
#include "flash.h"
#include "heuristics.h"
#include "tile_size.h"

// FA3's kernel for head dim D (fa3_inst.cu, one translation unit per head dim).
template <int D, bool Causal>
void run(Flash_fwd_params& p, cudaStream_t s);
// FA3's paged FP8 decode kernel and its split combine (fa3_inst_decode.cu); prepare_varlen_num_blocks
// (the varlen scheduler metadata) is FA3's own flash_prepare_scheduler.cu, declared in flash.h.
void fa3_decode_fwd(Flash_fwd_params& p, cudaStream_t s);
void fa3_decode_combine(Flash_fwd_params& p, cudaStream_t s, bool enable_pdl);

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

// The verdict of a sampled check (prefill and decode alike): no NaN and the max |error| within 10 % of the
// reference's max |value| (bf16 output, FP8 P without a scale); a line that fails it ends in CHECK FAILED.
static bool check_ok(double max_err, double max_ref, int nan) { return nan == 0 && max_err <= 0.1 * max_ref + 1e-3; }

struct Shape {
  int b, h, hk, s;  // batch, q heads, kv heads (GQA when < h), sequence length (q = k)
};

// The median time (ms) of 20 event-timed runs of `run` issued back to back on st, after warm-up runs
// until >= warm_ms have passed (at least 5; the clock read every `every` runs).
template <class Run>
static float median_event_ms(Run& run, cudaStream_t st, float warm_ms, int every) {
  cudaEvent_t w0, w1;
  CK(cudaEventCreate(&w0));
  CK(cudaEventCreate(&w1));
  CK(cudaEventRecord(w0, st));
  for (int i = 1;; ++i) {
    run();
    if (i >= 5 && i % every == 0) {
      CK(cudaEventRecord(w1, st));
      CK(cudaEventSynchronize(w1));
      float t;
      CK(cudaEventElapsedTime(&t, w0, w1));
      if (t >= warm_ms) break;
    }
  }
  std::vector<cudaEvent_t> ev(40);
  for (auto& e : ev) CK(cudaEventCreate(&e));
  for (int i = 0; i < 20; ++i) {
    CK(cudaEventRecord(ev[2 * i], st));
    run();
    CK(cudaEventRecord(ev[2 * i + 1], st));
  }
  CK(cudaStreamSynchronize(st));
  std::vector<float> ms(20);
  for (int i = 0; i < 20; ++i) CK(cudaEventElapsedTime(&ms[i], ev[2 * i], ev[2 * i + 1]));
  std::sort(ms.begin(), ms.end());
  for (auto& e : ev) CK(cudaEventDestroy(e));
  CK(cudaEventDestroy(w0));
  CK(cudaEventDestroy(w1));
  return ms[ms.size() / 2];
}

// Timed as fp8attn.bench's time_ms: warm-up calls until >= 200 ms have passed (at least 5, checked
// every 8), then the median of 20 event-timed calls issued back to back. `label` names the shape,
// `call` runs it once, `flops` is its work; the check's results are printed with the time.
template <class Call>
static void timed(const char* label, Call& call, double flops, double max_err, double max_ref, int nan, double seconds) {
  cudaStream_t st = 0;
  const double med = median_event_ms(call, st, 200.f, 8);
  std::printf("fa3 fp8 %s  %.3f ms  %.0f TFLOP/s  max|err| %.4f (max|ref| %.3f)  NaN outputs %d%s\n", label, med,
              flops / med / 1e9, max_err, max_ref, nan, check_ok(max_err, max_ref, nan) ? "" : "  CHECK FAILED");
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


// ---- decode ---------------------------------------------------------------------------------------
// hopper/flash_api.cpp's heuristics (0251105a), transcribed for arch >= 90 (the sm8x branches are not
// reached on an H200): which paged path, how many splits, whether to pack GQA. Same inputs, same order
// as mha_fwd: page_table and num_splits_dynamic_ptr (a placeholder while the heuristic runs) set first.
static bool fa3_get_pagedkv_tma(const Flash_fwd_params& p) {
  if (p.arch < 90 || !p.page_table || p.leftpad_k || p.knew_ptr) return false;
  const auto t = tile_size_fwd_sm90(p.d_rounded, p.dv_rounded, p.is_causal, p.is_local, p.is_e4m3 ? 1 : 2, false, false,
                                    p.softcap > 0.f);
  const int kBlockM = std::get<0>(t), kBlockN = std::get<1>(t);
  return p.page_size % kBlockN == 0 && p.seqlen_q * (p.h / p.h_k) > kBlockM;
}
static bool fa3_get_pack_gqa(const Flash_fwd_params& p) {
  if (p.arch < 90 || (p.page_table && !p.pagedkv_tma) || p.num_splits > 1) return true;
  if (p.h == p.h_k) return false;
  const auto t = tile_size_fwd_sm90(p.d_rounded, p.dv_rounded, p.is_causal, p.is_local, p.is_e4m3 ? 1 : 2, false,
                                    p.page_table && !p.pagedkv_tma, p.softcap > 0.f);
  return should_pack_gqa(p.cu_seqlens_q || p.seqused_q, p.seqlen_q, p.h / p.h_k, std::get<0>(t));
}
static int fa3_get_num_splits(const Flash_fwd_params& p) {
  const auto t = tile_size_fwd_sm90(p.d_rounded, p.dv_rounded, p.is_causal, p.is_local, p.is_e4m3 ? 1 : 2, false,
                                    p.page_table && !p.pagedkv_tma, p.softcap > 0.f);
  const int kBlockM = std::get<0>(t), kBlockN = std::get<1>(t);
  const int seqlen_q_packgqa = p.seqlen_q * (p.h / p.h_k);
  const int seqlen_k_loaded =
      !p.is_local ? p.seqlen_k : std::max(0, std::min(p.seqlen_k, p.window_size_right + p.window_size_left + 1 + kBlockM));
  const int num_n_blocks = (seqlen_k_loaded + kBlockN - 1) / kBlockN;
  const int num_m_blocks = (seqlen_q_packgqa + kBlockM - 1) / kBlockM;
  const int size_one_kv_head = p.seqlen_k * (p.d + p.dv) * (p.is_e4m3 ? 1 : 2);
  const int total_mblocks = (p.num_splits_dynamic_ptr ? 1 : p.b) * p.h_k * num_m_blocks;
  return num_splits_heuristic(total_mblocks, p.num_sm, num_n_blocks, num_m_blocks, size_one_kv_head,
                              p.is_causal || p.is_local, 128);
}

struct DecodeRow {
  int b, ctx, q_len;  // batch, context (K/V tokens per sequence, the new ones included), new q tokens
};

// Per-call time of `call` (one decode call on stream st) as CUDA-graph replays: warm-up calls, 20 calls
// captured in one graph, replays until >= 100 ms (at least 5), then the median of 20 event-timed replays / 20.
template <class Call>
static double graph_us_per_call(Call& call, cudaStream_t st) {
  for (int i = 0; i < 5; ++i) call(st);
  CK(cudaStreamSynchronize(st));
  CK(cudaGetLastError());
  cudaGraph_t g;
  cudaGraphExec_t ge;
  CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeRelaxed));  // FA3 sets smem attributes per call
  for (int i = 0; i < 20; ++i) call(st);
  CK(cudaStreamEndCapture(st, &g));
  CK(cudaGraphInstantiate(&ge, g, 0));
  const auto replay = [&] { CK(cudaGraphLaunch(ge, st)); };
  const float ms = median_event_ms(replay, st, 100.f, 1);
  CK(cudaGraphExecDestroy(ge));
  CK(cudaGraphDestroy(g));
  return ms * 1e3 / 20.0;  // ms per replay of 20 calls -> us per call
}

static void decode_bench(const DecodeRow& r, int num_splits_arg) {
  constexpr int H = 32, HK = 8, D = 128, PS = 16;  // q heads, kv heads, head dim, vLLM block size
  const int B = r.b, ctx = r.ctx, sq = r.q_len;
  if (ctx % PS != 0 || sq < 1 || sq > ctx) {
    std::printf("fa3 decode %d %d %d  skipped: context must be a multiple of %d and >= q_len\n", B, ctx, sq, PS);
    return;
  }
  const int pages_per_seq = ctx / PS;  // block table width: exactly the context (max_model_len = ctx)
  const int num_pages = B * pages_per_seq;
  const size_t page_elems = (size_t)PS * HK * D;
  const size_t nkv = (size_t)num_pages * page_elems;  // elements (= bytes) of K, and of V
  const int total_q = B * sq;
  const size_t nq = (size_t)total_q * H * D;
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  cudaStream_t st;
  CK(cudaStreamCreate(&st));

  uint8_t *q, *kv;
  __nv_bfloat16* o;
  float *lse, *descale;
  int *page_table, *cu_seqlens_q, *seqused_k;
  CK(cudaMalloc(&q, nq));
  CK(cudaMalloc(&kv, 2 * nkv));  // vLLM's kv_cache[2, num_blocks, 16, Hkv, D]: K blocks, then V blocks
  uint8_t* const k = kv;
  uint8_t* const v = kv + nkv;
  CK(cudaMalloc(&o, nq * 2));
  CK(cudaMalloc(&lse, (size_t)H * total_q * 4));
  CK(cudaMalloc(&descale, 4));
  CK(cudaMalloc(&page_table, (size_t)num_pages * 4));
  CK(cudaMalloc(&cu_seqlens_q, (size_t)(B + 1) * 4));
  CK(cudaMalloc(&seqused_k, (size_t)B * 4));
  fill<<<1024, 256, 0, st>>>(q, nq, 11u);
  fill<<<1024, 256, 0, st>>>(k, nkv, 12u);
  fill<<<1024, 256, 0, st>>>(v, nkv, 13u);
  CK(cudaGetLastError());
  // Block table: every block of the cache used once, in a shuffled order (fixed seed).
  std::vector<int> hpt(num_pages), hcu(B + 1), hsk(B, ctx);
  std::iota(hpt.begin(), hpt.end(), 0);
  std::shuffle(hpt.begin(), hpt.end(), std::mt19937(1234u));
  for (int i = 0; i <= B; ++i) hcu[i] = i * sq;
  const float one = 1.f;
  CK(cudaMemcpy(page_table, hpt.data(), (size_t)num_pages * 4, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(cu_seqlens_q, hcu.data(), (size_t)(B + 1) * 4, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(seqused_k, hsk.data(), (size_t)B * 4, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(descale, &one, 4, cudaMemcpyHostToDevice));
  CK(cudaDeviceSynchronize());

  // As mha_fwd (set_params_fprop and what follows) for q [total_q, H, D] varlen, k/v [num_pages, PS, HK, D],
  // out [total_q, H, D] bf16, cu_seqlens_q, seqused_k, page_table, causal, window (-1, -1), no softcap.
  Flash_fwd_params p{};
  p.is_bf16 = false;
  p.is_e4m3 = true;
  p.q_ptr = q; p.k_ptr = k; p.v_ptr = v; p.o_ptr = o;
  p.q_row_stride = p.o_row_stride = (int64_t)H * D;
  p.q_head_stride = p.o_head_stride = D;
  p.k_row_stride = p.v_row_stride = (int64_t)HK * D;
  p.k_head_stride = p.v_head_stride = D;
  p.v_dim_stride = 1;
  p.k_batch_stride = p.v_batch_stride = (int64_t)page_elems;  // k.stride(0): one page (no cu_seqlens_k)
  p.q_batch_stride = p.o_batch_stride = 0;                     // varlen q: unset by set_params_fprop
  p.cu_seqlens_q = cu_seqlens_q;
  p.seqused_k = seqused_k;
  p.softmax_lse_ptr = lse;
  p.b = B; p.h = H; p.h_k = HK;
  p.seqlen_q = sq;  // max_seqlen_q
  p.seqlen_k = pages_per_seq * PS;  // max_num_pages_per_seq * page_size
  p.seqlen_q_rounded = (sq + 127) / 128 * 128;
  p.seqlen_k_rounded = (p.seqlen_k + 127) / 128 * 128;
  p.d = p.d_rounded = p.dv = p.dv_rounded = D;
  p.scale_softmax = 1.f / std::sqrt(float(D));
  p.softcap = 0.f;
  p.p_dropout = 1.f;
  p.p_dropout_in_uint8_t = 255;
  p.rp_dropout = 1.f;
  p.is_causal = true;  // mha_fwd keeps causal at seqlen_q == 1 for paged KV and hdim 128
  p.is_local = false;
  p.window_size_left = p.seqlen_k - 1;
  p.window_size_right = 0;
  p.attention_chunk = 0;
  p.arch = prop.major * 10 + prop.minor;
  p.num_sm = prop.multiProcessorCount;
  p.total_q = total_q;
  p.total_k = B * PS;  // batch_size * k.size(1), as mha_fwd (unused with a page table)
  p.b_k = B;
  p.page_table = page_table;
  p.page_table_batch_stride = pages_per_seq;
  p.page_size = PS;
  p.num_pages = num_pages;
  p.prepare_varlen_pdl = B <= 992;  // PREPARE_VARLEN_MAX_BATCHES_1CTA
  p.num_splits_dynamic_ptr = reinterpret_cast<int*>(1);  // placeholder while the heuristics run, as mha_fwd
  p.pagedkv_tma = fa3_get_pagedkv_tma(p);
  p.num_splits = num_splits_arg <= 0 ? fa3_get_num_splits(p) : num_splits_arg;
  p.pack_gqa = fa3_get_pack_gqa(p);
  const auto tile = tile_size_fwd_sm90(p.d_rounded, p.dv_rounded, p.is_causal, p.is_local, 1, false,
                                       p.page_table && !p.pagedkv_tma, false);
  const int kBlockM = std::get<0>(tile), kBlockN = std::get<1>(tile);
  // The one instance built (fa3_inst_decode.cu): arch 90, paged non-TMA, split, pack GQA, varlen, causal.
  if (p.arch != 90 || p.pagedkv_tma || !p.pack_gqa || p.num_splits < 2 || p.num_splits > 256) {
    std::printf("fa3 decode %d %d %d  skipped: flash_api would pick arch %d pagedkv_tma %d pack_gqa %d num_splits %d,"
                " not the instance built (arch 90, paged non-TMA, pack_gqa, 2..256 splits)\n",
                B, ctx, sq, p.arch, int(p.pagedkv_tma), int(p.pack_gqa), p.num_splits);
    for (void* x : {(void*)q, (void*)kv, (void*)o, (void*)lse, (void*)descale, (void*)page_table, (void*)cu_seqlens_q,
                    (void*)seqused_k})
      CK(cudaFree(x));
    CK(cudaStreamDestroy(st));
    return;
  }
  // Scheduler metadata, laid out as mha_fwd: {num_splits_dynamic, num_m_blocks, varlen_batch_idx,
  // num_nheads_in_l2} per batch (b rounded to 4), then the tile counter. Varlen: prepare zeroes it.
  p.varlen_sort_batches = !p.is_local;
  p.head_swizzle = p.is_causal || p.is_local;
  const int b_rounded = (B + 3) / 4 * 4;
  const int num_prepare_batch_vectors = 2 + int(p.varlen_sort_batches) + int(p.head_swizzle);
  const int head_swizzle_offset = b_rounded * (p.varlen_sort_batches ? 3 : 2);
  const int sem_offset = b_rounded * num_prepare_batch_vectors;
  const int metadata_size = 1 + sem_offset;  // scheduler_needs_semaphore: arch >= 90 and varlen
  int* meta;
  CK(cudaMalloc(&meta, (size_t)metadata_size * 4));
  CK(cudaMemset(meta, 0, (size_t)metadata_size * 4));
  p.num_splits_dynamic_ptr = meta;
  p.num_m_blocks_ptr = meta + b_rounded;
  p.varlen_batch_idx_ptr = p.varlen_sort_batches ? meta + 2 * b_rounded : nullptr;
  p.num_nheads_in_l2_ptr = p.head_swizzle ? meta + head_swizzle_offset : nullptr;
  p.tile_count_semaphore = meta + sem_offset;
  p.tile_count_semaphore_offset = sem_offset;
  // Split buffers: out_accum [num_splits, H, total_q, D] fp32, lse_accum [num_splits, H, total_q].
  float *oacc, *lacc;
  CK(cudaMalloc(&oacc, (size_t)p.num_splits * H * total_q * D * 4));
  CK(cudaMalloc(&lacc, (size_t)p.num_splits * H * total_q * 4));
  p.is_fp32 = false;
  p.oaccum_ptr = oacc;
  p.softmax_lseaccum_ptr = lacc;
  p.oaccum_split_stride = (int64_t)H * total_q * D;
  p.oaccum_row_stride = D;
  p.oaccum_head_stride = (int64_t)total_q * D;
  p.oaccum_batch_stride = 0;
  p.lseaccum_split_stride = (int64_t)H * total_q;
  p.lseaccum_head_stride = total_q;
  p.lseaccum_batch_stride = 0;
  // Descale: vLLM passes q/k/v scales expanded to (B, Hkv): one float, strides 0.
  p.q_descale_ptr = p.k_descale_ptr = p.v_descale_ptr = descale;
  p.q_descale_batch_stride = p.q_descale_head_stride = 0;
  p.k_descale_batch_stride = p.k_descale_head_stride = 0;
  p.v_descale_batch_stride = p.v_descale_head_stride = 0;

  // One decode call as mha_fwd makes it: run_mha_fwd, then (num_splits > 1) is_bf16 = true and
  // run_mha_fwd_combine(..., enable_pdl = true), which also resets the tile counter. aot: the scheduler
  // metadata was computed beforehand (vLLM's scheduler_metadata), so the forward skips prepare.
  auto call_with = [&](cudaStream_t s, bool aot) {
    p.skip_scheduler_metadata_computation = aot;
    p.is_bf16 = false;
    fa3_decode_fwd(p, s);
    p.is_bf16 = true;
    fa3_decode_combine(p, s, true);
  };
  // vLLM's get_scheduler_metadata: prepare_varlen_num_blocks once, enable_pdl false.
  auto prepare = [&](cudaStream_t s) {
    prepare_varlen_num_blocks(p, s, p.pack_gqa, kBlockM, kBlockN, false);
    CK(cudaGetLastError());
  };

  // Check: both variants against the CPU on sampled rows, each from a NaN-poisoned output.
  float lut[256];
  for (int c = 0; c < 256; ++c) lut[c] = fp8_to_float(uint8_t(c));
  std::vector<uint8_t> hq(nq), hk(nkv), hv(nkv);
  std::vector<uint16_t> ho(nq);
  CK(cudaMemcpy(hq.data(), q, nq, cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(hk.data(), k, nkv, cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(hv.data(), v, nkv, cudaMemcpyDeviceToHost));
  std::vector<int> bs = {0, B / 2, B - 1};
  std::sort(bs.begin(), bs.end());
  bs.erase(std::unique(bs.begin(), bs.end()), bs.end());
  const int hs[] = {0, 13, 31};  // kv heads 0, 3, 7
  struct RefRow { size_t o_off; std::vector<double> ref; };
  std::vector<RefRow> refs;
  double max_ref = 0;
  for (int bb : bs)
    for (int hh : hs)
      for (int i = 0; i < sq; ++i) {
        const int kh = hh / (H / HK);
        const int kend = ctx - sq + i + 1;  // causal, aligned to the end of the context
        const size_t qoff = ((size_t)(bb * sq + i) * H + hh) * D;
        std::vector<double> sc(kend), acc(D, 0.0);
        double mx = -1e300;
        for (int j = 0; j < kend; ++j) {
          const size_t koff = (((size_t)hpt[(size_t)bb * pages_per_seq + j / PS] * PS + j % PS) * HK + kh) * D;
          double dot = 0;
          for (int x = 0; x < D; ++x) dot += double(lut[hq[qoff + x]]) * lut[hk[koff + x]];
          sc[j] = dot * p.scale_softmax;
          mx = std::max(mx, sc[j]);
        }
        double l = 0;
        for (int j = 0; j < kend; ++j) {
          const size_t voff = (((size_t)hpt[(size_t)bb * pages_per_seq + j / PS] * PS + j % PS) * HK + kh) * D;
          const double e = std::exp(sc[j] - mx);
          l += e;
          for (int x = 0; x < D; ++x) acc[x] += e * lut[hv[voff + x]];
        }
        RefRow rr{qoff, std::vector<double>(D)};
        for (int x = 0; x < D; ++x) {
          rr.ref[x] = acc[x] / l;
          max_ref = std::max(max_ref, std::fabs(rr.ref[x]));
        }
        refs.push_back(std::move(rr));
      }
  auto check = [&](bool aot, double& max_err, int& nan) {
    CK(cudaMemsetAsync(o, 0xff, nq * 2, st));  // poisoned: NaN bf16
    if (aot) prepare(st);
    call_with(st, aot);
    CK(cudaStreamSynchronize(st));
    CK(cudaGetLastError());
    CK(cudaMemcpy(ho.data(), o, nq * 2, cudaMemcpyDeviceToHost));
    nan = 0;
    for (size_t i = 0; i < nq; ++i) nan += std::isnan(bf16_to_float(ho[i]));
    max_err = 0;
    for (const auto& rr : refs)
      for (int x = 0; x < D; ++x) {
        const double got = bf16_to_float(ho[rr.o_off + x]);
        max_err = std::isnan(got) ? INFINITY : std::max(max_err, std::fabs(got - rr.ref[x]));
      }
  };
  double err_pre, err_aot;
  int nan_pre, nan_aot;
  check(false, err_pre, nan_pre);
  check(true, err_aot, nan_aot);  // leaves the metadata of this row in place for the aot timing
  std::vector<int> hsplit(B);
  CK(cudaMemcpy(hsplit.data(), p.num_splits_dynamic_ptr, (size_t)B * 4, cudaMemcpyDeviceToHost));
  const int dyn_min = *std::min_element(hsplit.begin(), hsplit.end());
  const int dyn_max = *std::max_element(hsplit.begin(), hsplit.end());
  const bool ok = check_ok(err_pre, max_ref, nan_pre) && check_ok(err_aot, max_ref, nan_aot);

  auto call_aot = [&](cudaStream_t s) { call_with(s, true); };
  auto call_pre = [&](cudaStream_t s) { call_with(s, false); };
  const double us_aot = graph_us_per_call(call_aot, st);
  const double us_pre = graph_us_per_call(call_pre, st);
  const double bytes = 2.0 * B * (double)ctx * HK * D;
  std::printf("fa3 decode %d %d %d  %.2f us  %.0f GB/s  (+prepare per call: %.2f us  %.0f GB/s)  splits %d (per batch %d..%d)"
              " pack_gqa %d blockMN %dx%d  max|err| %.4f / %.4f (max|ref| %.3f)  NaN outputs %d / %d%s\n",
              B, ctx, sq, us_aot, bytes / us_aot / 1e3, us_pre, bytes / us_pre / 1e3, p.num_splits, dyn_min, dyn_max,
              int(p.pack_gqa), kBlockM, kBlockN, err_aot, err_pre, max_ref, nan_aot, nan_pre, ok ? "" : "  CHECK FAILED");
  std::fflush(stdout);
  for (void* x : {(void*)q, (void*)kv, (void*)o, (void*)lse, (void*)descale, (void*)page_table, (void*)cu_seqlens_q,
                  (void*)seqused_k, (void*)meta, (void*)oacc, (void*)lacc})
    CK(cudaFree(x));
  CK(cudaStreamDestroy(st));
}

int main(int argc, char** argv) {
  double seconds = 0;
  const char* profile = nullptr;
  bool do_prefill = true, do_decode = true;
  int num_splits = 0;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--seconds") && i + 1 < argc) {
      seconds = std::atof(argv[++i]);
    } else if (!std::strcmp(argv[i], "--profile") && i + 1 < argc) {
      profile = argv[++i];
    } else if (!std::strcmp(argv[i], "--prefill-only")) {
      do_decode = false;
    } else if (!std::strcmp(argv[i], "--decode-only")) {
      do_prefill = false;
    } else if (!std::strcmp(argv[i], "--num-splits") && i + 1 < argc) {
      num_splits = std::atoi(argv[++i]);
    } else {
      std::fprintf(stderr,
                   "fa3_peer: unknown argument %s (usage: fa3_peer [--prefill-only | --decode-only] [--num-splits N]"
                   " [--seconds S] [--profile SHAPE])\n",
                   argv[i]);
      return 2;
    }
  }
  if (!do_prefill && !do_decode) {
    std::fprintf(stderr, "fa3_peer: --prefill-only and --decode-only exclude each other\n");
    return 2;
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
  if (do_prefill) {
    bench<128, false>({1, 32, 32, 8192}, seconds);
    bench<128, true>({1, 32, 32, 8192}, seconds);
    bench<128, true>({4, 32, 32, 2048}, seconds);
    bench<64, false>({1, 32, 32, 8192}, seconds);
    bench<256, false>({1, 32, 32, 8192}, seconds);
    bench<128, true>({16, 32, 32, 512}, seconds);
    bench<128, true>({1, 32, 8, 8192}, seconds);  // GQA 32 / 8, as the benchmark's GQA rows
    bench<128, true>({4, 32, 8, 2048}, seconds);
  }
  if (!do_decode) return 0;
  // H = 32, Hkv = 8, D = 128, causal; {B, context, q_len}
  for (const DecodeRow& r : {DecodeRow{1, 32768, 1}, DecodeRow{8, 8192, 1}, DecodeRow{32, 8192, 1}, DecodeRow{64, 4096, 1},
                             DecodeRow{128, 2048, 1}, DecodeRow{1, 1024, 1}, DecodeRow{16, 16384, 1}, DecodeRow{8, 8192, 4}})
    decode_bench(r, num_splits);
  return 0;
}
