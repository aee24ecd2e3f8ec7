"""The source revision this exporter was built from (``contention_build_info``).

* Run from a source checkout (``pip install -e .``, ``python -m exporter``): the
  checkout's ``git rev-parse HEAD``, with ``-modified`` when tracked files differ from
  it (the convention of Prometheus' own version package).
* Installed from a wheel or the image: the revision ``setup.py`` stamped into the
  package at build time (``exporter/data/REVISION``), from ``$CONTENTION_REVISION`` or
  the git checkout the wheel was built in.
* Neither: ``unknown``.
"""

from __future__ import annotations

import subprocess
from functools import cache
from pathlib import Path

UNKNOWN = "unknown"
STAMP = "REVISION"  # in exporter/data/, written by setup.py into built wheels only
PACKAGE = Path(__file__).resolve().parent


@cache
def revision() -> str:
    """Read once per process (git runs at most twice, at the first call)."""
    checkout = PACKAGE.parent
    if (checkout / "pyproject.toml").is_file() and (checkout / ".git").exists():
        from_git = git_revision(checkout)
        if from_git:
            return from_git
    stamp = PACKAGE / "data" / STAMP
    try:
        stamped = stamp.read_text(encoding="ascii").strip()
    except (OSError, UnicodeDecodeError):
        stamped = ""
    return stamped or UNKNOWN


def git_revision(checkout: Path) -> str | None:
    """``<commit>`` or ``<commit>-modified``; None when git cannot say (no git, not a
    repository, a repository owned by another user)."""

    def git(*args: str) -> str | None:
        try:
            proc = subprocess.run(
                ["git", "-C", str(checkout), *args],
                capture_output=True,
                text=True,
                timeout=5,
                check=False,
            )
        except (OSError, subprocess.SubprocessError):
            return None
        return proc.stdout.strip() if proc.returncode == 0 else None

    head = git("rev-parse", "--verify", "HEAD")
    if not head:
        return None
    dirty = git("status", "--porcelain", "--untracked-files=no")
    return f"{head}-modified" if dirty else head
