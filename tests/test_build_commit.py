"""fp8attn.build_commit(): the commit of the source tree's own git repository, compiled in by setup.py, or
"unknown"."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
from pathlib import Path

import pytest

import fp8attn

ROOT = Path(__file__).resolve().parents[1]


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=cwd, check=True,
                          capture_output=True, text=True).stdout.strip()


def git_commit_of(tree: Path) -> str:
    """What setup.py compiles in when it builds ``tree`` (a copy of setup.py there, its ``_git_commit``)."""
    shutil.copy(ROOT / "setup.py", tree / "setup.py")
    spec = importlib.util.spec_from_file_location("fp8attn_setup", tree / "setup.py")
    setup = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(setup)  # not as __main__: setup() is not called
    return setup._git_commit()


def new_repo(path: Path) -> Path:
    path.mkdir(parents=True)
    git(path, "init", "-q")
    (path / "README.md").write_text("a repository\n")
    git(path, "add", "README.md")
    git(path, "commit", "-q", "-m", "first")
    return path


def test_build_commit_names_this_checkout(monkeypatch):
    """The extension carries the commit it was built from (benchmarks and the main job record it)."""
    monkeypatch.delenv("FP8ATTN_COMMIT", raising=False)
    built = fp8attn.build_commit()
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                          cwd=ROOT).stdout.strip()
    if head:  # a build from this checkout (CI's wheel is): its commit, or an ancestor's while editing
        assert built != "unknown", "setup.py recorded no commit in a git checkout"
        assert subprocess.run(["git", "merge-base", "--is-ancestor", built.removesuffix("-dirty"), "HEAD"],
                              cwd=ROOT).returncode == 0, built
    monkeypatch.setenv("FP8ATTN_COMMIT", "abc1234")
    assert fp8attn.build_commit() == "abc1234"


@pytest.mark.skipif(shutil.which("git") is None, reason="no git")
def test_commit_is_the_trees_own_repository(tmp_path):
    own = new_repo(tmp_path / "own")
    assert git_commit_of(own) == git(own, "rev-parse", "--short", "HEAD")  # setup.py is untracked: not dirty
    (own / "README.md").write_text("changed\n")
    assert git_commit_of(own) == git(own, "rev-parse", "--short", "HEAD") + "-dirty"

    outer = new_repo(tmp_path / "outer")  # the tree copied into another repository's folder
    (outer / "vendor" / "fp8attn").mkdir(parents=True)
    assert git_commit_of(outer / "vendor" / "fp8attn") == "unknown"

    plain = tmp_path / "plain"  # no repository of its own
    plain.mkdir()
    assert git_commit_of(plain) == "unknown"

    empty = tmp_path / "empty"  # a repository without commits
    empty.mkdir()
    git(empty, "init", "-q")
    assert git_commit_of(empty) == "unknown"
