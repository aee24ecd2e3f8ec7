"""Families from the catalog, and samples with exactly the labels they have.

:func:`new` makes the prometheus_client family of a catalog entry (its name, type and
HELP), fresh for every build of a pass. prometheus_client's ``add_metric`` gives every
sample the same label names, and an unknown value goes out as ``label=""``. A cgroup's
series carry either its names or its cgroup path (``Identity.series_labels``), so
their samples are added here with their own label sets: an absent label costs no bytes
in a scrape.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.samples import Sample

from ..catalog import Family, Type

# A family whose samples are added one value at a time.
Sampled = CounterMetricFamily | GaugeMetricFamily


def new(spec: Family, **help_fields: object) -> Sampled:
    """An empty family of ``spec``; ``help_fields`` fill in its HELP's ``{fields}``.
    (No ``unit``: prometheus_client would add a ``# UNIT`` line to OpenMetrics.)"""
    text = spec.help.format(**help_fields) if help_fields else spec.help
    if spec.type is Type.COUNTER:
        return CounterMetricFamily(spec.name, text, labels=spec.label_names)
    if spec.type is Type.GAUGE:
        return GaugeMetricFamily(spec.name, text, labels=spec.label_names)
    raise ValueError(f"{spec.name} is a {spec.type}: new_histogram() makes it")


def new_histogram(spec: Family) -> HistogramMetricFamily:
    if spec.type is not Type.HISTOGRAM:
        raise ValueError(f"{spec.name} is a {spec.type}: new() makes it")
    return HistogramMetricFamily(spec.name, spec.help, labels=spec.label_names)


def one(spec: Family, value: float, labels: Sequence[str] = ()) -> Metric:
    """A family of ``spec`` with one sample (``labels``: its label values, in order)."""
    m = new(spec)
    m.add_metric(list(labels), value)
    return m


# Sample(...) without its keyword defaults' wrapper: the families of 1,000 containers add
# ~17,000 samples a pass. Every field after the value is None.
_make_sample = Sample._make
_NO_EXTRAS = (None,) * (len(Sample._fields) - 3)
# A counter family's sample name, one string for all its samples (not one each: the
# published families are held while a pass is rendered). Bounded by the catalog.
_COUNTER_SAMPLE_NAMES: dict[str, str] = {}


def add(fam: Metric, labels: dict[str, str], value: float) -> None:
    """One sample of a gauge or counter family. ``labels`` becomes the sample's own
    (not copied: several samples of one cgroup share its identity labels); do not
    change it afterwards."""
    name = fam.name
    if fam.type == "counter":
        total = _COUNTER_SAMPLE_NAMES.get(name)
        if total is None:
            total = _COUNTER_SAMPLE_NAMES[name] = name + "_total"
        name = total
    fam.samples.append(_make_sample((name, labels, value, *_NO_EXTRAS)))


def add_histogram(
    fam: Metric, labels: Mapping[str, str], buckets: Sequence[tuple[str, float]], sum_s: float
) -> None:
    """The ``_bucket`` samples (cumulative, ``+Inf`` last), ``_count`` and ``_sum``, in
    prometheus_client's order."""
    for le, v in buckets:
        fam.samples.append(Sample(fam.name + "_bucket", {**labels, "le": le}, v))
    fam.samples.append(Sample(fam.name + "_count", dict(labels), buckets[-1][1]))
    fam.samples.append(Sample(fam.name + "_sum", dict(labels), sum_s))
