// Kernel-level check and timing of the Hopper wgmma pipeline against the portable f16 pipeline
// (same tiles and quantization points, known correct against the CPU oracle), without torch: a
// quick loop on an H200 before the full GPU suite. Build: lab/standalone/build.sh.
//   wgmma_check [--quick]      agreement on contract cases, then TFLOP/s of both pipelines
//   wgmma_check --profile D CAUSAL [KV_TILE]   one wgmma launch of 1 x 32 x 8192 (for ncu)
//   wgmma_check_trace [KV_TILE]  (built with -DFP8ATTN_EVENT_TRACE) an event trace of the wgmma
//                              kernel's first blocks on short and long prefill shapes
//   wgmma_check_stats          (built with -DFP8ATTN_EVENT_STATS) the cycles between the trace events
//                              of the producer and consumer warpgroups over whole launches
// The wgmma pipeline runs 64-key tiles (the f16 pipeline's, for the agreement check) unless
// KV_TILE is 128 (D 64 / 128).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#ifdef FP8ATTN_EVENT_TRACE
#include "event_trace.h"  // before the kernels: defines FP8ATTN_TRACE
#elif defined(FP8ATTN_EVENT_STATS)
#include "event_stats.h"  // (the same, accounting instead of recording)
#endif
#include "cuda_check.h"
#include "kernels/fwd/dispatch.h"
#include "kernels/fwd/kernel_wgmma.h"
#include "kernels/fwd/pipeline_decode.h"

using namespace fp8attn;

int g_kv_tile = 64;

// The portable side: the f16 pipeline, or the decode kernels for <= 16 packed rows (as the kernel
// table chooses on sm_90).
template <class P>
void launch_portable(const FwdParams& p) {
  const int64_t rows = static_cast<int64_t>(p.seqlen_q) * (p.num_heads / p.num_heads_k);
  using F16 = FwdPolicyNvF16<P>;
  if (rows <= 8)
    launch_decode_with<P, FwdPolicyNvDecode<P, 1>>(p, 0);
  else if (rows <= 16)
    launch_decode_with<P, FwdPolicyNvDecode<P, 2>>(p, 0);
  else
    launch_with<P, F16, FwdPipelineNvF16<P, F16>>(p, 0);
}

template <int D, MaskKind M>
void launch(bool wgmma, const FwdParams& p) {
  using P = FwdProblem<D, Fp8Kind::E4M3FN, M>;
  if constexpr (D <= 128)
    if (wgmma && g_kv_tile == 128) return launch_fwd_wgmma<P, 128>(p, 0);
  if (wgmma)
    launch_fwd_wgmma<P, 64>(p, 0);
  else
    launch_portable<P>(p);
}

void dispatch(bool wgmma, const FwdParams& p) {
  const bool band = mask_kind_of(p) == MaskKind::kBand;
  switch (p.head_dim) {
    case 64: band ? launch<64, MaskKind::kBand>(wgmma, p) : launch<64, MaskKind::kNone>(wgmma, p); break;
    case 128: band ? launch<128, MaskKind::kBand>(wgmma, p) : launch<128, MaskKind::kNone>(wgmma, p); break;
    default: band ? launch<256, MaskKind::kBand>(wgmma, p) : launch<256, MaskKind::kNone>(wgmma, p);
  }
}

struct Case {
  const char* name;
  int B, H, Hkv, D;
  std::vector<int> qlens, klens;  // per batch
  bool causal = false;
  int left = -1, right = -1;
  float softcap = 0.f;
  int page = 0;  // > 0: paged KV with this block size
  bool varlen = false;
  bool bf16_q = false, bf16_out = false;
  int splits = 1;
};

std::mt19937 rng(7);
uint8_t rand_fp8(std::normal_distribution<float>& nd) {
  uint8_t c;
  do c = fp8_encode<Fp8Kind::E4M3FN>(nd(rng)); while ((c & 0x7f) == 0x7f);
  return c;
}

template <class T>
T* upload(const std::vector<T>& v) {
  T* d = nullptr;
  CK(cudaMalloc(&d, std::max<size_t>(1, v.size()) * sizeof(T)));
  CK(cudaMemcpy(d, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice));
  return d;
}

// Builds the params of a case (device buffers leak deliberately: a test program).
struct Built {
  FwdParams p;
  size_t out_elems, lse_elems, out_bytes;
  std::vector<uint8_t> q, k, v;  // dense cases: host copies for the fp64 reference
  std::vector<float> qs, ks;
};

Built build(const Case& c) {
  std::normal_distribution<float> nd(0.f, 1.f);
  Built b;
  FwdParams& p = b.p;
  const int B = c.B, H = c.H, Hkv = c.Hkv, D = c.D;
  const int maxq = *std::max_element(c.qlens.begin(), c.qlens.end());
  const int maxk = *std::max_element(c.klens.begin(), c.klens.end());
  const int T = std::accumulate(c.qlens.begin(), c.qlens.end(), 0);
  const int qrows = c.varlen ? T : B * maxq;
  const int qb = c.bf16_q ? 2 : 1;
  std::vector<uint8_t> q(static_cast<size_t>(qrows) * H * D * qb);
  if (c.bf16_q) {
    for (size_t i = 0; i < q.size() / 2; ++i) {
      const uint16_t bits = bf16_encode(nd(rng) * 3.f);
      std::memcpy(&q[2 * i], &bits, 2);
    }
  } else {
    for (auto& x : q) x = rand_fp8(nd);
  }
  p.q = upload(q);
  b.q = q;
  p.q_type = c.bf16_q ? ElemType::BF16 : ElemType::FP8;
  p.q_row_stride = static_cast<int64_t>(H) * D;
  p.q_head_stride = D;
  p.q_batch_stride = static_cast<int64_t>(maxq) * H * D;
  std::vector<int32_t> cuq(B + 1, 0), cuk(B + 1, 0);
  for (int i = 0; i < B; ++i) cuq[i + 1] = cuq[i] + c.qlens[i];
  for (int i = 0; i < B; ++i) cuk[i + 1] = cuk[i] + c.klens[i];
  if (c.varlen) {
    p.cu_seqlens_q = upload(cuq);
    p.total_q = T;
  }
  if (c.page > 0) {
    int nblk = 0;
    std::vector<int> per(B);
    for (int i = 0; i < B; ++i) nblk += per[i] = (c.klens[i] + c.page - 1) / c.page;
    const int maxblk = *std::max_element(per.begin(), per.end());
    std::vector<int32_t> perm(nblk);
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng);
    std::vector<int32_t> table(static_cast<size_t>(B) * maxblk, 0);
    for (int i = 0, k = 0; i < B; ++i)
      for (int j = 0; j < per[i]; ++j) table[i * maxblk + j] = perm[k++];
    std::vector<uint8_t> kc(static_cast<size_t>(nblk) * c.page * Hkv * D), vc(kc.size());
    for (auto& x : kc) x = rand_fp8(nd);
    for (auto& x : vc) x = rand_fp8(nd);
    p.k = upload(kc);
    p.v = upload(vc);
    p.block_table = upload(table);
    p.block_table_batch_stride = maxblk;
    p.page_block_size = c.page;
    p.num_cache_blocks = nblk;
    p.k_batch_stride = p.v_batch_stride = static_cast<int64_t>(c.page) * Hkv * D;
    p.seqused_k = upload(std::vector<int32_t>(c.klens.begin(), c.klens.end()));
  } else {
    const size_t n = static_cast<size_t>(B) * maxk * Hkv * D;
    std::vector<uint8_t> kk(n), vv(n);
    for (auto& x : kk) x = rand_fp8(nd);
    for (auto& x : vv) x = rand_fp8(nd);
    p.k = upload(kk);
    p.v = upload(vv);
    b.k = kk;
    b.v = vv;
    p.k_batch_stride = p.v_batch_stride = static_cast<int64_t>(maxk) * Hkv * D;
    p.seqused_k = upload(std::vector<int32_t>(c.klens.begin(), c.klens.end()));
  }
  p.k_row_stride = p.v_row_stride = static_cast<int64_t>(Hkv) * D;
  p.k_head_stride = p.v_head_stride = D;
  const int ob = c.bf16_out ? 2 : 1;
  b.out_elems = static_cast<size_t>(qrows) * H * D;
  b.out_bytes = b.out_elems * ob;
  void* out;
  CK(cudaMalloc(&out, b.out_bytes));
  p.out = out;
  p.out_type = c.bf16_out ? ElemType::BF16 : ElemType::FP8;
  p.o_row_stride = static_cast<int64_t>(H) * D;
  p.o_head_stride = D;
  p.o_batch_stride = static_cast<int64_t>(maxq) * H * D;
  b.lse_elems = static_cast<size_t>(qrows) * H;
  CK(cudaMalloc(&p.lse, b.lse_elems * 4));
  if (c.varlen) {
    p.lse_head_stride = T;
    p.lse_row_stride = 1;
  } else {
    p.lse_batch_stride = static_cast<int64_t>(H) * maxq;
    p.lse_head_stride = maxq;
    p.lse_row_stride = 1;
  }
  CK(cudaDeviceGetAttribute(&p.num_sm, cudaDevAttrMultiProcessorCount, 0));
  p.batch = B;
  p.seqlen_q = maxq;
  p.seqlen_k = maxk;
  p.num_heads = H;
  p.num_heads_k = Hkv;
  p.head_dim = D;
  std::vector<float> ks(Hkv), qs(H);
  for (auto& x : ks) x = 0.5f + 0.1f * (rng() % 8);
  for (auto& x : qs) x = 0.5f + 0.1f * (rng() % 8);
  p.k_descale = upload(ks);
  p.k_descale_head_stride = 1;
  p.q_descale = upload(qs);
  b.qs = qs;
  b.ks = ks;
  p.q_descale_head_stride = 1;
  p.v_descale = upload(std::vector<float>{0.75f});
  p.p_scale_ptr = upload(std::vector<float>{1.f / 448.f});
  if (!c.bf16_out) p.out_scale = upload(std::vector<float>{1.f / 16.f});
  p.softmax_scale = 1.f / std::sqrt(static_cast<float>(D));
  p.softcap = c.softcap;
  p.window_left = c.left;
  p.window_right = c.right;
  p.is_causal = c.causal;
  p.num_splits = c.splits;
  if (c.splits > 1) {
    CK(cudaMalloc(&p.o_accum, static_cast<size_t>(c.splits) * b.out_elems * 4));
    CK(cudaMalloc(&p.lse_accum, static_cast<size_t>(c.splits) * b.lse_elems * 4));
  }
  return b;
}

void run(bool wgmma, Built& b, std::vector<uint8_t>& out, std::vector<float>& lse) {
  CK(cudaMemset(b.p.out, 0x7f, b.out_bytes));  // NaN poison (FP8 and bf16)
  CK(cudaMemset(b.p.lse, 0xff, b.lse_elems * 4));
  dispatch(wgmma, b.p);
  CK(cudaGetLastError());
  CK(cudaDeviceSynchronize());
  out.resize(b.out_bytes);
  lse.resize(b.lse_elems);
  CK(cudaMemcpy(out.data(), b.p.out, b.out_bytes, cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(lse.data(), b.p.lse, b.lse_elems * 4, cudaMemcpyDeviceToHost));
}

// Relative L2 error against fp64 attention of the dequantized inputs, batch 0, heads 0..1 (dense,
// FP8 q and out, no softcap).
double ref_err(const Case& c, const Built& b, const std::vector<uint8_t>& out) {
  const FwdParams& p = b.p;
  const int Sq = p.seqlen_q, Sk = c.klens[0], D = c.D, G = c.H / c.Hkv;
  double num = 0, den = 0;
  for (int h = 0; h < 2; ++h) {
    const int hk = h / G;
    const Mask m = Mask::make(p.window_left, p.window_right, p.is_causal, Sq, Sk);
    for (int i = 0; i < Sq; ++i) {
      std::vector<double> sc(Sk);
      double mx = -1e300;
      for (int j = 0; j < Sk; ++j) {
        if (!m.visible(i, j)) { sc[j] = -1e300; continue; }
        double d = 0;
        for (int x = 0; x < D; ++x)
          d += (double)fp8_decode<Fp8Kind::E4M3FN>(b.q[((size_t)i * c.H + h) * D + x]) *
               fp8_decode<Fp8Kind::E4M3FN>(b.k[((size_t)j * c.Hkv + hk) * D + x]);
        sc[j] = d * b.qs[h] * b.ks[hk] * p.softmax_scale;
        mx = std::max(mx, sc[j]);
      }
      std::vector<double> o(D, 0.0);
      double l = 0;
      for (int j = 0; j < Sk; ++j) {
        if (sc[j] <= -1e299) continue;
        const double w = std::exp(sc[j] - mx);
        l += w;
        for (int x = 0; x < D; ++x) o[x] += w * fp8_decode<Fp8Kind::E4M3FN>(b.v[((size_t)j * c.Hkv + hk) * D + x]) * 0.75;
      }
      for (int x = 0; x < D; ++x) {
        const double ref = l > 0 ? o[x] / l : 0.0;
        const double got = fp8_decode<Fp8Kind::E4M3FN>(out[((size_t)i * c.H + h) * D + x]) / 16.0;
        num += (got - ref) * (got - ref);
        den += ref * ref;
      }
    }
  }
  return std::sqrt(num / std::max(den, 1e-300));
}

bool check(const Case& c) {
  Built b = build(c);
  std::vector<uint8_t> o_ref, o_new, o_new2;
  std::vector<float> l_ref, l_new, l_new2;
  FwdParams p1 = b.p;
  p1.num_splits = 1;
  Built b1 = b;
  b1.p = p1;
  run(false, b1, o_ref, l_ref);
  run(true, b, o_new, l_new);
  run(true, b, o_new2, l_new2);
  const bool repeat = o_new == o_new2 && std::memcmp(l_new.data(), l_new2.data(), l_new.size() * 4) == 0;
  size_t n = 0, same = 0, within1 = 0, nan = 0;
  double lse_err = 0;
  for (size_t e = 0; e < b.out_elems; ++e) {
    ++n;
    if (c.bf16_out) {
      uint16_t a, bb;
      std::memcpy(&a, &o_ref[2 * e], 2);
      std::memcpy(&bb, &o_new[2 * e], 2);
      const float fa = bf16_decode(a), fb = bf16_decode(bb);
      if (std::isnan(fb)) ++nan;
      same += a == bb;
      // "1 FP8 ulp" of the value: 2^-3 relative
      within1 += std::fabs(fa - fb) <= 0.125f * std::max(std::fabs(fa), 1e-3f);
    } else {
      const uint8_t a = o_ref[e], bb = o_new[e];
      if ((bb & 0x7f) == 0x7f) ++nan;
      same += a == bb;
      const int ia = (a & 0x80) ? -(a & 0x7f) : a, ib = (bb & 0x80) ? -(bb & 0x7f) : bb;
      within1 += std::abs(ia - ib) <= 1;
    }
  }
  for (size_t i = 0; i < b.lse_elems; ++i) {
    if (std::isfinite(l_ref[i]) && std::isfinite(l_new[i])) lse_err = std::max(lse_err, (double)std::fabs(l_ref[i] - l_new[i]));
  }
  const double frac = n ? static_cast<double>(within1) / n : 1.0;
  if (!c.varlen && c.page == 0 && !c.bf16_q && !c.bf16_out && c.softcap == 0.f) {
    std::printf("    fp64 rel. L2 error (b 0, h 0-1): f16 pipeline %.5f, wgmma %.5f\n", ref_err(c, b, o_ref),
                ref_err(c, b, o_new));
    // where the > 1 ulp differences sit: packed row mod 64 / 16 (warp of the warpgroup), row mod 8, d mod 8
    int by_warp[4] = {0, 0, 0, 0}, by_g[8] = {0}, by_d[8] = {0};
    for (size_t e = 0; e < b.out_elems; ++e) {
      const uint8_t a = o_ref[e], bb = o_new[e];
      const int ia = (a & 0x80) ? -(a & 0x7f) : a, ib = (bb & 0x80) ? -(bb & 0x7f) : bb;
      if (std::abs(ia - ib) <= 1) continue;
      const size_t row = e / ((size_t)c.H * c.D), h = (e / c.D) % c.H, d = e % c.D;
      const int G = c.H / c.Hkv;
      const size_t packed = (row % b.p.seqlen_q) * G + h % G;
      ++by_warp[(packed % 64) / 16];
      ++by_g[packed % 8];
      ++by_d[d % 8];
    }
    std::printf("    >1ulp by warp %d %d %d %d | row%%8 %d %d %d %d %d %d %d %d | d%%8 %d %d %d %d %d %d %d %d\n", by_warp[0],
                by_warp[1], by_warp[2], by_warp[3], by_g[0], by_g[1], by_g[2], by_g[3], by_g[4], by_g[5], by_g[6], by_g[7],
                by_d[0], by_d[1], by_d[2], by_d[3], by_d[4], by_d[5], by_d[6], by_d[7]);
  }
  const double tol = c.splits > 1 ? 0.99 : 0.999;
  const bool ok = nan == 0 && frac >= tol && repeat && lse_err < (c.splits > 1 ? 3e-2 : 2e-3);
  std::printf("%-44s D=%3d n=%9zu identical=%.5f within1ulp=%.6f nan=%zu lse_maxdiff=%.2e repeat=%d  %s\n", c.name,
              c.D, n, n ? (double)same / n : 1.0, frac, nan, lse_err, repeat, ok ? "PASS" : "FAIL");
  return ok;
}

double time_ms(bool wgmma, const FwdParams& p, int reps) {
  cudaEvent_t a, z;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&z));
  for (int i = 0; i < 3; ++i) dispatch(wgmma, p);
  std::vector<float> t;
  for (int r = 0; r < reps; ++r) {
    CK(cudaEventRecord(a));
    dispatch(wgmma, p);
    CK(cudaEventRecord(z));
    CK(cudaEventSynchronize(z));
    float ms;
    CK(cudaEventElapsedTime(&ms, a, z));
    t.push_back(ms);
  }
  CK(cudaGetLastError());
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

#ifdef FP8ATTN_EVENT_TRACE
int main(int argc, char** argv) {
  if (argc > 1) g_kv_tile = std::atoi(argv[1]);
  struct Shape {
    int B, S;
    bool causal;
  };
  for (const Shape& f : {Shape{16, 512, true}, Shape{4, 2048, true}, Shape{1, 8192, false}}) {
    Case c{"trace", f.B, 32, 32, 128, std::vector<int>(f.B, f.S), std::vector<int>(f.B, f.S)};
    c.causal = f.causal;
    Built b = build(c);
    b.p.q_descale = b.p.k_descale = nullptr;
    const double ms = time_ms(true, b.p, 10);  // with the recording on: slower than the plain binary
    trace_reset();
    dispatch(true, b.p);
    CK(cudaDeviceSynchronize());
    std::printf("\n=== B=%d H=32 S=%d D=128 causal=%d kv_tile=%d: %.1f us per call; warps 0 (producer), 4, 8 "
                "(consumers)\n", f.B, f.S, f.causal, g_kv_tile, ms * 1e3);
    trace_dump(4, 400);
  }
  return 0;
}
#elif defined(FP8ATTN_EVENT_STATS)
int main() {
  g_kv_tile = 128;  // the kernels' default tiles (128 keys at D 64 / 128, 64 at D 256)
  struct Shape {
    int B, S, D;
    bool causal;
    int Hkv = 32, page = 0;  // page > 0: varlen with a paged cache of that block size (cp.async tiles)
  };
  for (const Shape& f : {Shape{1, 8192, 128, false}, Shape{1, 8192, 128, true}, Shape{16, 512, 128, true},
                         Shape{1, 8192, 64, false}, Shape{1, 8192, 256, false}, Shape{8, 4096, 128, true, 8, 16}}) {
    Case c{"stats", f.B, 32, f.Hkv, f.D, std::vector<int>(f.B, f.S), std::vector<int>(f.B, f.S)};
    c.causal = f.causal;
    c.page = f.page;
    c.varlen = f.page > 0;
    Built b = build(c);
    b.p.q_descale = b.p.k_descale = nullptr;
    const double ms = time_ms(true, b.p, 10);  // accounted: compare with the plain binary's time
    const double tflops = 4.0 * f.B * 32 * double(f.S) * f.S * f.D / (f.causal ? 2 : 1) / ms / 1e9;
    stat_reset();
    dispatch(true, b.p);
    CK(cudaDeviceSynchronize());
    std::printf("\n=== B=%d H=32/%d S=%d D=%d causal=%d page=%d: %.1f us per call (%.0f TFLOP/s, accounted); cycles "
                "since the warp's previous event, all blocks; warp 0 producer, 4 and 8 the consumer warpgroups' first\n",
                f.B, f.Hkv, f.S, f.D, f.causal, f.page, ms * 1e3, tflops);
    stat_dump({0, 4, 8}, trace_event_name);
  }
  return 0;
}
#else
int main(int argc, char** argv) {
  const bool quick = argc > 1 && std::strcmp(argv[1], "--quick") == 0;
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  if (argc > 3 && std::strcmp(argv[1], "--profile") == 0) {  // one wgmma launch of 1 x 32 x 8192, for ncu
    Case c{"profile", 1, 32, 32, std::atoi(argv[2]), {8192}, {8192}};
    c.causal = std::atoi(argv[3]) != 0;
    if (argc > 4) g_kv_tile = std::atoi(argv[4]);
    Built b = build(c);
    b.p.q_descale = b.p.k_descale = nullptr;
    dispatch(true, b.p);
    CK(cudaDeviceSynchronize());
    return 0;
  }
  std::printf("device %s (cc %d.%d, %d SMs)\n", prop.name, prop.major, prop.minor, prop.multiProcessorCount);
  std::vector<Case> cases;
  for (int D : {64, 128, 256}) {
    Case a{"dense GQA 8/2, 1000x1000", 2, 8, 2, D, {1000, 1000}, {1000, 1000}};
    cases.push_back(a);
    Case b = a;
    b.name = "dense GQA causal, q 700 k 1000";
    b.qlens = {700, 700};
    b.klens = {1000, 900};
    b.causal = true;
    cases.push_back(b);
    Case v{"paged varlen window(100,0) page 16", 3, 8, 2, D, {300, 1, 77}, {1000, 513, 277}};
    v.varlen = true;
    v.page = 16;
    v.left = 100;
    v.right = 0;
    cases.push_back(v);
    Case s{"paged varlen softcap bf16 q/out page 48", 3, 4, 4, D, {129, 64, 7}, {130, 2000, 7}};
    s.varlen = true;
    s.page = 48;
    s.softcap = 30.f;
    s.bf16_q = s.bf16_out = true;
    cases.push_back(s);
    Case sp{"dense split 3, MQA 8/1", 1, 8, 1, D, {200}, {3000}};
    sp.splits = 3;
    cases.push_back(sp);
    Case e{"varlen empty + short seqs, causal q>k", 3, 4, 2, D, {100, 0, 50}, {30, 10, 0}};
    e.varlen = true;
    e.causal = true;
    cases.push_back(e);
  }
  bool all = true;
  for (const Case& c : cases) all &= check(c);
  std::printf("%s\n", all ? "ALL PASS" : "SOME FAILED");
  if (quick) return all ? 0 : 1;

  struct Perf {
    int B, H, Hkv, S, D;
    bool causal;
  };
  const Perf perf[] = {{1, 32, 32, 8192, 128, false}, {1, 32, 32, 8192, 128, true}, {4, 32, 32, 2048, 128, true},
                       {1, 32, 32, 8192, 64, false},  {1, 32, 32, 8192, 256, false}, {16, 32, 32, 512, 128, true},
                       {1, 32, 8, 8192, 128, true},   {4, 32, 8, 2048, 128, true}};
  std::printf("\n%-34s %10s %10s %8s\n", "prefill (FP8 out)", "f16 TF/s", "wgmma TF/s", "speedup");
  for (const Perf& f : perf) {
    Case c{"perf", f.B, f.H, f.Hkv, f.D, std::vector<int>(f.B, f.S), std::vector<int>(f.B, f.S)};
    c.causal = f.causal;
    Built b = build(c);
    b.p.q_descale = b.p.k_descale = nullptr;
    const double flops = 4.0 * f.B * f.H * double(f.S) * f.S * f.D / (f.causal ? 2 : 1);
    const double t0 = time_ms(false, b.p, 10), t1 = time_ms(true, b.p, 20);
    std::printf("B=%-2d H=%d/%d S=%-5d D=%-3d %-6s %10.1f %10.1f %8.2f\n", f.B, f.H, f.Hkv, f.S, f.D,
                f.causal ? "causal" : "", flops / t0 / 1e9, flops / t1 / 1e9, t0 / t1);
  }
  return all ? 0 : 1;
}
#endif  // FP8ATTN_EVENT_TRACE / FP8ATTN_EVENT_STATS
