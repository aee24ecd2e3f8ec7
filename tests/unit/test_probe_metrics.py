"""Culprit classification and the probe's Prometheus families (no kernel)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector

from exporter.cgroupfs.discovery import CgroupKind
from exporter.exposition.probe import VictimProbeData, build_probe_families
from exporter.identity import Identity
from exporter.probe import RUNQ_BOUNDS_S, RUNQ_SLOTS, ProbeStatus, RunqHistogram
from exporter.probe.blame import blame_shares, unknown_blame_ratio
from exporter.probe.culprit import CulpritKind, classify_culprit
from exporter.probe.model import ProbeTotals, ProgramStats
from exporter.window import CULPRIT_IDLE, CULPRIT_UNATTRIBUTED, CulpritKey

ROOT = Identity(cgroup="/", kind=CgroupKind.ROOT)
WEB = Identity(
    cgroup="/kubepods.slice/kubepods-pod1.slice/cri-containerd-aa.scope",
    kind=CgroupKind.CONTAINER,
    namespace="shop",
    pod="web-1",
    container="web",
    pod_uid="11111111-2222-3333-4444-555555555555",
)
BATCH = Identity(
    cgroup="/kubepods.slice/kubepods-besteffort.slice/x/cri-containerd-bb.scope",
    kind=CgroupKind.CONTAINER,
    namespace="batch",
    pod="crunch-7",
    container="crunch",
    pod_uid="99999999-2222-3333-4444-555555555555",
)
UNNAMED = Identity(
    cgroup="/kubepods.slice/kubepods-podabcdef12.slice/cri-containerd-cc.scope",
    kind=CgroupKind.CONTAINER,
    pod_uid="abcdef12-0000-0000-0000-000000000000",
)
KUBELET = Identity(cgroup="/system.slice/kubelet.service", kind=CgroupKind.SYSTEM)
IDS = {1: ROOT, 10: WEB, 20: BATCH, 30: UNNAMED, 40: KUBELET}
LOADED = ProbeStatus(True, "", "ok", "occupancy")


@pytest.mark.parametrize(
    ("key", "kind", "name"),
    [
        (CULPRIT_IDLE, CulpritKind.IDLE, "idle"),
        (CULPRIT_UNATTRIBUTED, CulpritKind.UNKNOWN, "unattributed"),
        (1, CulpritKind.KERNEL, "kernel"),
        (20, CulpritKind.POD, "batch/crunch-7/crunch"),
        (30, CulpritKind.POD, "pod:abcdef12"),
        (40, CulpritKind.SYSTEM, "system.slice/kubelet.service"),
        (12345, CulpritKind.UNKNOWN, "unknown"),
    ],
)
def test_classify(key: CulpritKey, kind: CulpritKind, name: str) -> None:
    c = classify_culprit(key, IDS)
    assert c.kind is kind and c.culprit == name


def test_pod_culprit_carries_join_labels() -> None:
    """A culprit's labels are its own series' identity labels, prefixed: its names, or
    its cgroup path while unnamed (or when its names are ambiguous in the pass)."""
    labels = classify_culprit(20, IDS).labels()
    assert labels == {
        "culprit_kind": "pod",
        "culprit": "batch/crunch-7/crunch",
        "culprit_namespace": "batch",
        "culprit_pod": "crunch-7",
        "culprit_container": "crunch",
    }
    assert {f"culprit_{k}": v for k, v in BATCH.series_labels().items()}.items() <= labels.items()
    assert classify_culprit(30, IDS).labels() == {
        "culprit_kind": "pod",
        "culprit": "pod:abcdef12",
        "culprit_cgroup": UNNAMED.cgroup,
    }
    assert classify_culprit(40, IDS).labels()["culprit_cgroup"] == KUBELET.cgroup
    assert classify_culprit(1, IDS).labels()["culprit_cgroup"] == "/"
    assert "culprit_cgroup" not in classify_culprit(CULPRIT_IDLE, IDS).labels()
    ambiguous = frozenset({("batch", "crunch-7", "crunch")})
    assert classify_culprit(20, IDS).labels(ambiguous)["culprit_cgroup"] == BATCH.cgroup


def test_root_id_without_identity_is_the_kernel() -> None:
    assert classify_culprit(1, {}).kind is CulpritKind.KERNEL
    assert classify_culprit(77, {}, root_ids=(77,)).kind is CulpritKind.KERNEL


def test_blame_shares_merge_and_order() -> None:
    window: dict[CulpritKey, float] = {
        20: 6.0,
        40: 1.0,
        CULPRIT_IDLE: 1.0,
        1: 0.5,
        555: 0.75,  # two unknown ids merge into one "unknown" entry
        556: 0.75,
        10: 0.0,  # nothing: dropped
    }
    every = blame_shares(window, IDS)
    assert [b.culprit.culprit for b in every] == [
        "batch/crunch-7/crunch",
        "unknown",
        "idle",  # 1.0 each: ties by name
        "system.slice/kubelet.service",
        "kernel",
    ]
    assert every[0].share == pytest.approx(0.6)
    assert every[1].wait_s == pytest.approx(1.5)
    assert sum(b.share for b in every) == pytest.approx(1.0)
    assert blame_shares({}, IDS) == []


def test_unknown_ratio() -> None:
    rows: list[dict[CulpritKey, float]] = [
        {20: 3.0, CULPRIT_UNATTRIBUTED: 1.0},
        {999: 1.0, CULPRIT_IDLE: 5.0},
    ]
    assert unknown_blame_ratio(rows, IDS) == pytest.approx(0.2)
    assert unknown_blame_ratio([{}], IDS) is None


class _Families(Collector):
    def __init__(self, fams: list[object]) -> None:
        self.fams = fams

    def collect(self):  # type: ignore[no-untyped-def]
        return iter(self.fams)


def expose(fams: list[object]) -> str:
    reg = CollectorRegistry()
    reg.register(_Families(fams))
    return generate_latest(reg).decode()


def samples(text: str) -> list[tuple[str, dict[str, str], float]]:
    return [
        (s.name, {k: v for k, v in s.labels.items() if v != ""}, s.value)
        for fam in text_string_to_metric_families(text)
        for s in fam.samples
    ]


def test_not_loaded_exports_only_the_reason() -> None:
    st = ProbeStatus(False, "no-headers", "none", "occupancy")
    text = expose(list(build_probe_families([], IDS, st, None)))
    assert samples(text) == [("contention_probe_loaded", {"reason": "no-headers"}, 0.0)]


@pytest.mark.parametrize(
    ("loader", "reason"), [("core", ""), ("bcc", ""), ("bcc", "verifier"), ("bcc", "no-btf")]
)
def test_loaded_says_which_loader_and_why_not_the_other(loader: str, reason: str) -> None:
    """BCC loaded as the fallback: reason says why CO-RE did not load."""
    st = ProbeStatus(True, reason, "detail", "occupancy", loader)
    text = expose(list(build_probe_families([], IDS, st, None)))
    loaded = [s for s in samples(text) if s[0] == "contention_probe_loaded"]
    want = {"loader": loader} | ({"reason": reason} if reason else {})
    assert loaded == [("contention_probe_loaded", want, 1.0)]


def test_families_exposition(tmp_path: Path) -> None:
    h = RunqHistogram()
    h.counts[0] = 90
    h.counts[RUNQ_BOUNDS_S.index(0.02)] = 9
    h.counts[-1] = 1
    h.sum_s = 7.5
    victims = [
        VictimProbeData(WEB, h, {20: 6.0, 40: 1.0, CULPRIT_IDLE: 2.0, 12345: 1.0}),
        VictimProbeData(KUBELET, None, {}),
    ]
    totals = ProbeTotals(
        context_switches=1000,
        update_failures={"blame": 2, "runq": 0},
        map_entries={"blame": 10, "runq": 3},
        map_capacity={"blame": 32768, "runq": 4096},
        programs={"sched_switch": ProgramStats(123_000, 1000)},
        migrated_waits=7,
    )
    text = expose(list(build_probe_families(victims, IDS, LOADED, totals, top_k=3)))
    got = samples(text)
    web = {"namespace": "shop", "pod": "web-1", "container": "web"}  # named: no path

    def value(name: str, **labels: str) -> float:
        want = {**labels}
        hits = [v for n, lb, v in got if n == name and lb == want]
        assert len(hits) == 1, (name, want)
        return hits[0]

    assert value("contention_runqueue_latency_seconds_bucket", **web, le="0.02") == 99
    assert value("contention_runqueue_latency_seconds_bucket", **web, le="+Inf") == 100
    assert value("contention_runqueue_latency_seconds_count", **web) == 100
    assert value("contention_runqueue_latency_seconds_sum", **web) == 7.5  # the total wait
    assert not [n for n, _, _ in got if n.startswith("contention_runqueue_wait")]
    # the unnamed system unit is known by its path
    assert all(lb.get("cgroup") != KUBELET.cgroup or "pod" not in lb for _, lb, _ in got)
    buckets = [lb for n, lb, _ in got if n == "contention_runqueue_latency_seconds_bucket"]
    assert len(buckets) == RUNQ_SLOTS  # every bound, backfilled; the other victim has none
    shares = [(lb, v) for n, lb, v in got if n == "contention_blame_ratio"]
    assert len(shares) == 3  # top-K
    top = max(shares, key=lambda s: s[1])
    assert top[1] == pytest.approx(0.6)
    assert top[0] == {
        **web,
        "culprit_kind": "pod",
        "culprit": "batch/crunch-7/crunch",
        "culprit_namespace": "batch",
        "culprit_pod": "crunch-7",
        "culprit_container": "crunch",
    }
    assert any(lb["culprit_kind"] == "idle" for lb, _ in shares)
    assert value("contention_probe_loaded") == 1  # reason="" (dropped) when loaded
    assert value("contention_probe_unknown_blame_ratio") == pytest.approx(0.1)
    assert value("contention_probe_map_update_failures_total", map="blame") == 2
    assert value("contention_probe_program_runs_total", program="sched_switch") == 1000
    assert value("contention_probe_migrated_waits_total") == 7
    promtool = shutil.which("promtool")
    if promtool:
        f = tmp_path / "m.prom"
        f.write_text(text)
        r = subprocess.run([promtool, "check", "metrics"], stdin=f.open(), capture_output=True)
        assert r.returncode == 0, r.stdout + r.stderr


def test_a_host_cgroup_named_by_metadata_is_a_pod_culprit() -> None:
    """--metadata.file names give the culprit the same labels the victim carries."""
    from exporter.cgroupfs.discovery import CgroupKind
    from exporter.identity import Identity
    from exporter.probe.culprit import CulpritKind, classify_culprit

    named = Identity(
        cgroup="/lab/high", kind=CgroupKind.OTHER, namespace="lab", pod="high", container="app"
    )
    c = classify_culprit(42, {42: named})
    assert c.kind is CulpritKind.POD
    assert (c.culprit, c.namespace, c.pod, c.container, c.cgroup) == (
        "lab/high/app",
        "lab",
        "high",
        "app",
        "/lab/high",
    )
    unit = Identity(cgroup="/system.slice/cron.service", kind=CgroupKind.SYSTEM)
    assert classify_culprit(43, {43: unit}).kind is CulpritKind.SYSTEM


def test_ambiguous_names_keep_their_path() -> None:
    """Two tracked cgroups with the same names in a pass (a restart while the old cgroup
    lingers) both keep their cgroup label: no two series collide."""
    from dataclasses import replace

    from exporter.identity import ambiguous_names

    old = replace(WEB, cgroup=WEB.cgroup.replace("aa", "a0"))
    amb = ambiguous_names([WEB, old, BATCH, KUBELET, UNNAMED])
    assert amb == {("shop", "web-1", "web")}
    h = RunqHistogram()
    h.counts[0] = 1
    victims = [VictimProbeData(WEB, h, {}), VictimProbeData(old, h.copy(), {})]
    got = samples(expose(list(build_probe_families(victims, IDS, LOADED, None, ambiguous=amb))))
    counts = {lb["cgroup"] for n, lb, _ in got if n.endswith("_count")}
    assert counts == {WEB.cgroup, old.cgroup}
    assert WEB.series_labels() == {"namespace": "shop", "pod": "web-1", "container": "web"}
    assert KUBELET.series_labels() == {"cgroup": KUBELET.cgroup}


def test_antagonists_rank_by_window_and_report_the_cumulative_total() -> None:
    from exporter.probe.blame import antagonists

    blame: dict[int, dict[CulpritKey, float]] = {
        10: {20: 6.0, 40: 1.0, 10: 9.0, CULPRIT_IDLE: 5.0, 12345: 4.0},  # self, idle, unknown
        40: {20: 1.0, 1: 3.0},  # kubelet as a victim: batch and the kernel
        20: {10: 0.5},
    }
    caused = {20: 100.0, 1: 3.0, 40: 50.0, 10: 0.5, 12345: 9.0}
    got = antagonists(blame, caused, IDS, top_k=3)
    assert [(a.culprit.culprit, a.window_s, a.total_s) for a in got] == [
        ("batch/crunch-7/crunch", 7.0, 100.0),
        ("kernel", 3.0, 3.0),
        ("system.slice/kubelet.service", 1.0, 50.0),
    ]
    # The bound: K culprits at most; web (0.5 s over the window) is left out, not zeroed.
    assert [a.culprit.culprit for a in antagonists(blame, caused, IDS, top_k=1)] == [
        "batch/crunch-7/crunch"
    ]
    # Ranked in the window but no cumulative count (cannot happen from one probe's
    # deltas, but a culprit without a counter is left out rather than exported as 0).
    assert antagonists({10: {20: 1.0}}, {}, IDS) == []


def test_antagonist_counter_family() -> None:
    victims = [
        VictimProbeData(WEB, None, {20: 6.0, 40: 1.0, 10: 2.0}, cgroup_id=10),
        VictimProbeData(KUBELET, None, {20: 2.0}, cgroup_id=40),
    ]
    text = expose(
        list(
            build_probe_families(
                victims, IDS, LOADED, None, caused_total_s={20: 42.0, 40: 1.5, 10: 7.0}
            )
        )
    )
    got = [(lb["culprit"], v) for n, lb, v in samples(text) if n.startswith("contention_antag")]
    assert got == [("batch/crunch-7/crunch", 42.0), ("system.slice/kubelet.service", 1.5)]
    assert "# TYPE contention_antagonist_wait_seconds_total counter" in text


def _replica(n: int, workload: str = "Deployment/crunch", ns: str = "batch") -> Identity:
    return Identity(
        cgroup=f"/kubepods.slice/x/cri-containerd-{n:02x}.scope",
        kind=CgroupKind.CONTAINER,
        namespace=ns,
        pod=f"crunch-5d8c7-{n}",
        container="crunch",
        pod_uid=f"{n:08d}-0000-0000-0000-000000000000",
        workload=workload,
    )


def test_workload_shares_sum_its_containers_gone_or_running() -> None:
    """A workload's share is its containers' summed share of the victim's wait (the
    names of gone ones are in the identities while their blame counts); the victim's
    own wait behind itself is nobody's; keys with no workload or no name are left out."""
    from dataclasses import replace

    from exporter.probe.blame import workload_shares

    ids = {**IDS, 101: _replica(1), 102: _replica(2), 103: _replica(3), 104: _replica(4, ns="x")}
    ids[105] = replace(_replica(5), workload="Pod/crunch-5")
    ids[10] = replace(WEB, workload="Deployment/crunch", namespace="batch")
    blame: dict[CulpritKey, float] = {
        101: 2.0,
        102: 3.0,
        103: 1.0,
        104: 4.0,  # same workload name in another namespace: another workload
        105: 1.0,
        10: 5.0,  # the victim itself (a replica of the same workload): not counted
        20: 2.0,  # named, no workload
        12345: 1.0,  # unknown
        CULPRIT_IDLE: 2.0,
    }
    got = workload_shares(blame, ids, victim_id=10)
    # x/Deployment/crunch has one container blamed: that container alone, not a workload
    assert [(w.ref, w.wait_s, w.members) for w in got] == [
        ("batch/Deployment/crunch", 6.0, (101, 102, 103)),
    ]
    assert got[0].share == pytest.approx(6.0 / 21.0)
    assert got[0].labels() == {
        "culprit_kind": "workload",
        "culprit": "batch/Deployment/crunch",
        "culprit_namespace": "batch",
        "culprit_workload": "Deployment/crunch",
    }
    assert workload_shares({}, ids, 10) == []
    assert workload_shares({CULPRIT_IDLE: 0.0}, ids, 10) == []


def test_top_culprits_share_one_budget_of_k() -> None:
    """Single culprits (any kind, the victim itself included) and workloads of two or
    more containers rank together by share, ties by name: the K largest are exported,
    split between the two families, never K of each."""
    from dataclasses import replace

    from exporter.probe.blame import top_culprits

    ids = {**IDS, 101: _replica(1), 102: _replica(2), 103: _replica(3), 104: _replica(4, ns="x")}
    ids[106] = replace(_replica(6, ns="a"), workload="Deployment/api")
    ids[107] = replace(_replica(7, ns="a"), workload="Deployment/api")
    blame: dict[CulpritKey, float] = {
        101: 2.0,
        102: 3.0,
        103: 1.0,  # batch/Deployment/crunch: 6.0
        106: 2.5,
        107: 2.5,  # a/Deployment/api: 5.0, ties with batch/crunch-7/crunch and goes first
        20: 5.0,
        104: 4.0,  # its workload has one container blamed: it ranks alone
        10: 3.5,  # the victim itself: ranks like any single culprit (the rules drop it)
        CULPRIT_IDLE: 3.0,
        40: 3.0,
    }

    def top(k: int) -> tuple[list[str], list[str]]:
        t = top_culprits(blame, ids, 10, k)
        return [b.culprit.culprit for b in t.containers], [w.ref for w in t.workloads]

    assert top(1) == ([], ["batch/Deployment/crunch"])
    assert top(2) == ([], ["batch/Deployment/crunch", "a/Deployment/api"])
    assert top(3) == (["batch/crunch-7/crunch"], ["batch/Deployment/crunch", "a/Deployment/api"])
    # 3.0 three times: batch/crunch-5d8c7-2/crunch < idle < system.slice/kubelet.service
    assert top(7) == (
        [
            "batch/crunch-7/crunch",
            "x/crunch-5d8c7-4/crunch",
            "shop/web-1/web",
            "batch/crunch-5d8c7-2/crunch",
            "idle",
        ],
        ["batch/Deployment/crunch", "a/Deployment/api"],
    )
    every = top_culprits(blame, ids, 10, len(blame) + 2)
    assert len(every.containers) == len(blame) and len(every.workloads) == 2
    # the shares are blame_shares' and workload_shares' own
    assert every.workloads[0].share == pytest.approx(6.0 / 29.5)
    assert every.containers[0].share == pytest.approx(5.0 / 29.5)
    assert top_culprits({}, ids, 10) == top_culprits({CULPRIT_IDLE: 0.0}, ids, 10)
    assert top_culprits({}, ids, 10).containers == ()


def test_workload_family() -> None:
    ids = {**IDS, 101: _replica(1), 102: _replica(2)}
    victims = [VictimProbeData(WEB, None, {101: 3.0, 102: 3.0, 20: 4.0}, cgroup_id=10)]
    got = samples(expose(list(build_probe_families(victims, ids, LOADED, None))))
    wl = [(lb, round(v, 9)) for n, lb, v in got if n == "contention_workload_blame_ratio"]
    assert wl == [
        (
            {
                "namespace": "shop",
                "pod": "web-1",
                "container": "web",
                "culprit_kind": "workload",
                "culprit": "batch/Deployment/crunch",
                "culprit_namespace": "batch",
                "culprit_workload": "Deployment/crunch",
            },
            0.6,
        )
    ]
