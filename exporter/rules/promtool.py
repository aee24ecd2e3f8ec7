"""A thin ``promtool`` wrapper: ``rules generate --promtool`` checks the generated file.

``promtool`` is looked up on ``PATH`` (or ``$PROMTOOL``); when it is missing the error
says how to install it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path


class PromtoolMissing(RuntimeError):
    pass


@dataclass(frozen=True, slots=True)
class PromtoolResult:
    ok: bool
    output: str


def find_promtool() -> str:
    explicit = os.environ.get("PROMTOOL")
    if explicit:
        return explicit
    found = shutil.which("promtool")
    if found is None:
        raise PromtoolMissing(
            "promtool not found on PATH (set $PROMTOOL). Install it with "
            "`apt-get install prometheus` (Debian/Ubuntu) or from a Prometheus release tarball."
        )
    return found


def run_promtool(*args: str, cwd: str | Path | None = None, timeout: float = 300) -> PromtoolResult:
    exe = find_promtool()
    try:
        proc = subprocess.run(
            [exe, *args],
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    except FileNotFoundError:
        raise PromtoolMissing(f"cannot run {exe}: not found") from None
    return PromtoolResult(proc.returncode == 0, proc.stdout + proc.stderr)


def check_rules(*paths: str | Path) -> PromtoolResult:
    return run_promtool("check", "rules", *map(str, paths))
