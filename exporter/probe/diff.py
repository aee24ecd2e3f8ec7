"""Diff successive reads of kernel counter maps (pure; no BPF needed).

The kernel maps that feed counters are never cleared: userspace keeps the previous
read and subtracts. A key that is new, or that vanished and came back (deleted by
pruning, re-created by the kernel), starts from zero, so its whole current value is
the delta: a "fresh baseline". A key whose value went *down* is treated the same way
(it can only mean it was deleted and re-created between two reads).
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from typing import TypeVar

K = TypeVar("K", bound=Hashable)


def diff_counters(
    prev: Mapping[K, Sequence[int]], cur: Mapping[K, Sequence[int]]
) -> dict[K, tuple[int, ...]]:
    """Per-key component-wise deltas from ``prev`` to ``cur``; all-zero deltas omitted.

    Keys only in ``prev`` (vanished) produce nothing: the caller replaces ``prev`` by
    ``cur``, which forgets them, so if they come back they are a fresh baseline.
    """
    out: dict[K, tuple[int, ...]] = {}
    for key, now in cur.items():
        before = prev.get(key)
        if (
            before is None
            or len(before) != len(now)
            or any(n < b for n, b in zip(now, before, strict=True))
        ):
            delta = tuple(now)
        else:
            delta = tuple(n - b for n, b in zip(now, before, strict=True))
        if any(delta):
            out[key] = delta
    return out


def diff_totals(prev: Sequence[int] | None, cur: Sequence[int]) -> tuple[int, ...]:
    """Deltas of a fixed vector of node counters (a decrease counts from zero)."""
    if prev is None or len(prev) != len(cur):
        return tuple(cur)
    return tuple(c - p if c >= p else c for c, p in zip(cur, prev, strict=True))
