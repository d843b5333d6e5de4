"""The fuzzer's worker process (tests/test_fuzz.py starts it and restarts it after a crash or hang).

Reads one case per line on stdin (JSON: a valid dense, varlen or paged call, described by its seed, and
one mutation of one argument), runs ``fp8attn.forward`` on it and writes one JSON line per case:
``{"outcome": "error", "type": ..., "message": ...}`` or ``{"outcome": "ok", "match": bool, "why": ...}``,
where ``match`` compares the result with the fp64 reference at the project's FP8 tolerance
(tests/test_forward_cpu.py's assert_matches_reference) with NaN where, and only where, the reference has it.
"""

from __future__ import annotations

import json
import os
import random
import sys

import torch
from cases import NAN_CODE, make_case
from test_forward_cpu import assert_matches_reference

import fp8attn
from fp8attn.reference import QuantizedBounds, quantized_attention_bounds

FP8 = {"e4m3fn": torch.float8_e4m3fn, "e4m3fnuz": torch.float8_e4m3fnuz}
DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int32, torch.int64, torch.uint8,
          torch.bool, torch.float8_e4m3fn, torch.float8_e4m3fnuz]
TENSOR_ARGS = ["q", "k", "v", "out", "cu_seqlens_q", "cu_seqlens_k", "seqused_k", "block_table", "q_descale",
               "k_descale", "v_descale", "p_scale", "out_scale", "sinks"]
SCALAR_VALUES = {
    "softmax_scale": [0.0, -1.0, float("nan"), float("inf"), 1e39, 1e-50, 1e36, 1e-3, 10.0, "0.1", None, 2**70],
    "softcap": [-1.0, float("nan"), float("inf"), 1e39, 1e-45, 1e-20, 0.5, 30.0, "1", None],
    "window_size": [(-2, -1), (2**31, -1), (2**32, 0), (-1, 2**64), (0, 0), (5, -1), (-1, 3), (3,), "ab", 7,
                    (1.5, 2)],
    "kv_tile": [-1, 1, 7, 16, 64, 128, 129, 2**31, 2**32 + 3, 2**64, 16.0, "64", True, None],
    "max_seqlen_q": [-1, 1, 2**31, 2**40, 2**64, "8", 1.5],
    "max_seqlen_k": [-1, 1, 2**31, 2**40, 2**64, "8", 1.5],
    "causal": [1, "yes", None, True, False],
    "return_softmax_lse": [1, "no", None],
    "out_dtype": ["bfloat16", torch.float32, torch.float16, torch.bfloat16, torch.float8_e4m3fn, 3],
}
SCALE_VALUES = [0.0, -1.0, float("nan"), float("inf"), 1e-40, 1e-30, 1e-3, 1e30, 1e38, 1023.0, 1024.0, 2048.0]
INDEX_VALUES = [-1, -(2**31), 2**31 - 1, 10_000, 0, 1, 3]


def base_call(desc: dict) -> dict:
    """The valid call a case starts from, by name (q, k, v included)."""
    rng = random.Random(desc["seed"])
    B = rng.randint(1, 3)
    if desc["layout"] == "dense":
        q_len = rng.randint(1, 9)
        q_lens, k_lens = [q_len] * B, [q_len + rng.randint(0, 20)] * B
    else:
        q_lens = [rng.randint(0, 8) for _ in range(B)]
        k_lens = [n + rng.randint(0, 20) for n in q_lens]
    fp8 = FP8[desc["fp8"]]
    mask = rng.choice(["none", "causal", "window"])
    case = make_case(layout=desc["layout"], q_lens=q_lens, k_lens=k_lens, heads=4, kv_heads=rng.choice([1, 2, 4]),
                     head_dim=64, fp8=fp8, q_dtype=fp8 if desc["q"] == "fp8" else getattr(torch, desc["q"]),
                     per_head=rng.random() < 0.3, fp8_out=desc["fp8_out"], causal=mask == "causal",
                     window=(rng.randint(0, 6), rng.randint(0, 3)) if mask == "window" else (-1, -1),
                     softcap=rng.choice([0.0, 0.0, 5.0]), p_scale=rng.choice([None, 1 / 448, 1 / 256]),
                     block_size=rng.choice([4, 16]), sinks=rng.random() < 0.3, seed=desc["seed"])
    (q, k, v), kw = case.call_args()
    call = dict(q=q, k=k, v=v, **kw, return_softmax_lse=True)
    if rng.random() < 0.5:  # a caller's out, poisoned
        dtype = fp8attn.resolve_out_dtype(q, k, kw.get("out_scale"), None)
        call["out"] = torch.full(q.shape, float("nan")).to(dtype)
    if rng.random() < 0.3:
        call["kv_tile"] = rng.choice([16, 32, 128])
    return call


def _like(t: torch.Tensor, shape, rng: random.Random) -> torch.Tensor:
    """A tensor of t's dtype and the given shape, with values like t's (index tensors: a prefix / repeats)."""
    n = 1
    for s in shape:
        n *= s
    flat = t.reshape(-1)
    if flat.numel() == 0:
        return torch.zeros(shape).to(t.dtype)
    idx = torch.arange(n) % flat.numel()
    return flat[idx].reshape(shape).clone()


def empty(call: dict, dim: str) -> dict:
    """The call with one size set to 0 wherever it occurs (q/k/v/out, the index tensors, a per-head scale
    becomes per tensor), nothing else changed: B, Sq, T (q rows), Sk, Tk (k rows), H, Hkv, D, and for a paged
    cache blocks, block_size and pages (block-table columns, no keys used)."""
    q = call["q"]

    def cut(axis: int, *names: str) -> None:
        for name in names:
            if name in call:
                call[name] = call[name].narrow(axis, 0, 0)

    def per_tensor(*names: str) -> None:
        for name in names:
            if name in call and call[name].numel() > 1:
                call[name] = call[name][:1].clone()

    def zeros(n: int) -> torch.Tensor:
        return torch.zeros(n, dtype=torch.int32)

    B = q.shape[0] if q.dim() == 4 else call["cu_seqlens_q"].numel() - 1
    if dim == "B":
        if q.dim() == 4:
            cut(0, "q", "out", "k", "v")
        else:
            cut(0, "q", "out")
            call["cu_seqlens_q"] = zeros(1)
            if "cu_seqlens_k" in call:
                cut(0, "k", "v")
                call["cu_seqlens_k"] = zeros(1)
            if "block_table" in call:
                call["seqused_k"], call["block_table"] = zeros(0), call["block_table"][:0]
    elif dim in ("Sq", "T"):
        cut(q.dim() - 3, "q", "out")
        if dim == "T":
            call["cu_seqlens_q"] = zeros(B + 1)
    elif dim in ("Sk", "Tk"):
        cut(call["k"].dim() - 3, "k", "v")
        if dim == "Tk":
            call["cu_seqlens_k"] = zeros(B + 1)
    elif dim == "H":
        cut(-2, "q", "out")
        per_tensor("q_descale")
    elif dim == "Hkv":
        cut(-2, "k", "v")
        per_tensor("k_descale", "v_descale")
    elif dim == "D":
        cut(-1, "q", "k", "v", "out")
    elif dim in ("blocks", "block_size"):
        cut(0 if dim == "blocks" else 1, "k", "v")
    elif dim == "pages":
        call["block_table"], call["seqused_k"] = call["block_table"][:, :0], zeros(B)
    else:
        raise ValueError(f"unknown empty dimension {dim}")
    return call


def mutate(call: dict, m: dict, rng: random.Random) -> dict:
    """Apply one mutation to one argument (m: class, arg, choice; the empty class: dim, arg the argument a
    refusal must name)."""
    cls, arg, pick = m["class"], m["arg"], m["pick"]
    if arg == "p_scale" and "p_scale" not in call and cls not in ("type", "scalar"):
        call["p_scale"] = torch.tensor([fp8attn.default_p_scale(call["k"].dtype)])
    if arg == "sinks" and "sinks" not in call and cls not in ("type", "scalar"):
        call["sinks"] = torch.linspace(-4.0, 6.0, call["q"].shape[-2])
    if arg == "out" and "out" not in call and cls != "type":
        dtype = fp8attn.resolve_out_dtype(call["q"], call["k"], call.get("out_scale"), None)
        call["out"] = torch.empty(call["q"].shape, dtype=dtype)
    t = call.get(arg)
    if cls == "empty":
        call = empty(call, m["dim"])
    elif cls == "scalar":
        values = SCALAR_VALUES[arg]
        call[arg] = values[pick % len(values)]
    elif cls == "type":
        call[arg] = ["str", 3.5, [1, 2], None, 7][pick % 5]
    elif cls == "dtype":
        dtype = DTYPES[pick % len(DTYPES)]
        call[arg] = t.float().to(dtype) if t.dtype in (torch.float8_e4m3fn, torch.float8_e4m3fnuz) else t.to(dtype)
    elif cls == "rank":
        choice = pick % 3
        if choice == 0 or t.dim() == 0 or t.shape[0] == 0:
            call[arg] = t.unsqueeze(0)
        else:
            call[arg] = t.reshape(-1) if choice == 1 else t[0]
    elif cls == "shape":
        d = pick % max(t.dim(), 1)
        shape = list(t.shape) or [1]
        shape[d] = [0, 1, max(shape[d] - 1, 0), shape[d] + 1, 2 * shape[d] + 1][(pick // 7) % 5]
        call[arg] = _like(t, shape, rng)
    elif cls == "stride":
        choice = pick % 4
        if choice == 0 or t.dim() < 2:  # last dim strided
            x = torch.empty(*t.shape, 2, dtype=t.dtype)
            x[..., 0] = t
            call[arg] = x[..., 0]
        elif choice == 1:  # rows strided, last dim contiguous
            x = torch.empty(*t.shape[:-1], 2 * t.shape[-1], dtype=t.dtype)
            x[..., : t.shape[-1]] = t
            call[arg] = x[..., : t.shape[-1]]
        elif choice == 2:  # another dim order in memory
            call[arg] = t.transpose(0, 1).contiguous().transpose(0, 1)
        else:  # stride 0 along the first dim (same value everywhere along it)
            first = t[:1]
            if arg == "v" and t.dtype in NAN_CODE:  # a paged cache's block 0 may hold the NaN-poisoned unused
                first = first.clone()  # rows, which this makes keys' values: no NaN in v (see "value")
                codes = first.view(torch.uint8)
                codes[codes == NAN_CODE[t.dtype]] = 0
            call[arg] = first.expand(t.shape)
    elif cls == "device":
        call[arg] = t.to("meta")
    elif cls == "value":
        t = t.clone()
        if t.numel() == 0:
            call[arg] = t
        elif arg in ("q", "k", "v", "out"):
            i = rng.randrange(t.numel())
            # (No NaN in v: the rule leaves NaN in the v of a masked key unspecified; tests/test_nan.py
            # checks the cases it specifies.)
            if t.dtype in NAN_CODE:
                nan = pick % 2 == 0 and arg != "v"
                t.view(torch.uint8).view(-1)[i] = NAN_CODE[t.dtype] if nan else 0x7E ^ (0x80 * (pick % 3 == 0))
            else:
                t.view(-1)[i] = [float("nan"), float("inf"), -float("inf"), 6e4][pick % 4 if arg != "v" else 3]
            call[arg] = t
        elif t.dtype == torch.float32:
            t.view(-1)[rng.randrange(t.numel())] = SCALE_VALUES[pick % len(SCALE_VALUES)]
            call[arg] = t
        else:
            t.view(-1)[rng.randrange(t.numel())] = INDEX_VALUES[pick % len(INDEX_VALUES)]
            call[arg] = t
    elif cls == "alias":
        q, k = call["q"], call["k"]
        out = call["out"]
        choice = pick % 3
        if choice == 0:  # stride 0 out
            call["out"] = torch.empty((1, *out.shape[1:]), dtype=out.dtype).expand(out.shape)
        elif choice == 1:  # out shares q's memory (q 16-bit: out = q; else out over q's bytes)
            call["out"] = q if q.dtype == out.dtype else q.view(torch.uint8).view(out.dtype)[..., : q.shape[-1]] \
                if out.element_size() == 1 else out
        else:  # out partly over k's bytes
            buf = torch.empty(k.numel() * k.element_size() + out.numel() * out.element_size(), dtype=torch.uint8)
            kb = buf[out.numel() * out.element_size() // 2:][: k.numel() * k.element_size()]
            kb.copy_(k.reshape(-1).view(torch.uint8))
            call["k"] = kb.view(k.dtype).view(k.shape)
            call["out"] = buf[: out.numel() * out.element_size()].view(out.dtype).view(out.shape)
    else:
        raise ValueError(f"unknown mutation class {cls}")
    return call


def _valid_rows(call: dict, lse_shape) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """Masks of the out rows / lse entries the op writes (varlen: rows < cu_seqlens_q[-1]; padding rows are
    not written by contract)."""
    q = call["q"]
    if q.dim() != 3:
        return None, None
    n = int(call["cu_seqlens_q"][-1])
    rows = torch.arange(q.shape[0]) < n
    return rows.view(-1, 1, 1).expand(q.shape), rows.view(1, -1).expand(lse_shape)


def compare(out: torch.Tensor, lse: torch.Tensor | None, call: dict) -> tuple[bool, str]:
    kw = {k: v for k, v in call.items() if k not in ("q", "k", "v", "out", "return_softmax_lse")}
    kv_tile = kw.pop("kv_tile", 0) or 64
    if isinstance(kw.get("window_size"), list):
        kw["window_size"] = tuple(kw["window_size"])
    ref = quantized_attention_bounds(call["q"], call["k"], call["v"], kv_tile=kv_tile, **kw)
    if lse is None:
        lse = ref.lse.clone()
    rows, lse_rows = _valid_rows(call, ref.lse.shape)
    if rows is not None:  # padding rows: what the reference says (0 / -inf) stands in for "not written"
        out = torch.where(rows, out, ref.out)
        lse = torch.where(lse_rows, lse, ref.lse)
    nan_o, nan_ref = torch.isnan(out.float()), torch.isnan(ref.out.float())
    if not torch.equal(nan_o, nan_ref):
        return False, f"NaN at {int(nan_o.sum())} outputs, the reference at {int(nan_ref.sum())}"
    nan_l, nan_rl = torch.isnan(lse), torch.isnan(ref.lse)
    if not torch.equal(nan_l, nan_rl):
        return False, f"NaN at {int(nan_l.sum())} lse entries, the reference at {int(nan_rl.sum())}"

    def clean(x, nan, fill):
        return torch.where(nan, torch.tensor(fill).to(x.dtype), x)

    zero = 0.0
    b = QuantizedBounds(clean(ref.out, nan_o, zero), clean(ref.lse, nan_l, 0.0), clean(ref.out_lo, nan_o, zero),
                        clean(ref.out_hi, nan_o, zero), clean(ref.lse_lo, nan_l, 0.0), clean(ref.lse_hi, nan_l, 0.0),
                        ref.tie)
    try:
        assert_matches_reference(clean(out, nan_o, zero), clean(lse, nan_l, 0.0), b)
    except AssertionError as e:
        return False, f"differs from the reference: {e}"[:300]
    return True, ""


def _snapshot(x):
    return x.clone() if isinstance(x, torch.Tensor) and x.device.type != "meta" else x


def run(desc: dict) -> dict:
    rng = random.Random(desc["seed"] * 7919 + desc["mutation"]["pick"])
    try:
        call = mutate(base_call(desc), desc["mutation"], rng)
    except Exception as e:  # noqa: BLE001  (a bug of the fuzzer, not of the op)
        return {"outcome": "harness error", "message": f"{type(e).__name__}: {e}"[:300]}
    before = {name: _snapshot(x) for name, x in call.items()}  # the reference sees the inputs as called
    q, k, v = call.pop("q"), call.pop("k"), call.pop("v")
    try:
        res = fp8attn.forward(q, k, v, **call)
    except Exception as e:  # the parent judges the type and the message
        return {"outcome": "error", "type": type(e).__name__, "message": str(e).split("\n")[0][:400]}
    out, lse = res if isinstance(res, tuple) else (res, None)
    if out.device.type == "meta":
        return {"outcome": "ok", "match": False, "why": "returned a meta tensor"}
    if "out" in call and isinstance(call["out"], torch.Tensor) and out is not call["out"]:
        return {"outcome": "ok", "match": False, "why": "did not write the caller's out"}
    try:
        match, why = compare(out, lse, {**before, "out": out})
    except Exception as e:  # noqa: BLE001  (a reference that cannot take the call is reported)
        return {"outcome": "ok", "match": False, "why": f"reference raised {type(e).__name__}: {e}"[:300]}
    return {"outcome": "ok", "match": match, "why": why}


def main() -> None:
    torch.set_num_threads(1)
    proto = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # anything else printed goes to stderr, not into the protocol
    for line in sys.stdin:
        proto.write(json.dumps(run(json.loads(line))) + "\n")


if __name__ == "__main__":
    main()
