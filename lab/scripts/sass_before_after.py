#!/usr/bin/env python3
"""Registers, spills and main-loop opcode mix of two trees' NVIDIA instances, side by side.

The check of a refactor whose instance names changed (2615613's fwd_sm89 / fwd_sm90 / fwd_sm90a
became fwd_fp8mma / fwd_f16 + fwd_decode / fwd_wgmma): kernels are matched by (head dim, fp8 kind,
mask, KV tile, arch, role), measured and compared by scripts/ci_nvcc_sass.py's own rules.

  sass_before_after.py compile TREE OBJ_DIR   # generate + nvcc every instance of TREE (FP8ATTN_HEAD_DIMS
                                              # etc. filter), the flags of scripts/ci_nvcc_check.sh
  sass_before_after.py compare OLD_OBJ NEW_OBJ [JSON]   # needs CUOBJDUMP (cuobjdump + nvdisasm on PATH)

A KEEP=DIR run of the new tree's scripts/ci_nvcc_check.sh leaves an OBJ_DIR as well.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))
import ci_nvcc_sass  # noqa: E402

NAME = re.compile(r"fwd_(?:(sm89|sm90a|sm90)|(fp8mma|f16|decode|wgmma))"
                  r"_hd(\d+)_(e4m3fnuz|e4m3fn)_(band|nomask)(?:_kv(\d+))?$")


def compile_tree(tree: Path, out: Path) -> None:
    gen = out / "gen"
    subprocess.run([sys.executable, str(tree / "csrc/kernels/generate.py"), "--out-dir", str(gen), "--sm90a"],
                   check=True, capture_output=True)
    flags = ["-std=c++17", "-O3", "-I", str(tree / "csrc"), "-Xptxas", "-v"]
    for a in os.environ.get("NVCC_CHECK_ARCHS", "90a 89").split():
        flags += [f"-gencode=arch=compute_{a},code=sm_{a}"]
    srcs = [p for p in sorted(gen.glob("fwd_*.cu")) if NAME.match(p.stem)]

    def one(src: Path) -> str:
        r = subprocess.run(["nvcc", *flags, "-c", str(src), "-o", str(out / f"{src.stem}.o")],
                           capture_output=True, text=True)
        (out / f"{src.stem}.log").write_text(r.stdout + r.stderr)
        return f"{'ok' if r.returncode == 0 else 'FAILED'}: {src.stem}"

    with ThreadPoolExecutor(int(os.environ.get("JOBS", "2"))) as ex:
        for line in ex.map(one, srcs):
            print(line, flush=True)


def normalized(data: dict) -> dict:
    """{instance/arch/role: row} -> {hd D kind mask kvN/arch/role: row}; old sm90 instances held f16 and decode."""
    out = {}
    for key, row in data.items():
        inst, arch, role = key.split("/")
        m = NAME.match(inst)
        if not m:
            continue
        _old, _new, hd, kind, mask, kv = m.groups()
        fam = {"sm89": "fp8mma", "sm90": "f16", "sm90a": "wgmma"}.get(_old, _new)
        if fam == "decode":
            fam = "f16"  # the decode kernels lived in the old sm90 instance beside f16's
        if role == "combine":
            role = f"combine({fam})"
        out[f"hd{hd} {kind} {mask} kv{kv or 64} {fam}/{arch}/{role}"] = row
    return out


def main(argv: list[str]) -> int:
    if len(argv) >= 4 and argv[1] == "compile":
        Path(argv[3]).mkdir(parents=True, exist_ok=True)
        compile_tree(Path(argv[2]).resolve(), Path(argv[3]).resolve())
        return 0
    if len(argv) in (4, 5) and argv[1] == "compare":
        cuobjdump = os.environ.get("CUOBJDUMP", "cuobjdump")
        old, new = (normalized(ci_nvcc_sass.measure(d, cuobjdump)) for d in argv[2:4])
        # the old build's filter (FP8ATTN_HEAD_DIMS) bounds the comparison; the new decode instance carries a
        # combine kernel like f16's: compare one of them
        dims = {k.split()[0] for k in old}
        new = {k: v for k, v in new.items() if k.split()[0] in dims and (k in old or "combine" not in k)}
        fails, rows = ci_nvcc_sass.compare(old, new)
        print("\n".join(rows))
        print("\n".join(fails) if fails else "no differences beyond the check's tolerance")
        if len(argv) == 5:
            Path(argv[4]).write_text(json.dumps({"old": old, "new": new, "fails": fails}, indent=0, sort_keys=True))
        return 0
    sys.exit(__doc__)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
