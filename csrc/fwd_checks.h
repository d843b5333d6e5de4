// The checks of a forward call's arguments: every dtype, shape, device, stride, scalar and scale size, and
// the values of host-resident index and scale tensors (device ones only where the call synchronises
// anyway: a max_seqlen left 0). Each throws c10::ValueError / c10::TypeError naming the argument.
#pragma once
#include <cstdint>
#include <vector>

#include "fwd_args.h"
#include "kernels/params.h"

namespace fp8attn {

// A forward call as its checks found it: what filling its params takes beyond the arguments.
struct FwdLayout {
  bool varlen_q = false, varlen_k = false, paged = false;
  int64_t B = 0, H = 0, Hkv = 0, D = 0;
  int64_t T = 0;                // varlen q rows (0 when dense)
  const char* batch_from = "";  // where B comes from, for messages
  Fp8Kind fp8_kind = Fp8Kind::E4M3FN;
  ElemType q_type = ElemType::FP8, out_type = ElemType::BF16;
  int32_t q_descale_head_stride = 0, k_descale_head_stride = 0, v_descale_head_stride = 0;  // 1: per head
  std::vector<int64_t> k_lens;  // the keys of each sequence (empty: not known on the host)
  int64_t max_q_len = -1;       // the exact maximum q length (-1: not known on the host)
};

FwdLayout check_fwd_args(const FwdArgs& a);

}  // namespace fp8attn
