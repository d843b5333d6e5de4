"""FastDiv (csrc/kernels/fast_div.h), the GPU kernels' division by launch-constant divisors (GQA group, kv heads,
item counts): exact against integer division, through the header's host path (the device path differs only in
computing the same high word with __umulhi). Every divisor up to 4096, the powers of two and their neighbours,
and random divisors up to 2^31, each with edge and random dividends in [0, 2^31)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

PROGRAM = r"""
#include <cstdint>
#include <cstdio>
#include <random>
#include <vector>

#include "kernels/fast_div.h"

int main() {
  std::mt19937 rng(7);
  std::uniform_int_distribution<uint32_t> any(0, 0x7fffffffu), divisor(1, 0x80000000u);
  std::vector<uint32_t> ds;
  for (uint32_t d = 1; d <= 4096; ++d) ds.push_back(d);
  for (int k = 1; k <= 31; ++k)
    for (int64_t d : {(int64_t{1} << k) - 1, int64_t{1} << k, (int64_t{1} << k) + 1})
      if (d >= 1 && d <= 0x80000000ll) ds.push_back(static_cast<uint32_t>(d));
  for (int i = 0; i < 4000; ++i) ds.push_back(divisor(rng));
  long checked = 0, wrong = 0;
  for (uint32_t d : ds) {
    const fp8attn::FastDiv f = fp8attn::FastDiv::of(d);
    if (f.d != d) ++wrong;  // the kernels read the grid's sizes back from it
    std::vector<uint32_t> ns = {0u, 1u, d - 1, d, d + 1, 0x7fffffffu, 0x7ffffffeu, 0x7fffffffu / d * d,
                                0x7fffffffu / d * d - 1};
    for (int i = 0; i < 300; ++i) ns.push_back(any(rng));
    for (uint32_t n : ns) {
      if (n > 0x7fffffffu) continue;
      ++checked;
      if (static_cast<uint32_t>(f.div(static_cast<int32_t>(n))) != n / d) {
        if (++wrong <= 5) std::printf("wrong: %u / %u = %d\n", n, d, f.div(static_cast<int32_t>(n)));
      }
    }
  }
  std::printf("checked %ld, wrong %ld\n", checked, wrong);
  return wrong != 0;
}
"""


def test_fast_div_is_exact(tmp_path: Path) -> None:
    cxx = shutil.which("c++") or shutil.which("g++")
    if cxx is None:
        pytest.skip("no C++ compiler")
    src, exe = tmp_path / "fast_div.cpp", tmp_path / "fast_div"
    src.write_text(PROGRAM)
    subprocess.run([cxx, "-std=c++17", "-O2", f"-I{ROOT / 'csrc'}", str(src), "-o", str(exe)], check=True)
    run = subprocess.run([str(exe)], capture_output=True, text=True)
    assert run.returncode == 0, run.stdout
    assert "wrong 0" in run.stdout
