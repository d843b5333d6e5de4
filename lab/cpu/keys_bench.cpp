// The CPU decode kernel (KeysKernel) alone on synthetic decode items, torch-free (lab check): CPU time per
// (key, kv head) and GB/s of K+V read, and a hash of the output (the same for every instruction set).
//
//   g++ -O3 -std=c++17 -ffp-contract=off -mavx2 -mfma -mf16c -mavx512f -mavx512dq -mavx512bw -mavx512vl \
//       -mavx512vbmi -mavx512bf16 -Icsrc -DKERNEL='"cpu/kernel_avx512vbmi.cpp"' -DKERNEL_FN=avx512vbmi_kernel \
//       -o /tmp/keys_bench lab/cpu/keys_bench.cpp
//   taskset -c 0 /tmp/keys_bench D KEYS GROUPS LANES_PER_GROUP REPS SEQS
//
// Each sequence is one item (all its kv heads, as the driver plans decode), its cache in vLLM's CPU layout
// (blocks of 128 tokens, [token][kv head][K | V]), blocks in reverse order; FP8 values of magnitude 2^-3..2^1.
#include KERNEL

#include <time.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

using namespace fp8attn;
using namespace fp8attn::cpu;

static double cpu_now() {
  timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

int main(int argc, char** argv) {
  const int D = argc > 1 ? atoi(argv[1]) : 128, keys = argc > 2 ? atoi(argv[2]) : 512;
  const int groups = argc > 3 ? atoi(argv[3]) : 8, lpg = argc > 4 ? atoi(argv[4]) : 4;
  const int reps = argc > 5 ? atoi(argv[5]) : 200, seqs = argc > 6 ? atoi(argv[6]) : 1;
  const int page = 128, nblk = (keys + page - 1) / page, lanes = groups * lpg;
  const int64_t row = int64_t{groups} * 2 * D;
  std::mt19937 g(1);
  auto code = [&] { return static_cast<uint8_t>(((4 + g() % 5) << 3 | g() % 8) | (g() % 2) << 7); };
  std::vector<std::vector<uint8_t>> cache(seqs);
  std::vector<std::vector<int32_t>> table(seqs);
  for (int s = 0; s < seqs; ++s) {
    cache[s].resize(static_cast<size_t>(nblk + 1) * page * row);
    for (auto& b : cache[s]) b = code();
    for (int i = 0; i < nblk; ++i) table[s].push_back(nblk - i);
  }
  std::vector<uint8_t> q(static_cast<size_t>(lanes) * D);
  for (auto& b : q) b = code();
  std::vector<uint16_t> out(static_cast<size_t>(lanes) * D);
  std::vector<int32_t> lo(lanes, 0), hi(lanes, keys);
  std::vector<float> scale(lanes, 0.15f), inv_q(lanes, 1.f), v_descale(lanes, 0.02f);
  std::vector<int64_t> q_off(lanes), o_off(lanes), lse_off(lanes);
  for (int i = 0; i < lanes; ++i) q_off[i] = o_off[i] = int64_t{i} * D;
  const Kernel k = KERNEL_FN();
  void* scratch = aligned_alloc(64, (k.scratch_bytes(D, 64, lanes) + 63) / 64 * 64);
  std::vector<double> ts;
  for (int r = 0; r < reps; ++r) {
    const double t0 = cpu_now();
    for (int s = 0; s < seqs; ++s) {
      ItemArgs a;
      a.head_dim = D, a.tile = 64, a.lanes = lanes, a.lo = lo.data(), a.hi = hi.data(), a.key_end = keys;
      a.q = q.data(), a.q_type = ElemType::FP8, a.q_off = q_off.data(), a.inv_q_descale = inv_q.data();
      a.logit_scale = scale.data(), a.inv_p_scale = 256.f, a.p_scale = 1 / 256.f, a.kind = Fp8Kind::E4M3FN;
      a.keys.k = cache[s].data(), a.keys.v = cache[s].data() + D, a.keys.k_row = a.keys.v_row = row;
      a.keys.blocks = table[s].data(), a.keys.k_block = a.keys.v_block = page * row, a.keys.page = page;
      a.keys.num_blocks = nblk + 1, a.groups = groups, a.k_group_stride = a.v_group_stride = 2 * D;
      a.out = out.data(), a.out_type = ElemType::BF16, a.o_off = o_off.data(), a.v_descale = v_descale.data();
      a.lse_off = lse_off.data(), a.scratch = scratch;
      k.run(a);
    }
    ts.push_back(cpu_now() - t0);
  }
  std::sort(ts.begin(), ts.end());
  const double key_heads = double(keys) * groups * seqs;
  uint32_t hash = 0;
  for (const uint16_t x : out) hash = hash * 31 + x;
  printf("D %d keys %d groups %d lanes/group %d seqs %d: min %.1f us, median %.1f us, %.1f ns per key-head, "
         "%.2f GB/s, output hash %08x\n", D, keys, groups, lpg, seqs, ts[0] * 1e6, ts[ts.size() / 2] * 1e6,
         ts[0] * 1e9 / key_heads, key_heads * 2 * D / ts[0] / 1e9, hash);
  free(scratch);
}
