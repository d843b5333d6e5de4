// Decode check and timing of the decode pipeline (pipeline_decode.h) variants against the f16
// pipeline (FwdPolicyNvF16<Problem>: the same tiles and quantization points, known correct
// against the CPU oracle), without torch: paged FP8 e4m3fn KV cache [blocks, 16, 8, 128] with a shuffled block table (and unused
// blocks full of NaN codes), q_len 1, 32 q / 8 kv heads, causal, FP8 output, p_scale 1/448.
// Build: lab/standalone/build.sh.
//   decode_bench [REPS] [VARIANT...]   (default: 50 reps, every variant; names in the table below)
//   decode_bench_trace                 (built with -DFP8ATTN_EVENT_TRACE) an event trace of the default
//                                      kernel's first blocks
// Per shape and variant: agreement with the f16 pipeline at one split and at the variant's split count,
// then us per call: eager (events around each call, median), graph (CUDA graph of 20 calls),
// cold (eager after a 256 MiB L2 flush), fwd (graph, forward kernel alone: no combine).
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <random>
#include <vector>

#include <cstring>
#include <string>

#ifdef FP8ATTN_EVENT_TRACE
#include "event_trace.h"  // before the kernels: defines FP8ATTN_TRACE
#endif
#include "cuda_check.h"
#include "kernels/fwd/dispatch.cpp"  // choose_num_splits: the split count the torch entry point takes
#include "kernels/fwd/launch.h"
#include "kernels/fwd/pipeline_decode.h"

using namespace fp8attn;

constexpr int kH = 32, kHkv = 8, kD = 128, kPage = 16, kPoisonBlocks = 16;
constexpr double kCopyGBs = 4256.0;
constexpr int kTile = kDefaultKvTile;
using Prob = FwdProblem<kD, Fp8Kind::E4M3FN, MaskKind::kBand>;
using RefPolicy = FwdPolicyNvF16<Prob>;
// The kernel table's row of what these shapes (q_len 1, GQA 4: 4 packed rows) run.
const FwdKernel kDecode8{"fwd_decode8_hd128_e4m3fn_band_kv64", 0, kD, Fp8Kind::E4M3FN, MaskKind::kBand, kTile, true, 8, 8,
                         false};

// The decode launch of pipeline_decode.h (launch_decode_with) with the bench's options: the combine
// kernel as a programmatic dependent of the forward grid or not, or not at all (the forward kernel
// timed alone; its output is then not written when split).
struct DecodeLaunch {
  bool pdl = kDecodePdl;
  bool combine = true;
};
template <class Policy>
void launch_decode_opts(const FwdParams& p, cudaStream_t stream, const DecodeLaunch& opt) {
  auto* kern = &fwd_kernel_decode<Prob, Policy>;
  FwdParams q = with_divisors<Policy>(p);
  q.kv_tma = nv::encode_page_map(q.k_tmap, p.k, p.head_dim, p.num_heads_k, p.page_block_size, p.num_cache_blocks,
                                 p.k_head_stride, p.k_row_stride, p.k_batch_stride, Policy::kRowStride,
                                 Policy::kSwizzle) &&
             nv::encode_page_map(q.v_tmap, p.v, p.head_dim, p.num_heads_k, p.page_block_size, p.num_cache_blocks,
                                 p.v_head_stride, p.v_row_stride, p.v_batch_stride, Policy::kRowStride,
                                 Policy::kSwizzle);
  static const cudaError_t attr_err = cudaFuncSetAttribute(
      reinterpret_cast<const void*>(kern), cudaFuncAttributeMaxDynamicSharedMemorySize, Policy::kSmemBytes);
  (void)attr_err;
  kern<<<dim3(static_cast<unsigned>(p.batch * p.num_heads_k), p.num_splits), Policy::kThreads, Policy::kSmemBytes,
         stream>>>(q);
  if (p.num_splits <= 1 || !opt.combine) return;
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(static_cast<unsigned>(p.seqlen_q * p.num_heads), p.batch);
  cfg.blockDim = dim3(combine_threads(p));
  cfg.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  cfg.numAttrs = opt.pdl ? 1 : 0;
  CK(cudaLaunchKernelEx(&cfg, fwd_combine_kernel<Prob::kFp8>, p));
}

// Finite e4m3fn codes, |x| < 4 (exponent field 0..8: never the NaN codes 0x7f / 0xff).
__global__ void fill_codes(uint8_t* dst, size_t n, uint64_t seed) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n; i += size_t{gridDim.x} * blockDim.x) {
    uint64_t z = (i + 1) * 0x9e3779b97f4a7c15ull ^ seed;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    dst[i] = static_cast<uint8_t>((z & 0x80) | ((z >> 8) % 9) << 3 | ((z >> 16) & 7));
  }
}

struct Run {
  std::vector<uint8_t> out;
  std::vector<float> lse;
};

// One call: a decode variant (launch_decode_opts with a DecodeConfig) or, decode == nullptr, the f16 pipeline.
using DecodeFn = void (*)(const FwdParams&, cudaStream_t, const DecodeLaunch&);
struct Call {
  DecodeFn decode;
  int splits;
  DecodeLaunch opt;
};

struct Bench {
  int B, ctx, num_sm;
  FwdParams p;
  uint8_t *q, *k, *v, *out;
  float *lse, *out_scale, *o_accum, *lse_accum;
  int32_t *table, *used;
  cudaStream_t stream;

  Bench(int B_, int ctx_, int num_sm_, cudaStream_t s) : B(B_), ctx(ctx_), num_sm(num_sm_), stream(s) {
    const int per_seq = ctx / kPage, blocks = B * per_seq + kPoisonBlocks;
    const size_t row = size_t{kPage} * kHkv * kD, kv = blocks * row, used_kv = static_cast<size_t>(B) * per_seq * row;
    const size_t nq = static_cast<size_t>(B) * kH * kD;
    CK(cudaMalloc(&q, nq));
    CK(cudaMalloc(&k, kv));
    CK(cudaMalloc(&v, kv));
    CK(cudaMalloc(&out, nq));
    CK(cudaMalloc(&lse, sizeof(float) * B * kH));
    CK(cudaMalloc(&out_scale, sizeof(float)));
    CK(cudaMalloc(&o_accum, sizeof(float) * kMaxSplits * B * kH * kD));
    CK(cudaMalloc(&lse_accum, sizeof(float) * kMaxSplits * B * kH));
    fill_codes<<<1024, 256>>>(q, nq, 1);
    fill_codes<<<4096, 256>>>(k, used_kv, 2);
    fill_codes<<<4096, 256>>>(v, used_kv, 3);
    CK(cudaMemset(k + used_kv, 0x7f, kv - used_kv));  // the unused blocks: NaN (never read)
    CK(cudaMemset(v + used_kv, 0x7f, kv - used_kv));
    const float os = 1.f / 64.f;  // |O| < 4 -> codes below 256
    CK(cudaMemcpy(out_scale, &os, sizeof(float), cudaMemcpyHostToDevice));
    std::vector<int32_t> ids(B * per_seq), u(B, ctx);
    std::iota(ids.begin(), ids.end(), 0);
    std::shuffle(ids.begin(), ids.end(), std::mt19937(B * 7919 + ctx));
    CK(cudaMalloc(&table, sizeof(int32_t) * ids.size()));
    CK(cudaMalloc(&used, sizeof(int32_t) * B));
    CK(cudaMemcpy(table, ids.data(), sizeof(int32_t) * ids.size(), cudaMemcpyHostToDevice));
    CK(cudaMemcpy(used, u.data(), sizeof(int32_t) * B, cudaMemcpyHostToDevice));

    p.q = q;
    p.k = k;
    p.v = v;
    p.out = out;
    p.lse = lse;
    p.q_batch_stride = p.q_row_stride = p.o_batch_stride = p.o_row_stride = kH * kD;
    p.q_head_stride = p.o_head_stride = kD;
    p.k_batch_stride = p.v_batch_stride = int64_t{kPage} * kHkv * kD;
    p.k_row_stride = p.v_row_stride = kHkv * kD;
    p.k_head_stride = p.v_head_stride = kD;
    p.lse_batch_stride = kH;  // [B, H, Sq = 1]
    p.lse_head_stride = 1;
    p.lse_row_stride = 1;
    p.seqused_k = used;
    p.block_table = table;
    p.block_table_batch_stride = per_seq;
    p.page_block_size = kPage;
    p.num_cache_blocks = blocks;
    p.batch = B;
    p.seqlen_q = 1;
    p.seqlen_k = ctx;
    p.num_heads = kH;
    p.num_heads_k = kHkv;
    p.head_dim = kD;
    p.p_scale_default = 1.f / 448.f;
    p.out_scale = out_scale;
    p.softmax_scale = 1.f / std::sqrt(static_cast<float>(kD));
    p.is_causal = true;
    p.fp8_kind = Fp8Kind::E4M3FN;
    p.q_type = ElemType::FP8;
    p.out_type = ElemType::FP8;
    p.o_accum = o_accum;
    p.lse_accum = lse_accum;
    p.num_sm = num_sm;
    CK(cudaDeviceSynchronize());
  }
  ~Bench() {
    for (void* ptr : {static_cast<void*>(q), static_cast<void*>(k), static_cast<void*>(v), static_cast<void*>(out),
                      static_cast<void*>(lse), static_cast<void*>(out_scale), static_cast<void*>(o_accum),
                      static_cast<void*>(lse_accum), static_cast<void*>(table), static_cast<void*>(used)})
      cudaFree(ptr);
  }
  double kv_bytes() const { return 2.0 * B * ctx * kHkv * kD; }

  void launch(const Call& c) {
    p.num_splits = c.splits;
    if (c.decode)
      c.decode(p, stream, c.opt);
    else
      launch_with<Prob, RefPolicy, FwdPipelineNvF16<Prob, RefPolicy>>(p, stream);
  }

  Run run(const Call& c) {
    CK(cudaMemsetAsync(out, 0x7f, static_cast<size_t>(B) * kH * kD, stream));  // NaN-poisoned
    launch(c);
    CK(cudaGetLastError());
    CK(cudaStreamSynchronize(stream));
    Run r{std::vector<uint8_t>(static_cast<size_t>(B) * kH * kD), std::vector<float>(B * kH)};
    CK(cudaMemcpy(r.out.data(), out, r.out.size(), cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(r.lse.data(), lse, sizeof(float) * r.lse.size(), cudaMemcpyDeviceToHost));
    return r;
  }

  // Median time per call in us: events around each call (flush: a 256 MiB write first, untimed).
  double time_eager(const Call& c, int reps, uint8_t* flush) {
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    for (int i = 0; i < 10; ++i) launch(c);
    std::vector<double> t;
    for (int i = 0; i < reps; ++i) {
      if (flush) CK(cudaMemsetAsync(flush, i & 0xff, size_t{256} << 20, stream));
      CK(cudaEventRecord(e0, stream));
      launch(c);
      CK(cudaEventRecord(e1, stream));
      CK(cudaEventSynchronize(e1));
      float ms = 0.f;
      CK(cudaEventElapsedTime(&ms, e0, e1));
      t.push_back(1e3 * ms);
    }
    CK(cudaGetLastError());
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    std::sort(t.begin(), t.end());
    return t[t.size() / 2];
  }

  // Time per call of a CUDA graph of 20 calls (median of 10 replays).
  double time_graph(const Call& c) {
    constexpr int kCalls = 20;
    launch(c);  // the once-per-kernel attribute call happens outside the capture
    CK(cudaStreamSynchronize(stream));
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    CK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
    for (int i = 0; i < kCalls; ++i) launch(c);
    CK(cudaStreamEndCapture(stream, &graph));
    CK(cudaGraphInstantiate(&exec, graph, 0));
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    CK(cudaGraphLaunch(exec, stream));
    std::vector<double> t;
    for (int i = 0; i < 10; ++i) {
      CK(cudaEventRecord(e0, stream));
      CK(cudaGraphLaunch(exec, stream));
      CK(cudaEventRecord(e1, stream));
      CK(cudaEventSynchronize(e1));
      float ms = 0.f;
      CK(cudaEventElapsedTime(&ms, e0, e1));
      t.push_back(1e3 * ms / kCalls);
    }
    CK(cudaGetLastError());
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
    std::sort(t.begin(), t.end());
    return t[t.size() / 2];
  }
};

// FP8 e4m3fn codes in value order (sign-magnitude -> integer): the distance is in ulps.
int ord(uint8_t c) { return c & 0x80 ? -(c & 0x7f) : c; }

// Agreement of two runs: identical output codes on >= 99.9 % and no NaN code.
bool agree(const char* what, const Run& a, const Run& b) {
  size_t same = 0, nan = 0;
  int max_ulp = 0;
  for (size_t i = 0; i < a.out.size(); ++i) {
    same += a.out[i] == b.out[i];
    nan += (a.out[i] & 0x7f) == 0x7f || (b.out[i] & 0x7f) == 0x7f;
    max_ulp = std::max(max_ulp, std::abs(ord(a.out[i]) - ord(b.out[i])));
  }
  double lse_diff = 0.0;
  for (size_t i = 0; i < a.lse.size(); ++i) lse_diff = std::max(lse_diff, std::fabs(double{a.lse[i]} - b.lse[i]));
  const double frac = static_cast<double>(same) / a.out.size();
  const bool ok = frac >= 0.999 && nan == 0 && std::isfinite(lse_diff);
  std::printf("  %-34s identical %.4f %% (%zu of %zu differ), max %d ulp, NaN codes %zu, max |dlse| %.2e  %s\n", what,
              100.0 * frac, a.out.size() - same, a.out.size(), max_ulp, nan, lse_diff, ok ? "PASS" : "FAIL");
  return ok;
}

template <class Cfg>
void decode_fn(const FwdParams& p, cudaStream_t stream, const DecodeLaunch& opt) {
  launch_decode_opts<FwdPolicyNvDecode<Prob, 1, Cfg>>(p, stream, opt);
}
// Blocks per SM of the variant's rows <= 8 kernel (the one these shapes run), and its ring depth.
template <class Cfg>
int occupancy() {
  using Pol = FwdPolicyNvDecode<Prob, 1, Cfg>;
  auto* kern = &fwd_kernel_decode<Prob, Pol>;
  CK(cudaFuncSetAttribute(reinterpret_cast<const void*>(kern), cudaFuncAttributeMaxDynamicSharedMemorySize,
                          Pol::kSmemBytes));
  int n = 0;
  CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kern, Pol::kThreads, Pol::kSmemBytes));
  return n;
}

// The split rule the first decode measurement used (one wave of 3 blocks per SM at most).
int32_t previous_splits(const FwdParams& p, int32_t num_sm) {
  const int64_t blocks = int64_t{p.batch} * p.num_heads_k, tiles = (p.seqlen_k + kTile - 1) / kTile;
  const int64_t want = std::max<int64_t>(1, std::min<int64_t>({(3 * num_sm) / blocks, tiles / 2, 128}));
  const int64_t per = (tiles + want - 1) / want;
  return static_cast<int32_t>((tiles + per - 1) / per);
}

struct Variant {
  const char* name;
  const char* what;
  DecodeFn fn;
  int (*occ)();
  int stages;
  int split_bps;  // decode_num_splits' blocks per SM; 0: previous_splits
  int min_tiles;
  bool pdl;
  int splits(const FwdParams& p, int num_sm) const {
    const int64_t tiles = (p.seqlen_k + kTile - 1) / kTile;
    return split_bps ? decode_num_splits(int64_t{p.batch} * p.num_heads_k, tiles, num_sm, split_bps, min_tiles)
                     : previous_splits(p, num_sm);
  }
};
template <class Cfg>
Variant variant(const char* name, const char* what, int split_bps, int min_tiles, bool pdl) {
  return {name, what, decode_fn<Cfg>, occupancy<Cfg>, FwdPolicyNvDecode<Prob, 1, Cfg>::kStages, split_bps, min_tiles, pdl};
}

#ifdef FP8ATTN_EVENT_TRACE
// decode_bench_trace [B,ctx ...]: an event trace of the default decode kernel (forward alone), by default
// at 1x32k and 32x8k.
int main(int argc, char** argv) {
  int num_sm = 0;
  CK(cudaDeviceGetAttribute(&num_sm, cudaDevAttrMultiProcessorCount, 0));
  cudaStream_t stream;
  CK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  std::vector<std::array<int, 2>> shapes = {{1, 32768}, {32, 8192}};
  if (argc > 1) shapes.clear();
  for (int a = 1; a < argc; ++a) {
    std::array<int, 2> sh{};
    if (std::sscanf(argv[a], "%d,%d", &sh[0], &sh[1]) == 2) shapes.push_back(sh);
  }
  for (const auto& sh : shapes) {
    Bench b(sh[0], sh[1], num_sm, stream);
    const int64_t tiles = (sh[1] + kTile - 1) / kTile;
    const int splits = decode_num_splits(int64_t{sh[0]} * kHkv, tiles, num_sm, DecodeDefault<8, kD>::kBlocksPerSm,
                                         kDecodeMinTilesPerSplit);
    DecodeLaunch fwd_only;
    fwd_only.combine = false;
    const Call c{decode_fn<DecodeDefault<8, kD>>, splits, fwd_only};
    const double us = b.time_graph(c);  // with the recording on: slower than the plain binary
    trace_reset();
    b.launch(c);
    CK(cudaStreamSynchronize(stream));
    std::printf("\n=== B=%d ctx=%d, %d splits: forward kernel %.1f us (graph); warps 0 and 3 of the first blocks\n", sh[0],
                sh[1], splits, us);
    trace_dump(3, 200);
  }
  return 0;
}
#else
int main(int argc, char** argv) {
  const int reps = argc > 1 ? std::max(1, std::atoi(argv[1])) : 50;
  int dev = 0, num_sm = 0;
  CK(cudaGetDevice(&dev));
  CK(cudaDeviceGetAttribute(&num_sm, cudaDevAttrMultiProcessorCount, dev));
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, dev));
  std::printf("%s, %d SMs; paged e4m3fn KV (block %d, shuffled), q_len 1, H %d / Hkv %d, D %d, causal, FP8 out\n",
              prop.name, num_sm, kPage, kH, kHkv, kD);
  cudaStream_t stream;
  CK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  uint8_t* flush = nullptr;
  CK(cudaMalloc(&flush, size_t{256} << 20));

  // "default" is what the product runs (DecodeDefault, decode_config.h; choose_num_splits); the
  // others retrace the measured steps (legacy .. pdl) or change one knob. On sm_90 every variant
  // copies with the TMA engine (page boxes): there kRowCopy (legacy, sector) no longer changes anything.
  const Variant all[] = {
      variant<DecodeConfig<3, 3, false>>("legacy", "first measurement: sector copies, 3 tiles, previous splits, no PDL", 0, 2, false),
      variant<DecodeConfig<3, 3>>("rowcopy", "legacy + whole-row copies", 0, 2, false),
      variant<DecodeConfig<3>>("ring", "rowcopy + the ring 3/SM fits", 0, 2, false),
      variant<DecodeConfig<3>>("waves", "ring + wave-filling splits (decode_num_splits, 3/SM)", 3, 2, false),
      variant<DecodeConfig<3>>("pdl", "waves + PDL combine", 3, 2, true),
      variant<DecodeConfig<3, 0, false>>("sector", "pdl with sector copies", 3, 2, true),
      variant<DecodeConfig<3, 3>>("ring3", "pdl with 3 tiles", 3, 2, true),
      variant<DecodeConfig<3, 2>>("ring2", "pdl with 2 tiles", 3, 2, true),
      variant<DecodeConfig<2>>("bps2", "2 blocks/SM: ring of 6 tiles, splits for 2/SM", 2, 2, true),
      variant<DecodeDefault<8, kD>>("default", "DecodeDefault (measured best: 4 blocks/SM, ring of 2 tiles, splits for 4/SM)",
                             DecodeDefault<8, kD>::kBlocksPerSm, kDecodeMinTilesPerSplit, kDecodePdl),
      variant<DecodeConfig<3>>("min16", "pdl, >= 16 tiles per split (1x32k: 32 splits)", 3, 16, true),
  };
  std::vector<const Variant*> vars;
  for (const Variant& v : all) {
    bool pick = argc <= 2;
    for (int a = 2; a < argc; ++a) pick |= std::strcmp(argv[a], v.name) == 0;
    if (pick) vars.push_back(&v);
  }
  std::printf("\nvariants (tiles = KV ring depth per warp; occ = resident blocks per SM of the kernel):\n");
  for (const Variant* v : vars)
    std::printf("  %-8s tiles %d occ %d  %s\n", v->name, v->stages, v->occ(), v->what);

  struct Shape {
    int B, ctx;
  };
  const Shape shapes[] = {{1, 32768}, {8, 8192}, {32, 8192}, {16, 16384}, {64, 4096}};
  bool all_ok = true;
  struct Row {
    const Variant* v;
    int splits;
    double t[4];  // eager, graph, cold, fwd
  };
  std::vector<std::vector<Row>> table;
  for (const Shape& s : shapes) {
    Bench b(s.B, s.ctx, num_sm, stream);
    std::printf("\nB=%d ctx=%d: %.1f MB of K+V; choose_num_splits %d\n", s.B, s.ctx, b.kv_bytes() / 1e6,
                choose_num_splits(b.p, kDecode8, num_sm));
    std::vector<std::pair<int, Run>> ref;  // the f16 pipeline's results by split count
    const auto ref_run = [&](int splits) -> const Run& {
      for (const auto& o : ref)
        if (o.first == splits) return o.second;
      ref.emplace_back(splits, b.run(Call{nullptr, splits, {}}));
      return ref.back().second;
    };
    std::vector<Row> rows;
    for (const Variant* v : vars) {
      const int splits = v->splits(b.p, num_sm);
      const DecodeLaunch opt{v->pdl, true};
      char what[64];
      std::snprintf(what, sizeof(what), "%s, 1 split:", v->name);
      all_ok &= agree(what, ref_run(1), b.run(Call{v->fn, 1, opt}));
      if (splits > 1) {
        std::snprintf(what, sizeof(what), "%s, %d splits:", v->name, splits);
        all_ok &= agree(what, ref_run(splits), b.run(Call{v->fn, splits, opt}));
      }
      const Call c{v->fn, splits, opt}, fwd{v->fn, splits, DecodeLaunch{v->pdl, false}};
      rows.push_back(Row{v, splits, {b.time_eager(c, reps, nullptr), b.time_graph(c), b.time_eager(c, reps, flush),
                                     b.time_graph(fwd)}});
    }
    table.push_back(rows);
  }

  std::printf("\nus per call (%% of %.0f GB/s copy bandwidth for the K+V bytes): eager = events around each call\n"
              "(median of %d), graph = CUDA graph of 20 calls, cold = eager after a 256 MiB L2 flush, fwd = graph\n"
              "of the forward kernel alone (no combine)\n",
              kCopyGBs, reps);
  for (size_t si = 0; si < table.size(); ++si) {
    const Shape& s = shapes[si];
    const double bytes = 2.0 * s.B * s.ctx * kHkv * kD;
    std::printf("%3dx%-6d %-8s %6s | %-13s %-13s %-13s %-13s\n", s.B, s.ctx, "variant", "splits", "eager", "graph",
                "cold", "fwd");
    for (const Row& r : table[si]) {
      std::printf("%10s %-8s %6d |", "", r.v->name, r.splits);
      for (double t : r.t) {
        char cell[32];
        std::snprintf(cell, sizeof(cell), "%.1f (%.0f%%)", t, 100.0 * bytes / (t * 1e3) / kCopyGBs);
        std::printf(" %-13s", cell);
      }
      std::printf("\n");
    }
  }
  const double bytes0 = 2.0 * shapes[0].B * shapes[0].ctx * kHkv * kD, limit = bytes0 / (0.5 * kCopyGBs * 1e3);
  std::printf("\n1x32k criterion: >= 50 %% of copy bandwidth = <= %.1f us per call\n", limit);
  for (const Row& r : table[0])
    std::printf("  %-8s graph %.1f us, eager %.1f us: %s\n", r.v->name, r.t[1], r.t[0], r.t[1] <= limit ? "PASS" : "FAIL");
  std::printf("agreement: %s\n", all_ok ? "PASS" : "FAIL");
  cudaFree(flush);
  return all_ok ? 0 : 1;
}
#endif  // FP8ATTN_EVENT_TRACE
