"""What the catalog says about a metric family and a collector: plain data.

No Prometheus imports and nothing of ours: the exposition turns a :class:`Family` into
a prometheus_client family (``exporter.exposition.series.new``), ``exporter.promql``
takes its name, and the docs' tables and the series budget are computed from it.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class Type(StrEnum):
    COUNTER = "counter"
    GAUGE = "gauge"
    HISTOGRAM = "histogram"


class Scope(StrEnum):
    """Whom one set of a family's series describes; docs/metrics.md has a table each."""

    CONTAINER = "container"  # each tracked container, with its identity labels
    VICTIM = "victim"  # each tracked container the scheduler probe watches
    ANTAGONIST = "antagonist"  # the node's top culprits
    FINDING = "finding"  # each active finding
    NODE = "node"
    EXPORTER = "exporter"  # the exporter itself


# Base units (docs/metrics.md): a family's name ends with its unit ("" for counts,
# info gauges and weights).
SECONDS = "seconds"
BYTES = "bytes"
CORES = "cores"
RATIO = "ratio"
NO_UNIT = ""

# The end of the HELP of every value read in the pass.
FROM_PASS = " From the latest sampler pass."


@dataclass(frozen=True, slots=True)
class Label:
    """A label beyond the identity labels a container's series always carry."""

    name: str
    # The values it takes, when they are a fixed set (docs; the series count).
    values: tuple[str, ...] = ()
    # True: each value is a series of its own for one container (refault types);
    # False: a container's series has one of them (the entitlement's basis).
    every_value: bool = False
    # Values only an optional collector adds (``more_with``), after ``values``.
    more: tuple[str, ...] = ()
    more_with: str = ""


@dataclass(frozen=True, slots=True)
class Family:
    """One exported metric family."""

    name: str  # as exposed: a counter's ends in _total
    type: Type
    unit: str  # one of the base units above
    help: str  # HELP; a "{top_k}" in it is filled in by the collector that builds it
    collector: str  # the collector that builds it (catalog.collectors), on or off
    scope: Scope
    labels: tuple[Label, ...] = ()
    doc: str = ""  # docs/metrics.md's meaning, markdown ("": the help)
    source: str = ""  # where the value comes from (docs/metrics.md)
    constant: bool = False  # always 1: an info gauge
    # One of a container's top K culprits: every family marked so shares one budget
    # of K series per container (docs/metrics.md, "Cardinality").
    top_k: bool = False
    labels_doc: str = ""  # the labels column, when the label names alone say too little

    @property
    def label_names(self) -> tuple[str, ...]:
        return tuple(lab.name for lab in self.labels)

    def label(self, name: str) -> Label:
        for lab in self.labels:
            if lab.name == name:
                return lab
        raise KeyError(f"{self.name} has no label {name!r}")

    def values(self, label: str, collectors: frozenset[str] | set[str]) -> tuple[str, ...]:
        """The values of ``label`` the enabled ``collectors`` export."""
        lab = self.label(label)
        return lab.values + (lab.more if lab.more_with in collectors else ())


@dataclass(frozen=True, slots=True)
class Collector:
    """A named part of the exposition: its families are built together and are on or
    off together (``--collector.<name>`` for the ones off by default). The exposition's
    ordered registry (``exporter.exposition.registry``) says which function builds it."""

    name: str
    default: bool  # on unless the exporter is told otherwise
    doc: str  # what it exports, and when (docs)
    flag_help: str = ""  # --collector.<name>'s help (collectors off by default)
    elsewhere: str = ""  # who exports the same already (docs, collectors off by default)
    # Families it exports that a library names, not this catalog (process_*).
    foreign: tuple[str, ...] = ()
