"""The GPU kernel table and its selection (csrc/kernels/generate.py, csrc/kernels/fwd/dispatch.cpp) on the host:
the generated table for CUDA and for ROCm compiled with the real choose_fwd_kernel / choose_num_splits into a
small program that answers calls read from stdin, so which kernel a call gets on which device (and what
fp8attn.kernel_name reports there) is tested without a GPU. Also: the checked-in shape lists are current."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
from functools import cache
from pathlib import Path

import pytest

from fp8attn.shapes import DEFAULT_KV_TILE, GPU_KV_TILES, HEAD_DIMS

ROOT = Path(__file__).resolve().parents[1]
GENERATOR = ROOT / "csrc" / "kernels" / "generate.py"

# Each stdin line: cc_major cc_minor pipeline(- for none) head_dim fnuz causal window_left window_right kv_tile
# seqlen_q seqlen_k heads heads_k batch num_sm page (0: not paged, else the cache's block size). Each answer:
# kernel pipeline block_rows splits, or "none".
# "table" prints the table instead: targets (name cc pipelines), kernels, KV tiles; "pipe NAME" a pipeline's index.
DRIVER = r"""
#include <cstdio>
#include <iostream>
#include <sstream>
#include <string>

#include "kernels/fwd/dispatch.h"

using namespace fp8attn;

int main() {
  const FwdTable& t = fwd_table();
  std::string line;
  while (std::getline(std::cin, line)) {
    if (line == "table") {
      for (int i = 0; i < t.num_targets; ++i) {
        std::printf("target %s %d %d", t.targets[i].name, t.targets[i].cc_major, t.targets[i].cc_minor);
        for (int j = 0; j < t.targets[i].num_pipes; ++j) std::printf(" %s", t.pipes[t.targets[i].pipes[j]]);
        std::printf("\n");
      }
      for (int i = 0; i < t.num_kernels; ++i) {
        const FwdKernel& k = t.kernels[i];
        std::printf("kernel %s %s %d %d %d %d %d %d %d %d\n", k.name, t.pipes[k.pipe], k.head_dim,
                    static_cast<int>(k.fp8_kind), static_cast<int>(k.mask), k.kv_tile, k.default_tile, k.max_rows,
                    k.block_rows, k.item_counter);
      }
      std::printf("kv_tiles");
      for (int i = 0; i < t.num_kv_tiles; ++i) std::printf(" %d", t.kv_tiles[i]);
      std::printf("\n");
      continue;
    }
    if (line.rfind("pipe ", 0) == 0) {
      std::printf("%d\n", fwd_pipe_index(t, line.c_str() + 5));
      continue;
    }
    std::istringstream in(line);
    int major, minor, fnuz, causal, num_sm;
    std::string pipe;
    FwdParams p;
    in >> major >> minor >> pipe >> p.head_dim >> fnuz >> causal >> p.window_left >> p.window_right >> p.kv_tile >>
        p.seqlen_q >> p.seqlen_k >> p.num_heads >> p.num_heads_k >> p.batch >> num_sm >> p.page_block_size;
    static const int32_t table_entry = 0;  // (dispatch reads only whether a call is paged)
    if (p.page_block_size > 0) p.block_table = &table_entry;
    p.fp8_kind = fnuz ? Fp8Kind::E4M3FNUZ : Fp8Kind::E4M3FN;
    p.is_causal = causal != 0;
    const int32_t pref = fwd_pipe_index(t, pipe == "-" ? nullptr : pipe.c_str());
    const FwdTarget& target = fwd_target(t, major, minor);
    const FwdKernel* k = choose_fwd_kernel(t, p, target, pref);
    const char* why = fwd_unsupported_reason(t, p, k);
    if (k == nullptr || why != nullptr)
      std::printf("none %s %d %s\n", target.name, pref, why ? why : "-");
    else
      std::printf("%s %s %d %d\n", k->name, t.pipes[k->pipe], k->block_rows, choose_num_splits(p, *k, num_sm));
  }
  return 0;
}
"""


def _generator():
    spec = importlib.util.spec_from_file_location("fp8attn_generate", GENERATOR)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@cache
def _program(gpu: str, tmp: str) -> Path:
    cxx = shutil.which("c++") or shutil.which("g++")
    if cxx is None:
        pytest.skip("no C++ compiler")
    out = Path(tmp) / gpu
    env = {k: v for k, v in os.environ.items() if k not in ("FP8ATTN_HEAD_DIMS", "FP8ATTN_FP8_KINDS", "FP8ATTN_ARCHS")}
    subprocess.run(["python3", str(GENERATOR), "--out-dir", str(out / "gen"), "--gpu", gpu, "--sm90a"], check=True,
                   env=env, capture_output=True)
    (out / "driver.cpp").write_text(DRIVER)
    exe = out / "driver"
    subprocess.run([cxx, "-std=c++17", "-O1", "-Wall", "-Werror", f"-I{ROOT / 'csrc'}", str(out / "driver.cpp"),
                    str(ROOT / "csrc" / "kernels" / "fwd" / "dispatch.cpp"), str(out / "gen" / "fwd_table.cpp"), "-o",
                    str(exe)], check=True)
    return exe


@pytest.fixture(scope="module")
def progs(tmp_path_factory):
    tmp = str(tmp_path_factory.mktemp("dispatch"))
    return {gpu: _program(gpu, tmp) for gpu in ("cuda", "rocm")}


def _ask(exe: Path, lines: list[str]) -> list[str]:
    run = subprocess.run([str(exe)], input="\n".join(lines) + "\n", capture_output=True, text=True, check=True)
    return run.stdout.splitlines()


H200 = (9, 0, 132)  # compute capability, multiprocessors
L40S = (8, 9, 142)
A100 = (8, 0, 108)
MI300 = (9, 4, 304)  # (what HIP reports for gfx942; a ROCm build's table has one target for any device)


def call(dev=H200, pipe="-", D=128, fnuz=False, causal=False, window=(-1, -1), kv_tile=0, sq=1, sk=4096, H=32,
         Hkv=8, B=1, page=0) -> str:
    major, minor, sms = dev
    return (f"{major} {minor} {pipe} {D} {int(fnuz)} {int(causal)} {window[0]} {window[1]} {kv_tile} {sq} {sk} {H} "
            f"{Hkv} {B} {sms} {page}")


def choose(prog: Path, **kw) -> tuple[str, ...]:
    return tuple(_ask(prog, [call(**kw)])[0].split(" "))


def table(prog: Path):
    rows = _ask(prog, ["table"])
    targets = {r.split()[1]: r.split()[4:] for r in rows if r.startswith("target ")}
    kernels = [r.split()[1:] for r in rows if r.startswith("kernel ")]
    tiles = [int(x) for x in rows[-1].split()[1:]]
    return targets, kernels, tiles


def test_checked_in_shapes_are_current() -> None:
    """csrc/kernels/shapes.h and fp8attn/shapes.py are what generate.py --shapes writes."""
    for rel, text in _generator().shapes_files().items():
        assert (ROOT / rel).read_text() == text, f"{rel} is stale: run python3 csrc/kernels/generate.py --shapes"
    assert DEFAULT_KV_TILE == 64 and GPU_KV_TILES == (64, 128) and 112 in HEAD_DIMS


@pytest.mark.parametrize("gpu", ["cuda", "rocm"])
def test_table_names_describe_their_kernels(progs, gpu) -> None:
    """Every kernel's name spells its pipeline, rows variant, head dim, FP8 kind, mask and KV tile; names are unique;
    for each (pipeline, head dim, kind, mask) exactly one KV tile is the kv_tile=0 default."""
    _, kernels, tiles = table(progs[gpu])
    assert kernels and len({k[0] for k in kernels}) == len(kernels)
    defaults = {}
    for name, pipe, d, kind, mask, kv, default, max_rows, block_rows, _ in kernels:
        spelled = (f"fwd_{pipe}{'' if max_rows == '0' else max_rows}_hd{d}_{'e4m3fnuz' if kind == '1' else 'e4m3fn'}_"
                   f"{'band' if mask == '1' else 'nomask'}_kv{kv}")
        assert name == spelled and int(kv) in tiles
        assert int(max_rows) == 0 or int(block_rows) == int(max_rows)  # a decode block holds all its rows
        if default == "1":
            key = (pipe, d, kind, mask, max_rows)
            assert key not in defaults, f"two defaults: {defaults.get(key)} and {name}"
            defaults[key] = name
    assert {int(k[2]) for k in kernels} == set(HEAD_DIMS)
    assert len(defaults) == len({(k[1], k[2], k[3], k[4], k[7]) for k in kernels})


def test_h200_kernels(progs) -> None:
    """Compute capability 9.0: decode kernels for <= 16 packed rows (the 8-row one up to 8), then the wgmma
    kernels where they exist (D 64 / 128 / 256, e4m3fn), then the f16 pipeline."""
    c = progs["cuda"]
    assert choose(c, sq=1)[0] == "fwd_decode8_hd128_e4m3fn_nomask_kv64"       # GQA 4: 4 rows
    assert choose(c, sq=2, causal=True)[0] == "fwd_decode8_hd128_e4m3fn_band_kv64"  # 8 rows
    assert choose(c, sq=3, causal=True)[0] == "fwd_decode16_hd128_e4m3fn_band_kv64"  # 12 rows
    assert choose(c, sq=4, causal=True)[0] == "fwd_decode16_hd128_e4m3fn_band_kv64"  # 16 rows (the bench's q_len 4)
    assert choose(c, sq=5, causal=True)[0] == "fwd_wgmma_hd128_e4m3fn_band_kv128"  # 20 rows: prefill
    assert choose(c, sq=1, H=32, Hkv=1)[0] == "fwd_wgmma_hd128_e4m3fn_nomask_kv64"  # MQA: 32 rows
    # kv_tile 0: the wgmma pipeline's 128-key tile, but for unmasked D 128 and for D 256
    assert choose(c, sq=2048, H=32, Hkv=32)[0] == "fwd_wgmma_hd128_e4m3fn_nomask_kv64"
    assert choose(c, sq=2048, D=64)[0] == "fwd_wgmma_hd64_e4m3fn_nomask_kv128"
    assert choose(c, sq=2048, D=256, causal=True)[0] == "fwd_wgmma_hd256_e4m3fn_band_kv64"
    assert choose(c, sq=2048, window=(100, 0))[0] == "fwd_wgmma_hd128_e4m3fn_band_kv128"
    assert choose(c, sq=2048, kv_tile=64, causal=True)[0] == "fwd_wgmma_hd128_e4m3fn_band_kv64"
    # kv_tile 128 takes the wgmma kernels for decode shapes too; none off their head dims / kind
    assert choose(c, sq=1, kv_tile=128)[0] == "fwd_wgmma_hd128_e4m3fn_nomask_kv128"
    assert choose(c, sq=2048, D=256, kv_tile=128, causal=True)[0] == "fwd_wgmma_hd256_e4m3fn_band_kv128"
    for kw in (dict(D=80), dict(fnuz=True)):
        assert choose(c, sq=100, kv_tile=128, **kw)[0] == "none"
    # the portable pipelines where wgmma has no kernel
    assert choose(c, sq=100, D=80)[0] == "fwd_f16_hd80_e4m3fn_nomask_kv64"
    assert choose(c, sq=100, fnuz=True, causal=True)[0] == "fwd_f16_hd128_e4m3fnuz_band_kv64"
    assert choose(c, sq=1, D=80, fnuz=True)[0] == "fwd_decode8_hd80_e4m3fnuz_nomask_kv64"
    # block rows: f16 128 up to D 128, 64 above; wgmma 64 per consumer warpgroup
    assert choose(c, sq=100, D=192)[2] == "64" and choose(c, sq=100, D=112)[2] == "128"
    assert choose(c, sq=100, D=64)[2] == "192" and choose(c, sq=100, D=128, causal=True)[2] == "128"


def test_h200_decode_over_page_boxes(progs) -> None:
    """Compute capability 9.0, a paged cache of 16-key-multiple blocks: the wgmma decode kernels (D 64 / 128 / 256,
    e4m3fn),
    with their own split plan; other pages, head dims, kinds and the dense layout keep the decode pipeline,
    and FP8ATTN_PIPELINE=decode selects it (the A/B of the two)."""
    c = progs["cuda"]
    for page in (16, 32, 256):
        assert choose(c, sq=1, page=page)[0] == "fwd_decodewg8_hd128_e4m3fn_nomask_kv64"
        assert choose(c, sq=4, causal=True, page=page)[0] == "fwd_decodewg16_hd128_e4m3fn_band_kv64"
    for D in (64, 256):
        assert choose(c, sq=1, D=D, page=16)[0] == f"fwd_decodewg8_hd{D}_e4m3fn_nomask_kv64"
    for kw in (dict(page=8), dict(page=24), dict(page=0), dict(page=16, D=80), dict(page=16, fnuz=True),
               dict(page=16, pipe="decode")):
        assert choose(c, sq=1, **kw)[1] == "decode"
    assert choose(c, sq=5, page=16)[1] == "wgmma"  # 20 rows: prefill
    assert choose(c, dev=A100, sq=1, page=16)[1] == "decode"
    # their split plan fills 4 blocks per SM at 8 and 16 rows (decode_wg_blocks_per_sm; the 16-row mma.sync kernel: 3)
    assert choose(c, sq=1, sk=8192, B=8, causal=True, page=16)[1:] == ("decodewg", "8", "8")
    assert choose(c, sq=4, sk=8192, B=8, causal=True, page=16)[1:] == ("decodewg", "16", "8")
    assert choose(c, sq=1, sk=8192, B=8, causal=True, page=16, D=256)[1:] == ("decodewg", "8", "4")  # 2 per SM


def test_other_cuda_devices(progs) -> None:
    """8.9: the e4m3 mma.sync pipeline for every call (native there); other devices: decode, then f16."""
    c = progs["cuda"]
    for sq in (1, 4, 100):
        assert choose(c, dev=L40S, sq=sq, causal=True)[0] == "fwd_fp8mma_hd128_e4m3fn_band_kv64"
    assert choose(c, dev=A100, sq=1)[0] == "fwd_decode8_hd128_e4m3fn_nomask_kv64"
    assert choose(c, dev=A100, sq=100)[0] == "fwd_f16_hd128_e4m3fn_nomask_kv64"
    for dev in (L40S, A100):  # wgmma is Hopper's only
        assert choose(c, dev=dev, sq=100, kv_tile=128)[0] == "none"
        assert choose(c, dev=dev, sq=100, pipe="wgmma")[1] != "wgmma"


def test_rocm_table(progs) -> None:
    """A ROCm build runs the MFMA pipeline on any of its devices (no CUDA compute-capability routing), 64-key
    tiles only; its block rows follow gfx9's 64 KiB LDS."""
    r = progs["rocm"]
    targets, kernels, tiles = table(r)
    assert list(targets) == ["gfx9"] and targets["gfx9"] == ["mfma"] and tiles == [64]
    assert {k[1] for k in kernels} == {"mfma"}
    for dev in (MI300, H200, (0, 0, 80)):
        assert choose(r, dev=dev, sq=1)[0] == "fwd_mfma_hd128_e4m3fn_nomask_kv64"
    assert choose(r, dev=MI300, sq=100, fnuz=True, causal=True)[0] == "fwd_mfma_hd128_e4m3fnuz_band_kv64"
    assert [choose(r, dev=MI300, sq=100, D=d)[2] for d in (128, 192, 256)] == ["128", "64", "32"]
    assert choose(r, dev=MI300, kv_tile=128)[0] == "none"
    assert "kv_tile must be 0 or 64" in " ".join(choose(r, dev=MI300, kv_tile=128))


def test_preference(progs) -> None:
    """FP8ATTN_PIPELINE prefers a pipeline where the device runs it and it has a kernel for the call."""
    c = progs["cuda"]
    assert choose(c, pipe="f16", sq=1)[0] == "fwd_f16_hd128_e4m3fn_nomask_kv64"
    assert choose(c, pipe="f16", sq=2048, causal=True)[0] == "fwd_f16_hd128_e4m3fn_band_kv64"
    assert choose(c, pipe="fp8mma", sq=2048)[0] == "fwd_fp8mma_hd128_e4m3fn_nomask_kv64"
    assert choose(c, pipe="decode", sq=100)[0] == "fwd_wgmma_hd128_e4m3fn_nomask_kv64"  # decode does not serve it
    assert choose(c, pipe="wgmma", sq=1, D=80)[0] == "fwd_decode8_hd80_e4m3fn_nomask_kv64"
    assert choose(c, pipe="wgmma", sq=1)[0] == "fwd_wgmma_hd128_e4m3fn_nomask_kv64"
    assert _ask(c, ["pipe nonesuch", "pipe ", "pipe f16"]) == ["-2", "-1", "1"]  # (the entry point raises for -2)


def test_splits_read_the_kernels_block_rows(progs) -> None:
    """Prefill-sized calls split only when their blocks do not fill the multiprocessors, counted in the chosen
    kernel's block rows (192 / 128 on the wgmma pipeline, not 64); decode kernels fill their waves."""
    c = progs["cuda"]
    # 4 x 8 kv heads x 512 rows: 256 blocks of 64 rows would fill 132 SMs; 96 blocks of 192 rows do not
    name, _, rows, splits = choose(c, sq=512, H=8, Hkv=8, B=4, sk=8192)
    assert name == "fwd_wgmma_hd128_e4m3fn_nomask_kv64" and rows == "192" and int(splits) > 1
    assert choose(c, sq=512, H=8, Hkv=8, B=4, sk=8192, pipe="f16")[3] != "1"  # 128 blocks of 128 rows
    assert choose(c, sq=512, H=8, Hkv=8, B=4, sk=8192, pipe="fp8mma")[3] == "1"  # 256 blocks of 64 rows
    # the bench's rows: prefill unsplit, decode split to fill 4 blocks per SM
    assert choose(c, sq=8192, H=32, Hkv=32, sk=8192)[3] == "1"
    assert choose(c, sq=512, H=32, Hkv=32, B=16, sk=512, causal=True)[3] == "1"
    assert int(choose(c, sq=1, sk=32768, causal=True)[3]) > 8
    assert choose(c, sq=1, sk=128, causal=True)[3] == "1"
    for B, sk in ((8, 8192), (32, 8192), (128, 2048)):
        assert 1 <= int(choose(c, sq=1, sk=sk, B=B, causal=True)[3]) <= 128
    # ... in waves of the blocks their registers allow (decode_blocks_per_sm): 8 x 8k, 64 (batch, kv head)
    # blocks: 8 splits (512 of 4 x 132 slots) at 8 rows, D 128; 6 (384 of 3 x 132) at 16 rows (q_len 4)
    assert choose(c, sq=1, sk=8192, B=8, causal=True)[1:] == ("decode", "8", "8")
    assert choose(c, sq=4, sk=8192, B=8, causal=True)[1:] == ("decode", "16", "6")


def test_unsupported(progs) -> None:
    c = progs["cuda"]
    assert "kv_tile must be 0, 64 or 128" in " ".join(choose(c, kv_tile=32))
    assert "multiple of 16" in " ".join(choose(c, D=72))
