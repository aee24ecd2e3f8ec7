"""Write or verify the files the generators produce (rules, dashboards).

Both ``rules generate`` and ``dashboards generate`` render every file in memory first;
this writes only the ones whose text changed, or, when verifying (what CI runs),
writes nothing and names the stale ones.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from pathlib import Path


def _read(p: Path) -> str | None:
    try:
        return p.read_text(encoding="utf-8")
    except OSError:
        return None


def sync(root: Path, files: Mapping[Path, str], *, verify: bool, command: str) -> int:
    """Write ``files`` (paths relative to ``root``) that differ, saying which; with
    ``verify``, write nothing and return 1 if any differs (``command`` regenerates)."""
    if verify:
        stale = [p for p, text in files.items() if _read(root / p) != text]
        for p in stale:
            sys.stderr.write(f"out of date: {p} (run `{command}`)\n")
        return 1 if stale else 0
    for p, text in files.items():
        target = root / p
        target.parent.mkdir(parents=True, exist_ok=True)
        if _read(target) != text:
            target.write_text(text, encoding="utf-8")
            print(f"wrote {target}")
        else:
            print(f"unchanged {target}")
    return 0
