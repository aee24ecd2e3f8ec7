"""The metric catalog (``exporter.catalog``) says what the exposition exports.

The exposition of a node with everything on (every collector, the probe, named
containers, the configuration files, the pod watch, the HTTP front) has exactly the
catalog's families, each with its type, HELP and labels; the registry builds every
collector the catalog has; docs/metrics.md's tables are the catalog's.
"""

from __future__ import annotations

import collections
import string
from pathlib import Path
from types import ModuleType

import pytest
from prometheus_client.core import Metric

from exporter import catalog
from exporter.catalog import (
    BY_NAME,
    COLLECTORS,
    FAMILIES,
    OPTIONAL_COLLECTORS,
    Family,
    Scope,
    Type,
    containers,
    findings,
    node,
    own,
    probe,
)
from exporter.cgroupfs.mode import CgroupMode
from exporter.exposition.inputs import Sources
from exporter.exposition.registry import REGISTRY
from exporter.identity import IDENTITY_LABELS
from exporter.kube.resolver import KubeStatus, WatchState
from exporter.probe import ProbeTotals
from exporter.probe.select import LOADER_NAMES
from exporter.sampler.loop import SKIP_REASONS
from exporter.web.transport import CLOSE_REASONS
from tests.support import metrics_doc

from .test_cardinality import BlameEveryone, families

ROOT = Path(__file__).resolve().parents[2]
MODULES: tuple[ModuleType, ...] = (containers, node, probe, findings, own)
HELP_FIELDS = {"top_k", "antagonist_top_k"}


def test_docs_tables_are_the_catalogs() -> None:
    text = (ROOT / metrics_doc.DOC).read_text(encoding="utf-8")
    assert metrics_doc.render(text) == text, f"run `{metrics_doc.COMMAND}`"


def test_every_family_of_a_catalog_module_is_listed_once() -> None:
    defined = [v for m in MODULES for v in vars(m).values() if isinstance(v, Family)]
    assert sorted(f.name for f in defined) == sorted(f.name for f in FAMILIES)
    assert len(BY_NAME) == len(FAMILIES)


@pytest.mark.parametrize("fam", FAMILIES, ids=lambda f: f.name)
def test_a_family_is_named_for_its_type_and_has_a_collector(fam: Family) -> None:
    assert fam.name.startswith("contention_")
    assert fam.name.endswith("_total") == (fam.type is Type.COUNTER)
    assert fam.collector in {c.name for c in COLLECTORS}
    fields = {f for _, f, _, _ in string.Formatter().parse(fam.help) if f is not None}
    assert fields <= HELP_FIELDS, fields
    if fam.labels_doc:  # the docs' own words name every label
        assert all(f"`{n}" in fam.labels_doc for n in fam.label_names), fam.labels_doc


def test_the_registry_builds_every_collector_of_the_catalog() -> None:
    registered = [r.name for r in REGISTRY]
    assert len(set(registered)) == len(registered)
    assert registered[-1] == "status"  # it says how the ones before it went
    building = {f.collector for f in FAMILIES} | {c.name for c in COLLECTORS if c.foreign}
    # memory_oom builds no family: it adds values to one of `containers`
    extending = {lab.more_with for f in FAMILIES for lab in f.labels if lab.more_with}
    assert set(registered) == building
    assert {c.name for c in COLLECTORS} == building | extending
    assert list(OPTIONAL_COLLECTORS) == [c.name for c in COLLECTORS if not c.default]


def test_label_values_are_the_ones_the_code_writes() -> None:
    assert own.SAMPLER_SKIPPED_CGROUPS.label("reason").values == SKIP_REASONS
    assert own.HTTP_CONNECTIONS_CLOSED.label("reason").values == tuple(CLOSE_REASONS)
    assert own.KUBE_WATCH_STATE.label("state").values == tuple(s.value for s in WatchState)
    assert node.NODE_INFO.label("cgroup_mode").values == tuple(m.value for m in CgroupMode)
    assert probe.PROBE_LOADED.label("loader").values == tuple(LOADER_NAMES)


class _Kube:
    """The pod watch, as the ``kube`` collector reads it."""

    def status(self) -> KubeStatus:
        return KubeStatus(WatchState.WATCHING, True, True, 0.0, 3, 1, 1, 0, 0, {"ADDED": 3})


class _Front:
    class stats:  # the HTTP front's counters
        closed = dict.fromkeys(CLOSE_REASONS, 0)
        responses = collections.Counter({200: 1})
        open = 1

    web_config = None


def _attach(sources: Sources) -> None:
    sources.kube = _Kube()  # type: ignore[assignment]
    sources.http = _Front()


def _everything(tmp_path: Path) -> list[Metric]:
    """The metadata file brings its config file status; the stand-in probe, maps."""
    stand_in = BlameEveryone()
    stand_in._totals = ProbeTotals(map_capacity={"m": 1}, programs={})
    every = frozenset(OPTIONAL_COLLECTORS)
    return families(tmp_path, stand_in, every, containers=6, attach=_attach)


def test_the_exposition_is_what_the_catalog_says(tmp_path: Path) -> None:
    fams = [m for m in _everything(tmp_path) if not m.name.startswith(("process_", "python_"))]
    got = {f.name + ("_total" if f.type == "counter" else ""): f for f in fams}
    # staleness comes with the Kubernetes identity source only (docs/kubernetes.md)
    assert set(BY_NAME) - set(got) == {own.METADATA_STALENESS_SECONDS.name}
    assert set(got) <= set(BY_NAME)
    for name, m in got.items():
        spec = BY_NAME[name]
        assert m.type == spec.type.value, name
        assert m.documentation == spec.help.format(top_k=3, antagonist_top_k=10), name
        allowed = set(spec.label_names)
        if spec.scope in (Scope.CONTAINER, Scope.VICTIM, Scope.FINDING):
            allowed |= set(IDENTITY_LABELS)
        if spec.type is Type.HISTOGRAM:
            allowed.add("le")
        for s in m.samples:
            assert set(s.labels) <= allowed, (name, s.labels)


def test_enabled_refuses_an_unknown_collector() -> None:
    with pytest.raises(ValueError, match="bogus"):
        catalog.enabled({"bogus"})
