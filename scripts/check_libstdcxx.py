"""Refuse an fp8attn extension that does not link the shared libstdc++ (run by CMakeLists.txt).

A module that carries its own static copy of libstdc++ beside torch's shared one has two C++ runtimes:
exceptions thrown across them and the stream state used to format error messages go wrong (the
integers of a TORCH_CHECK message vanish; a C++-raised error of a CUDA call ended the process with
SIGSEGV). Such a link comes from a compiler or wrapper that passes -static-libstdc++.

    python scripts/check_libstdcxx.py READELF_OR_OBJDUMP MODULE
exits 1, naming the module and the fix, and deletes MODULE (so that no later step can install it), when
MODULE's dynamic section has no NEEDED libstdc++.so.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys


def needed(tool: str, module: str) -> list[str]:
    """The NEEDED entries of MODULE's dynamic section, by readelf -d or objdump -p."""
    flag = "-p" if os.path.basename(tool).endswith("objdump") else "-d"
    out = subprocess.run([tool, flag, module], capture_output=True, text=True, check=True).stdout
    if flag == "-p":
        return re.findall(r"^\s*NEEDED\s+(\S+)", out, re.M)
    return re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", out)


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    tool, module = argv[1], argv[2]
    libs = needed(tool, module)
    if any(lib.startswith("libstdc++.so") for lib in libs):
        return 0
    print(f"fp8attn: {module} does not link the shared libstdc++ (NEEDED: {', '.join(libs) or 'none'}).\n"
          "  The C++ compiler or a wrapper around it links libstdc++ statically (-static-libstdc++): the module\n"
          "  would hold a second C++ runtime beside torch's, which breaks exceptions and error messages.\n"
          "  Build with a compiler that links the shared libstdc++ (e.g. CXX=g++), in a clean build directory.",
          file=sys.stderr)
    os.remove(module)
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
