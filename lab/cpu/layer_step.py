"""One attention layer of a vLLM CPU engine step, both backends as the engine calls them (lab check).

    taskset -c 0 python lab/cpu/layer_step.py [--seqs 16 --ctx 64 --heads 8 --kv-heads 2 --dim 64 --q-len 1]

FP8ATTN's impl (forward: the cache write and attention, on the engine's LBNHC cache) and vLLM's CPU_ATTN impl
(do_kv_cache_update, then forward with scheduler metadata built once per batch, on its LBHNC cache), on one
thread, alternated in rounds; prints the min and median CPU time per layer (thread_time: steadier than wall
time on a loaded machine). FP8ATTN's q as vLLM's compiled graph gives it (FP8, quantized before the call) and
16-bit. vLLM's own per-op wrappers (unified_attention_with_output, and CPU_ATTN's unified_kv_cache_update)
are not included.
"""
import argparse
import statistics
import time
import types

import torch


def layer(q_scale, k_scale, v_scale, isa=None):
    return types.SimpleNamespace(
        _q_scale=torch.tensor([q_scale]), _k_scale=torch.tensor([k_scale]), _v_scale=torch.tensor([v_scale]),
        _prob_scale=torch.tensor([1.0]), _k_scale_float=k_scale, _v_scale_float=v_scale,
        _q_scale_float=q_scale, isa=isa, layer_name="model.layers.0.self_attn.attn")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seqs", type=int, default=16)
    ap.add_argument("--ctx", type=int, default=64)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--kv-heads", type=int, default=2)
    ap.add_argument("--dim", type=int, default=64)
    ap.add_argument("--q-len", type=int, default=1)
    ap.add_argument("--block", type=int, default=128)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--calls", type=int, default=200)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--only", default="", help="run this part alone, --calls times (for a profiler)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.cpu._init_amx()  # as vLLM's CPU worker does: CPU_ATTN runs AMX tiles where the CPU has them
    import vllm._custom_ops as ops
    from vllm import envs
    from vllm.v1.attention.backends.cpu_attn import CPUAttentionBackendImpl, CPUAttentionMetadata, _get_attn_isa

    from fp8attn.integrations.vllm.backend import FP8AttnImpl, FP8AttnMetadata

    B, ctx, H, Hkv, D, bs, ql = args.seqs, args.ctx, args.heads, args.kv_heads, args.dim, args.block, args.q_len
    T = B * ql
    g = torch.Generator().manual_seed(0)
    per_seq = (ctx + bs - 1) // bs
    nb = B * per_seq + 1
    table = (1 + torch.arange(B * per_seq, dtype=torch.int32)).view(B, per_seq)
    seq_lens = torch.full((B,), ctx, dtype=torch.int32)
    qsl = torch.arange(0, T + 1, ql, dtype=torch.int32)
    pos = torch.arange(ctx - ql, ctx).repeat(B)
    slots = (table.repeat_interleave(ql, 0).gather(1, (pos // bs).view(-1, 1)).view(-1).long() * bs + pos % bs)
    q = torch.randn(T, H, D, generator=g).to(torch.bfloat16)
    key = torch.randn(T, Hkv, D, generator=g).to(torch.bfloat16)
    value = torch.randn(T, Hkv, D, generator=g).to(torch.bfloat16)
    out = torch.empty(T, H, D, dtype=torch.bfloat16)
    scale = D ** -0.5

    # FP8ATTN on the engine's LBNHC cache ([blocks, block, Hkv, 2D] in memory, viewed [blocks, Hkv, block, 2D])
    kv8 = torch.randn(nb, bs, Hkv, 2 * D, generator=g).to(torch.float8_e4m3fn).view(torch.uint8).permute(0, 2, 1, 3)
    f_impl = FP8AttnImpl(H, D, scale, Hkv, None, None, "fp8")
    f_layer = layer(0.05, 1.0, 1.0)  # K / V values ~N(0, 1) in the cache, as a calibrated model's
    f_meta = FP8AttnMetadata(num_actual_tokens=T, max_query_len=ql, query_start_loc=qsl, max_seq_len=ctx,
                             seq_lens=seq_lens, block_table=table, slot_mapping=slots)
    q8 = (q.float() / 0.05).to(torch.float8_e4m3fn)

    # CPU_ATTN on its LBHNC cache
    isa = _get_attn_isa(torch.bfloat16, bs, D, "fp8")
    kvc = torch.randn(nb, Hkv, bs, 2 * D, generator=g).to(torch.float8_e4m3fn).view(torch.uint8)
    import vllm.v1.attention.backends.cpu_attn as cpu_attn
    cpu_attn.get_current_vllm_config = lambda: types.SimpleNamespace(  # its __init__ reads the model dtype
        model_config=types.SimpleNamespace(dtype=torch.bfloat16))
    c_impl = CPUAttentionBackendImpl(H, D, scale, Hkv, None, None, "fp8")
    c_layer = layer(1.0, 1.0, 1.0, isa)
    meta = ops.cpu_attn_get_scheduler_metadata(B, H, Hkv, D, seq_lens, torch.bfloat16, qsl, True, -1, isa,
                                               envs.VLLM_CPU_ATTN_SPLIT_KV, kv_cache_dtype="fp8")
    c_meta = CPUAttentionMetadata(num_actual_tokens=T, max_query_len=ql, query_start_loc=qsl, max_seq_len=ctx,
                                  seq_lens=seq_lens, block_table=table, slot_mapping=slots, scheduler_metadata=meta)

    def cpu_attn_step():
        c_impl.do_kv_cache_update(c_layer, key, value, kvc, slots)
        c_impl.forward(c_layer, q, key, value, kvc, c_meta, out)

    parts = {
        "fp8attn q8": lambda: f_impl.forward(f_layer, q8, key, value, kv8, f_meta, out),
        "fp8attn q16": lambda: f_impl.forward(f_layer, q, key, value, kv8, f_meta, out),
        "cpu_attn": cpu_attn_step,
    }
    if args.only:
        for _ in range(args.calls):
            parts[args.only]()
        return
    times = {k: [] for k in parts}
    for _ in range(args.rounds):
        for name, fn in parts.items():
            for _ in range(10):
                fn()
            ts = []
            for _ in range(args.calls):
                t0 = time.thread_time()
                fn()
                ts.append(time.thread_time() - t0)
            times[name].append(statistics.median(ts))
    print(f"B {B} ctx {ctx} H {H}/{Hkv} D {D} q_len {ql} block {bs}, {args.threads} thread(s); "
          "us per call: min / median over rounds (each a median of calls)")
    for name, ts in times.items():
        print(f"  {name:18s} {min(ts) * 1e6:8.1f} {statistics.median(ts) * 1e6:8.1f}")


if __name__ == "__main__":
    main()
