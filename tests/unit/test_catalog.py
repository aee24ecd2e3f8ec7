"""The metric catalog (``exporter.catalog``) says what the exposition exports.

The exposition of a node with everything on (every collector, the probe, named
containers, the configuration files, the pod watch, the HTTP front) has exactly the
catalog's families, each once, with its type, HELP, unit (in its name) and labels (and
their values, where the catalog lists them), collector by collector in the registry's
order; the registry builds every collector the catalog has; the series budget per
container (``catalog.budget``) covers every family a container has in that exposition,
with at most the series it counts; docs/metrics.md's tables are the catalog's.
"""

from __future__ import annotations

import ast
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
    DEFAULT_COLLECTORS,
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
    selftest,
)
from exporter.catalog import budget as series_budget
from exporter.catalog.model import BYTES, CORES, RATIO, SECONDS
from exporter.cgroupfs.mode import CgroupMode
from exporter.exposition.inputs import Sources
from exporter.exposition.registry import REGISTRY
from exporter.identity import IDENTITY_LABELS
from exporter.kube.watch import KubeStatus, WatchState
from exporter.probe import DEFAULT_TOP_K, ProbeTotals
from exporter.probe.select import LOADER_NAMES
from exporter.sampler.loop import SKIP_REASONS
from exporter.web.transport import CLOSE_REASONS
from tests.support import metrics_doc

from .test_cardinality import BlameEveryone, families

# No bound but against hangs (no server, clock or subprocess bound): scripts/test.sh
# runs these at idle priority (docs/testing.md).
pytestmark = [pytest.mark.untimed, pytest.mark.timeout(900)]

ROOT = Path(__file__).resolve().parents[2]
MODULES: tuple[ModuleType, ...] = (containers, node, probe, findings, own, selftest)
HELP_FIELDS = {"top_k", "antagonist_top_k"}
UNITS = (SECONDS, BYTES, CORES, RATIO)


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


@pytest.mark.parametrize("fam", FAMILIES, ids=lambda f: f.name)
def test_a_family_is_named_for_its_unit(fam: Family) -> None:
    """Base units in the name (docs/metrics.md): it ends with its unit, and a family
    without one does not end with a unit's name."""
    assert fam.unit in (*UNITS, ""), fam.unit
    base = fam.name.removesuffix("_total")
    if fam.unit:
        assert base.endswith("_" + fam.unit), (fam.name, fam.unit)
    else:
        assert not base.endswith(tuple("_" + u for u in UNITS)), fam.name


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


def _names_used(path: Path) -> set[str]:
    """Every name and attribute a module reads (``C.CPU_USAGE_SECONDS``: both)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    out = set()
    for n in ast.walk(tree):
        if isinstance(n, ast.Name):
            out.add(n.id)
        elif isinstance(n, ast.Attribute):
            out.add(n.attr)
        elif isinstance(n, ast.alias):
            out.add(n.name)
    return out


def test_a_family_is_built_in_one_module_its_catalog_module_names() -> None:
    """Two hops from the catalog (issue 25): a family's catalog module says which
    exposition module builds it, and only that module (the one the registry registers
    its collector from) uses its entry; that module's docstring names the computation
    it calls, when it does more than convert units."""
    exposition = ROOT / "exporter" / "exposition"
    used = {p.stem: _names_used(p) for p in sorted(exposition.glob("*.py"))}
    registered = {r.name: r.build.__module__ for r in REGISTRY}
    for module in MODULES:
        doc = module.__doc__ or ""
        for const, fam in vars(module).items():
            if not isinstance(fam, Family):
                continue
            builder = registered[fam.collector]
            users = {
                f"exporter.exposition.{stem}" for stem, names in used.items() if const in names
            }
            assert users == {builder}, (fam.name, users)
            assert f"``{builder}``" in doc, (module.__name__, builder)


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


def _selftest() -> dict[str, object]:
    """A finished self-test, as the ``selftest`` collector reads it."""
    checks = [{"name": n, "ok": True} for n in selftest.CHECK.values]
    return {
        **dict.fromkeys(("passed", "exit_code", "ended_at", "duration_s"), 1),
        **dict.fromkeys(("blame_share", "truth_share", "time_to_first_finding_s"), 0.5),
        "probe_ns_per_switch": 300.0,
        "checks": checks,
    }


def _attach(sources: Sources) -> None:
    sources.kube = _Kube()  # type: ignore[assignment]
    sources.http = _Front()
    sources.selftest = _selftest


EVERY = frozenset(OPTIONAL_COLLECTORS)
ON = DEFAULT_COLLECTORS | EVERY


@pytest.fixture(scope="module")
def everything(tmp_path_factory: pytest.TempPathFactory) -> list[Metric]:
    """Every family of a node with everything on but the Kubernetes identity source:
    the metadata file brings its config file status; the stand-in probe, maps."""
    stand_in = BlameEveryone()
    stand_in._totals = ProbeTotals(map_capacity={"m": 1}, programs={})
    fams = families(tmp_path_factory.mktemp("node"), stand_in, EVERY, containers=6, attach=_attach)
    return [m for m in fams if not m.name.startswith(("process_", "python_"))]


def _exported(m: Metric) -> str:
    return m.name + ("_total" if m.type == "counter" else "")


def test_the_exposition_has_every_family_of_the_catalog_once(everything: list[Metric]) -> None:
    names = [_exported(m) for m in everything]
    assert len(names) == len(set(names)), collections.Counter(names).most_common(3)
    # staleness comes with the Kubernetes identity source only (docs/kubernetes.md)
    assert set(BY_NAME) - set(names) == {own.METADATA_STALENESS_SECONDS.name}
    assert set(names) <= set(BY_NAME)


def test_the_exposition_is_what_the_catalog_says(everything: list[Metric]) -> None:
    for m in everything:
        name = _exported(m)
        spec = BY_NAME[name]
        assert m.type == spec.type.value, name
        assert m.documentation == spec.help.format(top_k=3, antagonist_top_k=10), name
        assert m.unit == "", name  # the unit is in the name: no # UNIT line
        allowed = set(spec.label_names)
        if spec.scope in (Scope.CONTAINER, Scope.VICTIM, Scope.FINDING):
            allowed |= set(IDENTITY_LABELS)
        if spec.type is Type.HISTOGRAM:
            allowed.add("le")
        for s in m.samples:
            assert set(s.labels) <= allowed, (name, s.labels)
            for lab in spec.labels:
                # A fixed set: a series has one of them, or none (empty is absent in
                # Prometheus: the probe's loader when nothing loaded); one per value
                # (every_value), always one.
                if lab.values:
                    values = spec.values(lab.name, ON) + (() if lab.every_value else ("",))
                    assert s.labels.get(lab.name, "") in values, (name, s)


def test_each_collector_builds_its_families_in_registry_order(
    everything: list[Metric],
) -> None:
    """Collector by collector in the registry's order: each family comes with the
    others of its catalog collector, after every family of the collectors before."""
    order = [r.name for r in REGISTRY]
    collectors = [BY_NAME[_exported(m)].collector for m in everything]
    assert collectors == sorted(collectors, key=order.index)
    assert len(set(collectors)) == len(order) - 1  # every one but process (left out)


def _per_container(everything: list[Metric]) -> dict[str, collections.Counter[tuple[str, ...]]]:
    """For each family a container has series of: how many each container has."""
    out: dict[str, collections.Counter[tuple[str, ...]]] = {}
    for m in everything:
        spec = BY_NAME[_exported(m)]
        if spec.scope not in series_budget.PER_CONTAINER:
            continue
        counts = out.setdefault(spec.name, collections.Counter())
        for s in m.samples:
            counts[tuple(s.labels.get(k, "") for k in IDENTITY_LABELS)] += 1
    return out


def test_the_budget_counts_what_a_container_has(everything: list[Metric]) -> None:
    """The budget (computed from the catalog) lists every family a container has a
    series of, top-K ones aside, with at most the series it counts for it, and exactly
    that many where the counted values are all there; the top-K families share K."""
    counted = dict(
        (f.name, n)
        for f, n in series_budget.breakdown(FAMILIES, ON, probe=True, buckets=metrics_doc.BUCKETS)
    )
    got = _per_container(everything)
    shared = {f.name for f in FAMILIES if f.top_k}
    assert set(got) - shared <= set(counted)
    for name, per in got.items():
        if name in shared or not per:
            continue
        assert max(per.values()) <= counted[name], (name, per)
        labels = BY_NAME[name].labels
        if BY_NAME[name].type is Type.HISTOGRAM or any(lab.every_value for lab in labels):
            assert max(per.values()) == counted[name], (name, per)
    top: collections.Counter[tuple[str, ...]] = collections.Counter()
    for name in shared:
        top.update(got.get(name, {}))
    assert max(top.values()) == DEFAULT_TOP_K, top


def test_the_budget_follows_the_catalog() -> None:
    """One more per-container gauge in the catalog is one more series in the budget;
    the same off its collector, or of the node, is none."""

    def budget(fams: tuple[Family, ...]) -> int:
        return series_budget.per_container(
            fams, ON, probe=True, buckets=metrics_doc.BUCKETS, top_k=DEFAULT_TOP_K
        )

    extra = Family("contention_x_bytes", Type.GAUGE, BYTES, "X.", "containers", Scope.CONTAINER)
    assert budget((*FAMILIES, extra)) == budget(FAMILIES) + 1
    off = Family("contention_x_bytes", Type.GAUGE, BYTES, "X.", "cpu_spec", Scope.CONTAINER)
    assert series_budget.per_container(
        (*FAMILIES, off),
        DEFAULT_COLLECTORS,
        probe=True,
        buckets=metrics_doc.BUCKETS,
        top_k=DEFAULT_TOP_K,
    ) == series_budget.per_container(
        FAMILIES, DEFAULT_COLLECTORS, probe=True, buckets=metrics_doc.BUCKETS, top_k=DEFAULT_TOP_K
    )
    node_wide = Family("contention_node_x_bytes", Type.GAUGE, BYTES, "X.", "node", Scope.NODE)
    assert budget((*FAMILIES, node_wide)) == budget(FAMILIES)


def test_enabled_refuses_an_unknown_collector() -> None:
    with pytest.raises(ValueError, match="bogus"):
        catalog.enabled({"bogus"})
