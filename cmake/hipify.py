#!/usr/bin/env python3
"""Hipify a staging tree in place with PyTorch's hipify (torch.utils.hipify), as the ROCm build
and scripts/ci_rocm_check.sh do. The tree holds csrc/ (a copy of the sources) and gen/ (the
generated instances, which include "kernels/..." from csrc/). Every .cu becomes a .hip beside it;
headers that need changes get a *_hip.h twin and the includes are rewritten to them.

Usage: hipify.py STAGE_DIR   (prints the hipified paths of the .cu files, ';'-separated)
"""
import os
import sys

from torch.utils.hipify import hipify_python


def main():
    stage = os.path.abspath(sys.argv[1])
    res = hipify_python.hipify(project_directory=stage, output_directory=stage, includes=[os.path.join(stage, "*")],
                               header_include_dirs=["csrc"], is_pytorch_extension=True, show_detailed=False,
                               show_progress=False)
    outs = sorted(r.hipified_path for f, r in res.items()
                  if f.endswith(".cu") and r.hipified_path and r.hipified_path.endswith(".hip"))
    print(";".join(outs))


if __name__ == "__main__":
    main()
