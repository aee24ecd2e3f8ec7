"""Stamps the source revision into built wheels (``exporter/data/REVISION``).

Everything else about the package is in pyproject.toml. The revision is
``$CONTENTION_REVISION`` when set (a build from a tree without ``.git``, e.g. the
Dockerfile's ``--build-arg REVISION``), else the git checkout's ``HEAD`` (with
``-modified`` for a tree that differs from it), else nothing is stamped and the
exporter reports ``unknown`` (exporter/revision.py reads it).
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent


def source_revision() -> str:
    rev = os.environ.get("CONTENTION_REVISION", "").strip()
    if rev or not (HERE / ".git").exists():
        return rev

    def git(*args: str) -> str:
        try:
            proc = subprocess.run(
                ["git", "-C", str(HERE), *args], capture_output=True, text=True, timeout=30
            )
        except (OSError, subprocess.SubprocessError):
            return ""
        return proc.stdout.strip() if proc.returncode == 0 else ""

    head = git("rev-parse", "--verify", "HEAD")
    if head and git("status", "--porcelain", "--untracked-files=no"):
        head += "-modified"
    return head


class BuildWithRevision(build_py):
    def run(self) -> None:
        super().run()
        rev = source_revision()
        if rev:
            target = Path(self.build_lib, "exporter", "data", "REVISION")
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(rev + "\n", encoding="ascii")


setup(cmdclass={"build_py": BuildWithRevision})
