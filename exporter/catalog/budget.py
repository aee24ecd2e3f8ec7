"""Series per tracked container, at most, computed from the catalog (docs/metrics.md,
"Cardinality"; tests/unit/test_cardinality.py measures the same on a node).

The probe's numbers come from the probe (``exporter.probe``): each histogram's finite
bounds (``exporter.probe.burst.HISTOGRAM_BOUNDS``) and the default K culprits per
victim. The catalog takes them as arguments so that it imports nothing.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping

from .model import Family, Scope, Type

PER_CONTAINER = (Scope.CONTAINER, Scope.VICTIM)


def series(fam: Family, collectors: Collection[str], *, buckets: Mapping[str, int]) -> int:
    """Series of ``fam`` for one container, its top-K share aside (``buckets``: each
    histogram family's finite bounds, by name; +Inf, ``_count`` and ``_sum`` come with
    them)."""
    if fam.type is Type.HISTOGRAM:
        if fam.name not in buckets:
            raise ValueError(f"no bucket count for the histogram {fam.name}")
        return buckets[fam.name] + 3
    n = 1
    for lab in fam.labels:
        if lab.every_value:
            n *= len(fam.values(lab.name, set(collectors)))
    return n


def breakdown(
    families: Iterable[Family],
    collectors: Collection[str],
    *,
    probe: bool,
    buckets: Mapping[str, int],
) -> list[tuple[Family, int]]:
    """Each family a container can have a series of, with how many; the top-K ones
    are left out (they share one budget: :func:`per_container`)."""
    return [
        (f, series(f, collectors, buckets=buckets))
        for f in families
        if f.scope in PER_CONTAINER
        and f.collector in collectors
        and (probe or f.scope is not Scope.VICTIM)
        and not f.top_k
    ]


def per_container(
    families: Iterable[Family],
    collectors: Collection[str],
    *,
    probe: bool,
    buckets: Mapping[str, int],
    top_k: int,
) -> int:
    """At most this many series per tracked container with these collectors on (and
    the probe loaded, or not), when every file is present and requests are known."""
    fams = list(families)
    total = sum(n for _, n in breakdown(fams, collectors, probe=probe, buckets=buckets))
    shared = probe and any(f.top_k and f.collector in collectors for f in fams)
    return total + (top_k if shared else 0)
