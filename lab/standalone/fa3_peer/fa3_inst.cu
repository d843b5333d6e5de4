// FA3's FP8 forward instances the harness calls (dense, no window, GQA unpacked, no split; FP8 in, bf16 out),
// one translation unit per head dim: -DFA3_HDIM=64 | 128 | 256 (build.sh).
#include "flash.h"
#include "flash_fwd_launch_template.h"

template <int D, bool Causal>
void run(Flash_fwd_params& p, cudaStream_t s) {
  run_flash_fwd<90, D, D, 1, cutlass::float_e4m3_t, cutlass::bfloat16_t, Causal, false, false, false, false, false,
                false, false, false, false>(p, s);
}
template void run<FA3_HDIM, false>(Flash_fwd_params&, cudaStream_t);
template void run<FA3_HDIM, true>(Flash_fwd_params&, cudaStream_t);
