#!/usr/bin/env python3
"""The one table of the GPU forward kernels, and everything emitted from it.

PIPELINES is the table: each pipeline kind with the head dims, FP8 kinds, KV tiles and row variants
it has kernels for, the policy whose block rows it runs and its launcher; TARGETS names the kinds of
device and the pipelines each runs, in preference order. One kernel = (pipeline, head dim, fp8 kind,
mask kind, KV tile, rows variant), named fwd_<pipeline><rows>_hd<D>_<fp8 kind>_<mask>_kv<tile>, e.g.
fwd_wgmma_hd128_e4m3fn_band_kv128 or fwd_decode8_hd128_e4m3fn_band_kv64 (a decode kernel serving at
most 8 packed query rows per (batch, kv head)). The q / out element types, softcap, layout (dense /
varlen / paged), GQA ratio and split count are run-time properties of FwdParams handled outside the
KV loop: no kernels of their own.

  generate.py --out-dir DIR [--gpu cuda|rocm] [--sm90a]
      DIR/fwd_<pipeline>_hd<D>_<fp8 kind>_<mask>_kv<tile>.cu (the launchers of that kernel and
      its rows variants, each with its block rows asserted against its policy),
      DIR/fwd_table.cpp (the host table choose_fwd_kernel reads, csrc/kernels/fwd/dispatch.h),
      DIR/fwd_launch.cu (the launchers in table order) and DIR/sources.txt; rewrites only changed
      files; the ROCm build hipifies them. --sm90a: the build generates sm_90a code (the wgmma
      kernels are empty in any other device pass).
  generate.py --shapes
      rewrites the checked-in constants other code reads: csrc/kernels/shapes.h (C++: the argument
      checks and every implementation) and fp8attn/shapes.py (Python: the wrapper, quant, the vLLM
      backend): the head dims, the default and widest KV tiles, the default P scale of each FP8 kind;
      tests/test_dispatch.py checks that they are current.

Build-time filters (comma lists; unset = all):
  FP8ATTN_HEAD_DIMS   e.g. "128" or "64,128"
  FP8ATTN_FP8_KINDS   "e4m3fn", "e4m3fnuz"
  FP8ATTN_ARCHS       targets, each building the pipelines that list it: sm89 fp8mma; sm80 / sm86 /
                      sm90 f16 and decode; sm90a those and wgmma; gfx942 / gfx950 mfma. Targets of
                      the other platform are ignored.
Adding a pipeline: an entry in PIPELINES (its policy and launcher live in its own header) and its
name in the TARGETS that should run it.
"""
import argparse
import os
import sys
from dataclasses import dataclass, field

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HEAD_DIMS = (64, 80, 96, 112, 128, 192, 256)  # every implementation's (the argument checks read shapes.h)
FP8_KINDS = {"e4m3fn": "Fp8Kind::E4M3FN", "e4m3fnuz": "Fp8Kind::E4M3FNUZ"}  # numeric/fp8_kind.h's order
# The P scale of a call without p_scale: a power of two, so p / p_scale is exact, and p = 1 maps to 256 (fn)
# or 128 (fnuz), the same bit pattern in both types (an fnuz code is worth half), below either maximum.
DEFAULT_P_SCALE = {"e4m3fn": 2.0**-8, "e4m3fnuz": 2.0**-7}
MASKS = {"nomask": "MaskKind::kNone", "band": "MaskKind::kBand"}
# The tile of kv_tile = 0 on the CPU and on every pipeline's default kernels but the Hopper wgmma ones; every
# GPU pipeline has it, so the CPU oracle and the GPU kernels quantize P at the same points by default.
DEFAULT_KV_TILE = 64


@dataclass(frozen=True)
class Pipeline:
    """One pipeline kind. `policy` and `launch` are C++ with {problem}, {kv}, {rows} filled in per kernel."""
    name: str            # in kernel names (rows variants append their rows); FP8ATTN_PIPELINE's value
    gpu: str             # the platform: "cuda" or "rocm"
    archs: tuple         # FP8ATTN_ARCHS targets that build it
    policy: str
    launch: str
    block_rows: object   # (head dim, kv tile, rows) -> packed query rows per block (= policy's kBlockM)
    head_dims: tuple = HEAD_DIMS
    kinds: tuple = tuple(FP8_KINDS)
    kv_tiles: dict = field(default_factory=lambda: {DEFAULT_KV_TILE: HEAD_DIMS})  # tile -> head dims
    default_tile: object = lambda d, mask: DEFAULT_KV_TILE  # the tile kv_tile = 0 takes
    rows: tuple = (0,)   # variants by the most packed rows per (batch, kv head) they serve; 0: any
    includes: tuple = ()
    sm90a: bool = False  # built only when the build generates sm_90a code
    item_counter: bool = False  # takes FwdParams::item_counter (dynamic work order) for varlen / masked calls
    page_boxes: bool = False  # serves only paged caches of 16-key-multiple blocks (its tiles are TMA page boxes)
    blocks_per_sm: object = None  # decode pipelines: (head dim, rows) -> the policy's kBlocksPerSm (its split plan)


def _wgmma_rows(d, kv, rows):  # policy_wgmma.h wgmma_consumers: 64 rows per consumer warpgroup
    return 64 * (3 if d == 64 or (d == 128 and kv == 64) else 2)


def _decode_blocks(d, rows):  # decode_config.h decode_blocks_per_sm (asserted by the instance files)
    if rows <= 8:
        return 4 if d <= 192 else 3
    return 4 if d <= 64 else 3 if d <= 128 else 2


def _mfma_rows(d, kv, rows):  # policy.h on gfx9's 64 KiB LDS: 4 wavefronts x 32 rows up to D 128, 2 at 192, 1 at 256
    return {192: 64, 256: 32}.get(d, 128)


FP8_OPERANDS = "launch_with<{problem}, Policy, FwdPipeline<{problem}, Policy>>"
PIPELINES = (
    # FP8 operands straight into e4m3 mma.sync m16n8k32 (native on sm_89): pipeline.h, policy.h.
    Pipeline("fp8mma", "cuda", ("sm89",), "FwdPolicyFp8<{problem}>", FP8_OPERANDS, lambda d, kv, rows: 64),
    # FP8 widened to f16 in shared memory, f16 mma.sync (sm_90 portable: there an e4m3 mma.sync is
    # lowered to f16 HMMAs plus per-instruction conversions): pipeline_f16.h.
    Pipeline("f16", "cuda", ("sm80", "sm86", "sm90", "sm90a"), "FwdPolicyNvF16<{problem}>",
             "launch_with<{problem}, Policy, FwdPipelineNvF16<{problem}, Policy>>",
             lambda d, kv, rows: 128 if d <= 128 else 64, includes=("kernels/fwd/pipeline_f16.h",)),
    # Decode (q_len * H / H_kv <= 16 packed rows per (batch, kv head)): the rows on the n8 side of
    # the f16 MMA, one n8 tile per 8 rows, FP8 K/V ring widened in registers: pipeline_decode.h.
    Pipeline("decode", "cuda", ("sm80", "sm86", "sm90", "sm90a"), "FwdPolicyNvDecode<{problem}, {rows} / 8>",
             "launch_decode_with<{problem}, Policy>", lambda d, kv, rows: rows, rows=(8, 16),
             includes=("kernels/fwd/pipeline_decode.h",), blocks_per_sm=_decode_blocks),
    # Decode on the Hopper FP8 tensor cores: S^T and O^T by wgmma with the rows on N, K and V as FP8
    # operands (no widening), over paged caches of whole 16-key page boxes: pipeline_decode_wgmma.h.
    Pipeline("decodewg", "cuda", ("sm90a",), "FwdPolicyNvDecodeWg<{problem}, {rows} / 8>",
             "launch_decode_with<{problem}, Policy, FwdPipelineNvDecodeWg<{problem}, Policy>>",
             lambda d, kv, rows: rows, head_dims=(64, 128, 256), kinds=("e4m3fn",), rows=(8, 16),
             includes=("kernels/fwd/pipeline_decode_wgmma.h",), sm90a=True, page_boxes=True,
             blocks_per_sm=lambda d, rows: 4 if d <= 128 else 2),  # decode_config.h decode_wg_blocks_per_sm
    # The Hopper warp-specialized pipeline: FP8 wgmma, TMA, persistent blocks (kernel_wgmma.h). The
    # KV tile 128 is its default but for unmasked D 128, whose three-consumer 64-key kernel is
    # faster (with a mask the 192-row blocks lose more on their diagonal tiles than they gain), and
    # for D 256, whose 128-key steps run without the S / P.V overlap (docs/hopper-pipeline.md).
    Pipeline("wgmma", "cuda", ("sm90a",), "FwdPolicyNvWgmma<{problem}, {kv}>", "launch_fwd_wgmma<{problem}, {kv}>",
             _wgmma_rows, head_dims=(64, 128, 256), kinds=("e4m3fn",),
             kv_tiles={64: (64, 128, 256), 128: (64, 128, 256)},
             default_tile=lambda d, mask: 64 if d == 256 or (d == 128 and mask == "nomask") else 128,
             includes=("kernels/fwd/kernel_wgmma.h",), sm90a=True, item_counter=True),
    # AMD gfx942 / gfx950: the fp8-operand pipeline on the FP8 MFMA atoms (arch/amd_mfma.h).
    Pipeline("mfma", "rocm", ("gfx942", "gfx950"), "FwdPolicyFp8<{problem}>", FP8_OPERANDS, _mfma_rows),
)


@dataclass(frozen=True)
class Target:
    """A kind of device: the pipelines it runs, in preference order (the first with a kernel for a call runs it)."""
    name: str
    cc: tuple  # the CUDA compute capability it stands for; (-1, -1): any other device of the build's platform
    pipes: tuple


TARGETS = {
    "cuda": (Target("sm90", (9, 0), ("decodewg", "decode", "wgmma", "f16", "fp8mma")),  # H100 / H200
             Target("sm89", (8, 9), ("fp8mma", "decode", "f16")),           # e4m3 mma.sync native
             Target("cuda", (-1, -1), ("decode", "f16", "fp8mma"))),
    "rocm": (Target("gfx9", (-1, -1), ("mfma",)),),
}
ARCHS = {"cuda": ("sm80", "sm86", "sm89", "sm90", "sm90a"), "rocm": ("gfx942", "gfx950")}


@dataclass(frozen=True)
class Kernel:
    pipe: Pipeline
    d: int
    kind: str
    mask: str
    kv: int
    rows: int

    @property
    def name(self):
        return f"fwd_{self.pipe.name}{self.rows or ''}_hd{self.d}_{self.kind}_{self.mask}_kv{self.kv}"

    @property
    def problem(self):
        return f"FwdProblem<{self.d}, {FP8_KINDS[self.kind]}, {MASKS[self.mask]}>"

    def fill(self, text):
        return text.format(problem="Problem", kv=self.kv, rows=self.rows)


def _filter(env, allowed, conv=str):
    val = os.environ.get(env, "").strip()
    if not val:
        return list(allowed)
    want = [conv(x.strip()) for x in val.split(",") if x.strip()]
    bad = [w for w in want if w not in allowed]
    if bad:
        sys.exit(f"generate.py: {env} has unknown values {bad}; known: {list(allowed)}")
    return [a for a in allowed if a in want]


def _archs(gpu):
    val = os.environ.get("FP8ATTN_ARCHS", "").strip()
    if not val:
        return set(ARCHS[gpu])
    known = {a for archs in ARCHS.values() for a in archs}
    want = {a.strip().lower() for a in val.split(",") if a.strip()}
    if want - known:
        sys.exit(f"generate.py: FP8ATTN_ARCHS has unknown values {sorted(want - known)}; known: {sorted(known)}")
    return want & set(ARCHS[gpu])  # targets of the other platform are ignored


def platform_kernels(gpu):
    """Every kernel of the platform, unfiltered (what a full build has)."""
    assert not any(p.name[-1].isdigit() and p.rows != (0,) for p in PIPELINES), "rows variants append digits"
    for pipe in PIPELINES:
        if pipe.gpu != gpu:
            continue
        for d in pipe.head_dims:
            for kind in pipe.kinds:
                for mask in MASKS:
                    for kv, dims in pipe.kv_tiles.items():
                        if d in dims:
                            for rows in pipe.rows:
                                yield Kernel(pipe, d, kind, mask, kv, rows)


def kernels(gpu="cuda", sm90a=False):
    """The kernels of this build (the filters applied)."""
    archs = _archs(gpu)
    dims = _filter("FP8ATTN_HEAD_DIMS", HEAD_DIMS, int)
    kinds = _filter("FP8ATTN_FP8_KINDS", FP8_KINDS)
    return [k for k in platform_kernels(gpu) if archs & set(k.pipe.archs) and (sm90a or not k.pipe.sm90a)
            and k.d in dims and k.kind in kinds]


HEADER = "// Generated by csrc/kernels/generate.py -- do not edit.\n"


def file_of(k):
    """The instance file of a kernel: one per (pipeline, head dim, fp8 kind, mask, KV tile); rows variants share it."""
    return f"fwd_{k.pipe.name}_hd{k.d}_{k.kind}_{k.mask}_kv{k.kv}"


def _blocks_per_sm(k):
    return k.pipe.blocks_per_sm(k.d, k.rows) if k.pipe.blocks_per_sm else 0


def instance_file(ks):
    p = ks[0].pipe
    inc = "".join(f'#include "{h}"\n' for h in p.includes)
    def plan(i, k):  # the decode kernels' blocks per SM, as their split plan assumes
        return (f"static_assert(Policy{i}::kBlocksPerSm == {_blocks_per_sm(k)}, "
                f'"generate.py: the blocks per SM of {k.name}");\n') if p.blocks_per_sm else ""
    body = "".join(f"\nusing Policy{i} = {k.fill(p.policy)};\n"
                   f"static_assert(Policy{i}::kBlockM == {p.block_rows(k.d, k.kv, k.rows)}, "
                   f'"generate.py: the block rows of {k.name}");\n' + plan(i, k) +
                   f"void {k.name}(const FwdParams& p, cudaStream_t stream) {{\n"
                   f"  using Policy = Policy{i};\n  {k.fill(p.launch)}(p, stream);\n}}\n" for i, k in enumerate(ks))
    return (HEADER + '#include "kernels/fwd/launch.h"\n' + inc + "\nnamespace fp8attn {\n"
            f"using Problem = {ks[0].problem};\n" + body + "\n}  // namespace fp8attn\n")


def _ints(xs):
    return ", ".join(str(x) for x in xs)


def _c(b):
    return "true" if b else "false"


def _strs(xs):
    return ", ".join(f'"{x}"' for x in xs)


def _kv_tile_notes(gpu):
    """Per KV tile of the platform: which pipelines have it, at which head dims (for the errors)."""
    every = list(platform_kernels(gpu))
    notes = {}
    for t in sorted({k.kv for k in every}):
        dims = {}
        for k in every:
            if k.kv == t and k.d not in dims.setdefault(k.pipe.name, []):
                dims[k.pipe.name].append(k.d)
        notes[t] = "; ".join(f"{p} at head dims {_ints(ds)}" for p, ds in dims.items())
    return notes


def table_file(gpu, ks):
    pipes = [p.name for p in PIPELINES if p.gpu == gpu]
    targets = TARGETS[gpu]
    notes = _kv_tile_notes(gpu)
    tiles = list(notes)
    rule = f"kv_tile must be {' or '.join(', '.join(str(t) for t in [0] + tiles).rsplit(', ', 1))} on the GPU"
    rule += "".join(f" ({t}: {n})" for t, n in notes.items() if t != DEFAULT_KV_TILE)
    out = [HEADER, '#include "kernels/fwd/dispatch.h"\n\nnamespace fp8attn {\n\n',
           f'static_assert(kDefaultKvTile == {DEFAULT_KV_TILE}, "generate.py DEFAULT_KV_TILE");\n\nnamespace {{\n',
           f"const char* const kPipes[] = {{{_strs(pipes)}}};\n"]
    for i, t in enumerate(targets):
        order = _ints(pipes.index(p) for p in t.pipes)
        out.append(f"const int32_t kOrder{i}[] = {{{order}}};  // {', '.join(t.pipes)}\n")
    out.append("const FwdTarget kTargets[] = {\n")
    out += [f'    {{"{t.name}", {t.cc[0]}, {t.cc[1]}, kOrder{i}, {len(t.pipes)}}},\n' for i, t in enumerate(targets)]
    out.append(f"}};\nconst int32_t kKvTiles[] = {{{_ints(tiles)}}};\n")
    out.append(f"const char* const kKvTileNotes[] = {{{_strs(notes.values())}}};\n")
    out.append("const FwdKernel kKernels[] = {\n")
    for k in ks:
        default, rows = _c(k.pipe.default_tile(k.d, k.mask) == k.kv), k.pipe.block_rows(k.d, k.kv, k.rows)
        out.append(f'    {{"{k.name}", {pipes.index(k.pipe.name)}, {k.d}, {FP8_KINDS[k.kind]}, {MASKS[k.mask]}, '
                   f"{k.kv}, {default}, {k.rows}, {rows}, {_c(k.pipe.item_counter)}, {_c(k.pipe.page_boxes)}, "
                   f"{_blocks_per_sm(k)}}},\n")
    if not ks:
        out.append("    {nullptr, 0, 0, Fp8Kind::E4M3FN, MaskKind::kNone, 0, false, 0, 0, false, false, 0},"
                   "  // (none built)\n")
    out.append("};\n}  // namespace\n\nconst FwdTable& fwd_table() {\n"
               f"  static const FwdTable t{{kPipes, {len(pipes)}, kTargets, {len(targets)}, kKvTiles, kKvTileNotes,\n"
               f'                          {len(tiles)}, "{rule}",\n'
               f"                          kKernels, {len(ks)}}};\n  return t;\n}}\n\n}}  // namespace fp8attn\n")
    return "".join(out)


def launch_file(ks):
    decls = "".join(f"void {k.name}(const FwdParams&, cudaStream_t);\n" for k in ks)
    ptrs = ",\n".join(f"    &{k.name}" for k in ks) or "    nullptr"
    return (HEADER + '#include "kernels/fwd/api.h"\n\nnamespace fp8attn {\n\n' + decls + "\nnamespace {\n"
            "const FwdLaunchFn kLaunch[] = {  // in fwd_table()'s order\n" + ptrs + "};\n}  // namespace\n\n"
            "FwdLaunchFn fwd_launcher(const FwdKernel& k) { return kLaunch[&k - fwd_table().kernels]; }\n\n"
            "}  // namespace fp8attn\n")


def shapes_files():
    """The checked-in constants (path relative to the repository -> text)."""
    assert list(DEFAULT_P_SCALE) == list(FP8_KINDS)
    dims = _ints(HEAD_DIMS)
    tiles = sorted({k.kv for k in platform_kernels("cuda")} | {k.kv for k in platform_kernels("rocm")})
    p_scales = ", ".join(f"{x!r}f" for x in DEFAULT_P_SCALE.values())
    cpp = (HEADER.replace("do not edit.", "do not edit (generate.py --shapes).")
           + "// The shapes the kernels are built for and the defaults every implementation shares.\n"
           "#pragma once\n#include <cstdint>\n\nnamespace fp8attn {\n"
           "// The head dims every implementation supports (the GPU kernels are instantiated for each).\n"
           f"constexpr int32_t kHeadDims[] = {{{dims}}};\n"
           "// The KV tile of kv_tile = 0 on the CPU and on most GPU kernels (every GPU pipeline has it).\n"
           f"constexpr int32_t kDefaultKvTile = {DEFAULT_KV_TILE};\n"
           "// The widest KV tile of any implementation (the CPU takes any kv_tile up to it).\n"
           f"constexpr int32_t kMaxKvTile = {max(tiles)};\n"
           "// The P scale of a call without p_scale, per Fp8Kind (numeric/fp8_kind.h's order).\n"
           f"constexpr float kDefaultPScale[] = {{{p_scales}}};\n"
           "}  // namespace fp8attn\n")
    py = ('"""Generated by csrc/kernels/generate.py --shapes -- do not edit. The shapes the kernels are built for and\n'
          'the defaults every implementation shares (csrc/kernels/shapes.h holds the same)."""\n'
          "\n"
          f"HEAD_DIMS: tuple[int, ...] = ({dims})  # every implementation's\n"
          f"GPU_KV_TILES: tuple[int, ...] = ({_ints(tiles)})  # the GPU kernels' kv_tile values\n"
          f"DEFAULT_KV_TILE = {DEFAULT_KV_TILE}  # kv_tile 0 on the CPU and on most GPU kernels\n"
          f"MAX_KV_TILE = {max(tiles)}  # the widest tile of any implementation (the CPU takes any up to it)\n"
          "# per FP8 kind (torch.float8_<kind>): the P scale of a call without p_scale\n"
          f"DEFAULT_P_SCALE: dict[str, float] = {DEFAULT_P_SCALE!r}\n")
    return {"csrc/kernels/shapes.h": cpp, "fp8attn/shapes.py": py}


def write_if_changed(path, text):
    if os.path.exists(path) and open(path).read() == text:
        return
    with open(path, "w") as f:
        f.write(text)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out-dir")
    ap.add_argument("--gpu", choices=sorted(TARGETS), default="cuda")
    ap.add_argument("--sm90a", action="store_true", help="the build generates sm_90a code: emit the wgmma kernels")
    ap.add_argument("--shapes", action="store_true", help="rewrite csrc/kernels/shapes.h and fp8attn/shapes.py")
    args = ap.parse_args()
    if args.shapes:
        for rel, text in shapes_files().items():
            write_if_changed(os.path.join(ROOT, rel), text)
    if not args.out_dir:
        return
    os.makedirs(args.out_dir, exist_ok=True)
    ks = kernels(args.gpu, args.sm90a)
    by_file = {}
    for k in ks:
        by_file.setdefault(file_of(k), []).append(k)
    files = []
    for name, group in by_file.items():
        files.append(os.path.join(args.out_dir, name + ".cu"))
        write_if_changed(files[-1], instance_file(group))
    for name, text in (("fwd_table.cpp", table_file(args.gpu, ks)), ("fwd_launch.cu", launch_file(ks))):
        files.append(os.path.join(args.out_dir, name))
        write_if_changed(files[-1], text)
    write_if_changed(os.path.join(args.out_dir, "sources.txt"), ";".join(files) + "\n")
    print(f"generate.py: {len(ks)} kernels -> {args.out_dir}")


if __name__ == "__main__":
    main()
