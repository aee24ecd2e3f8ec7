"""Samples with exactly the labels they have.

prometheus_client's families give every sample the same label names, and an unknown
value goes out as ``label=""``. A cgroup's series carry either its names or its
cgroup path (``Identity.series_labels``), so samples are added here with their own
label sets: an absent label costs no bytes in a scrape.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from prometheus_client.core import Metric
from prometheus_client.samples import Sample


def add(fam: Metric, labels: Mapping[str, str], value: float) -> None:
    """One sample of a gauge or counter family."""
    name = fam.name + "_total" if fam.type == "counter" else fam.name
    fam.samples.append(Sample(name, dict(labels), value))


def add_histogram(
    fam: Metric, labels: Mapping[str, str], buckets: Sequence[tuple[str, float]], sum_s: float
) -> None:
    """The ``_bucket`` samples (cumulative, ``+Inf`` last), ``_count`` and ``_sum``, in
    prometheus_client's order."""
    for le, v in buckets:
        fam.samples.append(Sample(fam.name + "_bucket", {**labels, "le": le}, v))
    fam.samples.append(Sample(fam.name + "_count", dict(labels), buckets[-1][1]))
    fam.samples.append(Sample(fam.name + "_sum", dict(labels), sum_s))
