"""Build fp8attn: setup.py drives the one CMake description (CMakeLists.txt), as vLLM does.

Environment:
  FP8ATTN_GPU          cpu | cuda | rocm (default: what the installed torch was built for)
  FP8ATTN_HEAD_DIMS    comma list limiting the GPU head-dim instantiations (development builds)
  FP8ATTN_ARCHS        comma list limiting the GPU architectures (e.g. sm90a, gfx942)
  MAX_JOBS             parallel compile jobs
"""

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).resolve().parent


class CMakeExtension(Extension):
    def __init__(self, name: str) -> None:
        super().__init__(name, sources=[])


class CMakeBuild(build_ext):
    def build_extension(self, ext: Extension) -> None:
        out_dir = Path(self.get_ext_fullpath(ext.name)).resolve().parent
        build_dir = Path(self.build_temp).resolve() / ext.name
        build_dir.mkdir(parents=True, exist_ok=True)
        cfg = ["-DCMAKE_BUILD_TYPE=Release", f"-DPython_EXECUTABLE={sys.executable}",
               f"-DCMAKE_LIBRARY_OUTPUT_DIRECTORY={out_dir}",
               # compiled in (fp8attn.build_commit): a wheel installed elsewhere cannot ask git
               f"-DFP8ATTN_COMMIT={_git_commit()}"]
        # The compiler named every time (CXX, else CMake's default c++); a reused build directory
        # configured with another one starts afresh (so the libstdc++ link checks of CMakeLists.txt
        # judge the compiler in use).
        cxx = shutil.which(os.environ.get("CXX") or "c++")
        if cxx:
            cache = build_dir / "CMakeCache.txt"
            old = re.search(r"^CMAKE_CXX_COMPILER:\w+=(.*)$", cache.read_text(), re.M) if cache.is_file() else None
            if old and old.group(1) != cxx:
                shutil.rmtree(build_dir)
                build_dir.mkdir(parents=True)
            cfg.append(f"-DCMAKE_CXX_COMPILER={cxx}")
        if "FP8ATTN_GPU" in os.environ:
            cfg.append(f"-DFP8ATTN_GPU={os.environ['FP8ATTN_GPU']}")
        if _has_ninja():
            cfg += ["-G", "Ninja"]
        subprocess.check_call(["cmake", str(ROOT), *cfg], cwd=build_dir)
        jobs = os.environ.get("MAX_JOBS", str(os.cpu_count() or 1))
        subprocess.check_call(["cmake", "--build", ".", "-j", jobs], cwd=build_dir)


def _git_commit(root: Path = ROOT) -> str:
    """HEAD's short hash of the git repository whose top level is ``root``, "-dirty" when tracked files differ
    from it; "unknown" when ``root`` is no repository's top level (a copy of the tree inside another
    repository must not report that repository's commit) or git is missing."""
    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, timeout=30).stdout.strip()

    try:
        top = git("rev-parse", "--show-toplevel")
        if not top or Path(top).resolve() != root.resolve():
            return "unknown"
        head = git("rev-parse", "--short", "HEAD")
        if not head:  # a repository without commits
            return "unknown"
        return head + ("-dirty" if git("status", "--porcelain", "--untracked-files=no") else "")
    except OSError:
        return "unknown"


def _has_ninja() -> bool:
    try:
        subprocess.check_call(["ninja", "--version"], stdout=subprocess.DEVNULL)
        return True
    except (OSError, subprocess.CalledProcessError):
        return False


if __name__ == "__main__":  # as pip's build backend and `python setup.py` run it; tests import _git_commit
    setup(ext_modules=[CMakeExtension("fp8attn._C")], cmdclass={"build_ext": CMakeBuild})
