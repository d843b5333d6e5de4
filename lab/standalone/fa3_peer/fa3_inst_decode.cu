// FA3's paged FP8-KV decode, as vLLM's FLASH_ATTN backend calls it on Hopper with --kv-cache-dtype fp8
// (flash_attn_varlen_func: cu_seqlens_q + seqused_k + block_table, page size 16, causal): the one
// forward instance those calls reach and the split-KV combine kernel. Template arguments are what
// hopper/flash_api.cpp's run_mha_fwd -> run_mha_fwd_<90, e4m3, 128, 128, Split, PagedKVNonTMA, no softcap,
// PackGQA> -> run_flash_fwd picks for them: Split (num_splits > 1), PagedKVNonTMA (page 16 is not a
// multiple of kBlockN, get_pagedkv_tma), PackGQA (always with PagedKVNonTMA or Split), Varlen
// (cu_seqlens_q / seqused_k), causal (kept for seqlen_q == 1 with paged KV at hdim 128), ClusterM 1,
// no AppendKV / Qv / V col-major. Out-of-range params are refused by the caller (fa3_peer.cu).
#include "flash.h"
#include "flash_fwd_launch_template.h"
#include "flash_fwd_combine_launch_template.h"

void fa3_decode_fwd(Flash_fwd_params& p, cudaStream_t s) {
  //            Arch D    Dv  ClusterM Element                Out                  Causal Local Softcap Varlen
  run_flash_fwd<90, 128, 128, 1, cutlass::float_e4m3_t, cutlass::bfloat16_t, true, false, false, true,
                // PagedKVNonTMA AppendKV HasQv PackGQA Split V_colmajor
                true, false, false, true, true, false>(p, s);
}

// As run_mha_fwd_combine_<cutlass::bfloat16_t, float, 128> (flash_fwd_combine_launch_template.h) for
// the varlen case only: kBlockK 128 -> kBlockM 8, log2(max splits) from params.num_splits.
void fa3_decode_combine(Flash_fwd_params& p, cudaStream_t s, bool enable_pdl) {
  using T = cutlass::bfloat16_t;
  if (p.num_splits <= 32) run_flash_fwd_combine<90, 8, 128, 5, false, true, T, float>(p, s, enable_pdl);
  else if (p.num_splits <= 64) run_flash_fwd_combine<90, 8, 128, 6, false, true, T, float>(p, s, enable_pdl);
  else if (p.num_splits <= 128) run_flash_fwd_combine<90, 8, 128, 7, false, true, T, float>(p, s, enable_pdl);
  else run_flash_fwd_combine<90, 8, 128, 8, false, true, T, float>(p, s, enable_pdl);
}
