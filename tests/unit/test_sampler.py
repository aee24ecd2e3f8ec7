"""Sampler on small pure-v2 trees built in tmp_path: deltas, minute folds, skips."""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path
from typing import Any

import pytest

from exporter.cgroupfs import mode
from exporter.cgroupfs.procfs import USER_HZ
from exporter.findings import evaluate, load_thresholds
from exporter.findings.model import Kind
from exporter.identity import Identity
from exporter.metadata_file import FileIdentityResolver, MetadataFileError
from exporter.sampler import Sampler
from tests.support.stand_ins import FakeProbe

# No bound but against hangs (no server, clock or subprocess bound): scripts/test.sh
# runs these at idle priority (docs/testing.md).
pytestmark = [pytest.mark.untimed, pytest.mark.timeout(900)]

PROC_STAT = """cpu  100 0 50 1000 5 0 1 7 0 0
cpu0 50 0 25 500 2 0 1 3 0 0
cpu1 50 0 25 500 3 0 0 4 0 0
intr 0
ctxt {ctxt}
btime 1700000000
processes 10
procs_running 2
procs_blocked 0
"""
PSI = (
    "some avg10=0.00 avg60=0.00 avg300=0.00 total={some}\n"
    "full avg10=0.00 avg60=0.00 avg300=0.00 total={full}\n"
)


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


class Tree:
    """A fake host root with a pure cgroup v2 hierarchy."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.cg = root / "sys/fs/cgroup"
        write(self.cg / "cgroup.controllers", "cpu memory io\n")
        write(self.cg / "cpu.pressure", PSI.format(some=0, full=0))
        write(root / "proc/meminfo", "MemTotal:       2048000 kB\n")
        for res in ("cpu", "memory", "io"):
            write(root / f"proc/pressure/{res}", PSI.format(some=0, full=0))
        self.ctxt(0)

    def ctxt(self, n: int) -> None:
        write(self.root / "proc/stat", PROC_STAT.format(ctxt=n))

    def cgroup(
        self,
        path: str,
        usage: int = 0,
        periods: int = 0,
        throttled: int = 0,
        throttled_usec: int = 0,
        cpu_some: int = 0,
        cpu_max: str = "max 100000",
        memory_max: str = "max",
        memory_current: int = 1000,
        refaults: int = 0,
        mem_events_max: int = 0,
    ) -> Path:
        d = self.cg / path.lstrip("/")
        write(
            d / "cpu.stat",
            f"usage_usec {usage}\nuser_usec {usage}\nsystem_usec 0\nnr_periods {periods}\n"
            f"nr_throttled {throttled}\nthrottled_usec {throttled_usec}\nnr_bursts 0\n"
            "burst_usec 0\n",
        )
        write(d / "cpu.max", cpu_max + "\n")
        write(d / "cpu.weight", "100\n")
        write(d / "cpu.pressure", PSI.format(some=cpu_some, full=cpu_some // 2))
        write(d / "memory.current", f"{memory_current}\n")
        write(d / "memory.max", memory_max + "\n")
        write(d / "memory.high", "max\n")
        write(
            d / "memory.stat",
            f"anon 600\nfile 400\ninactive_file 300\nactive_file 100\n"
            f"workingset_refault_anon 0\nworkingset_refault_file {refaults}\npgmajfault 2\n",
        )
        write(
            d / "memory.events",
            f"low 0\nhigh 0\nmax {mem_events_max}\noom 0\noom_kill 0\noom_group_kill 0\n",
        )
        write(d / "memory.pressure", PSI.format(some=0, full=0))
        write(d / "io.pressure", PSI.format(some=0, full=0))
        return d

    def sampler(self, **kw: object) -> Sampler:
        facts = mode.detect(str(self.root / "sys"), str(self.root / "proc"))
        return Sampler(facts, procfs=str(self.root / "proc"), **kw)  # type: ignore[arg-type]


@pytest.fixture
def tree(tmp_path: Path) -> Tree:
    return Tree(tmp_path)


def by_path(snap: object) -> dict[str, object]:
    return {c.identity.cgroup: c for c in snap.containers}  # type: ignore[attr-defined]


def test_tracks_units_and_leaves_not_slices(tree: Tree) -> None:
    tree.cgroup("/system.slice/cron.service")
    tree.cgroup("/system.slice")
    tree.cgroup("/mygroup")
    snap = tree.sampler().run_once(now=1000.0)
    assert set(by_path(snap)) == {"/system.slice/cron.service", "/mygroup"}


def test_entitlement_basis_and_limits(tree: Tree) -> None:
    tree.cgroup("/limited", cpu_max="20000 100000", memory_max="1048576")
    tree.cgroup("/free")
    snap = tree.sampler().run_once(now=1000.0)
    c = by_path(snap)
    lim, free = c["/limited"], c["/free"]
    assert lim.cpu_limit_cores == pytest.approx(0.2)  # type: ignore[attr-defined]
    assert lim.cpu_entitlement.basis == "limit"  # type: ignore[attr-defined]
    assert lim.memory_entitlement.value == 1048576  # type: ignore[attr-defined]
    assert free.cpu_entitlement.basis == "node"  # type: ignore[attr-defined]
    assert free.cpu_entitlement.value == 2  # type: ignore[attr-defined]
    assert free.memory_entitlement.value == 2048000 * 1024  # type: ignore[attr-defined]
    assert free.working_set_bytes == 700  # type: ignore[attr-defined]


def test_deltas_fold_into_complete_minutes(tree: Tree) -> None:
    s = tree.sampler(window_minutes=5)
    tree.cgroup("/a")
    s.run_once(now=600.0)  # baseline in minute 600
    tree.cgroup(
        "/a",
        usage=2_000_000,
        periods=100,
        throttled=30,
        throttled_usec=500_000,
        cpu_some=10_000_000,
        refaults=50,
        mem_events_max=3,
    )
    tree.ctxt(1200)
    s.run_once(now=630.0)
    (cw,) = s.window().containers.values()
    assert len(cw.folds) == 0  # minute 600 is not complete yet
    tree.cgroup(
        "/a",
        usage=3_000_000,
        periods=150,
        throttled=30,
        throttled_usec=500_000,
        cpu_some=10_000_000,
        refaults=50,
        mem_events_max=3,
    )
    s.run_once(now=660.0)  # lands in minute 660: minute 600 is complete
    w = s.window()
    (cw,) = w.containers.values()
    (fold,) = cw.folds
    assert fold.minute == 600
    assert fold.seconds == pytest.approx(30.0)
    assert fold.cpu_usage_s == pytest.approx(2.0)
    assert (fold.periods, fold.throttled_periods) == (100, 30)
    assert fold.throttled_s == pytest.approx(0.5)
    assert fold.cpu_some_s == pytest.approx(10.0)
    assert fold.ratio(fold.cpu_some_s) == pytest.approx(10 / 30)
    assert fold.refaults == 50
    assert fold.mem_events["max"] == 3
    (nf,) = w.node
    assert nf.context_switches == 1200


def test_sampled_seconds_and_first_seen(tree: Tree) -> None:
    """contention_sampled_seconds_total counts the time the deltas cover; the window
    remembers when the cgroup was first seen (the evaluator's young-series gate)."""
    s = tree.sampler()
    tree.cgroup("/a")
    snap = s.run_once(now=605.0)
    assert snap.containers[0].sampled_s == 0.0  # first sight: a baseline
    s.run_once(now=610.0)
    tree.cgroup("/b")  # appears later: its own clock
    s.run_once(now=625.0)
    snap = s.run_once(now=640.0)
    by = {c.identity.cgroup: c for c in snap.containers}
    assert by["/a"].sampled_s == pytest.approx(35.0)
    assert by["/b"].sampled_s == pytest.approx(15.0)
    w = s.window()
    first = {cw.identity.cgroup: cw.first_seen for cw in w.containers.values()}
    assert first == {"/a": 605.0, "/b": 625.0}
    s.run_once(now=630.0)  # the wall clock stepped back: the counter must not
    snap = s.run_once(now=631.0)
    assert {c.identity.cgroup: c.sampled_s for c in snap.containers}["/a"] == pytest.approx(36.0)


def test_counter_reset_that_holds_is_a_fresh_baseline(tree: Tree) -> None:
    """A counter that goes back and stays back (a v1 controller recreated under the
    same path) is refused STRIKES - 1 times, then taken as the new baseline."""
    s = tree.sampler()
    tree.cgroup("/a", usage=5_000_000)
    s.run_once(now=600.0)
    tree.cgroup("/a", usage=1_000)
    for now in (610.0, 620.0):  # refused: the window keeps the old baseline
        snap = s.run_once(now=now)
        assert by_path(snap) == {}
        assert [(x.path, x.reason) for x in snap.lost] == [("/a", "implausible")]
        assert "usage_usec went backwards (5000000 -> 1000)" in snap.lost[0].detail
    snap = s.run_once(now=630.0)
    assert set(by_path(snap)) == {"/a"}
    assert snap.skipped_total["implausible"] == 2
    tree.cgroup("/a", usage=2_001_000)
    s.run_once(now=640.0)
    s.run_once(now=670.0)
    (cw,) = s.window().containers.values()
    assert cw.folds[0].cpu_usage_s == pytest.approx(2.0)  # from the new baseline only


@pytest.mark.parametrize(
    ("transient", "why"),
    [
        ({"usage": 1_000}, "usage_usec went backwards"),
        ({"usage": 200_000_000}, "usage_usec rose by"),  # 200 s in 10 s on 2 CPUs
        (
            {"usage": 1_000_000, "periods": 100, "throttled": 10, "cpu_some": 50_000_000},
            "cpu.pressure some total rose by",  # a stall ratio of 5 in 10 s
        ),
        ({"usage": 1_000_000, "periods": 10, "throttled": 5}, "nr_periods went backwards"),
    ],
)
def test_transient_impossible_counters_fold_nothing(
    tree: Tree, transient: dict[str, Any], why: str
) -> None:
    """A bad read between two good ones is refused, and the next good read folds the
    delta from the last good one: never 200 s of CPU in 10 s, never a stall above 1."""
    s = tree.sampler()
    tree.cgroup("/a", usage=1_000_000, periods=100, throttled=10)
    s.run_once(now=600.0)
    tree.cgroup("/a", **transient)
    snap = s.run_once(now=610.0)
    assert by_path(snap) == {}
    assert snap.lost[0].reason == "implausible"
    assert why in snap.lost[0].detail
    assert snap.collectors["cgroups"].success is False
    tree.cgroup("/a", usage=3_000_000, periods=110, throttled=12, cpu_some=5_000_000)
    snap = s.run_once(now=620.0)
    assert set(by_path(snap)) == {"/a"}
    assert snap.collectors["cgroups"].success is True
    s.run_once(now=660.0)
    (cw,) = s.window().containers.values()
    (minute,) = cw.folds
    assert minute.cpu_usage_s == pytest.approx(2.0)
    assert minute.seconds == pytest.approx(20.0)
    assert minute.ratio(minute.cpu_some_s) == pytest.approx(0.25)
    assert minute.periods == 10


def test_malformed_cgroup_is_skipped_and_counted(
    tree: Tree, caplog: pytest.LogCaptureFixture
) -> None:
    tree.cgroup("/good")
    bad = tree.cgroup("/bad")
    (bad / "cpu.stat").write_text("usage_usec 12\nuser_usec\n")  # truncated
    s = tree.sampler()
    snap = s.run_once(now=600.0)
    assert set(by_path(snap)) == {"/good"}
    assert snap.skipped_total["malformed"] == 1
    assert "bad/cpu.stat" in caplog.text
    snap = s.run_once(now=605.0)
    assert snap.skipped_total["malformed"] == 2
    assert caplog.text.count("bad/cpu.stat") == 1  # logged once, counted every time


def test_vanished_cgroup_is_forgotten(tree: Tree) -> None:
    d = tree.cgroup("/gone")
    tree.cgroup("/stays")
    s = tree.sampler()
    s.run_once(now=600.0)
    for f in d.iterdir():
        f.unlink()
    d.rmdir()
    snap = s.run_once(now=605.0)
    assert set(by_path(snap)) == {"/stays"}
    assert len(s.window().containers) == 1


def test_read_of_removed_cgroup_counts_vanished(tree: Tree) -> None:
    d = tree.cgroup("/racy")
    s = tree.sampler()
    assert s.reader is not None
    real_read = s.reader.read

    def read_then_vanish(path: str):  # type: ignore[no-untyped-def]
        if path == "/racy":
            for f in d.iterdir():
                f.unlink()
            d.rmdir()
        return real_read(path)

    s.reader.read = read_then_vanish  # type: ignore[method-assign]
    snap = s.run_once(now=600.0)
    assert snap.containers == ()
    assert snap.skipped_total["vanished"] == 1


def test_metadata_file_gives_requests_and_opt_out(tree: Tree, tmp_path: Path) -> None:
    tree.cgroup("/victim")
    tree.cgroup("/hidden")
    meta = tmp_path / "meta.yaml"
    meta.write_text(
        "cgroups:\n"
        "  /victim: {namespace: lab, pod: v, container: app, cpu_request: 500m,"
        " memory_request: 1Mi}\n"
        "  /hidden: {opted_out: true}\n"
    )
    s = tree.sampler(resolver=FileIdentityResolver(str(meta)))
    snap = s.run_once(now=600.0)
    (c,) = snap.containers
    ident: Identity = c.identity
    assert (ident.namespace, ident.pod, ident.container) == ("lab", "v", "app")
    assert c.cpu_entitlement.basis == "request" and c.cpu_entitlement.value == 0.5
    assert c.memory_entitlement.value == 1 << 20
    assert any(i.cgroup == "/hidden" for i in s.window().others.values())


@pytest.mark.parametrize(
    "text, message",
    [
        ("cgroups: [1]", "cgroups: must be a mapping of cgroup paths to settings"),
        ("cgroups:\n  nope: {}", "must be a cgroup path starting with '/' (got 'nope')"),
        ("cgroups:\n  /a: {cpu_requests: 1}", "cgroups./a: unknown key(s) cpu_requests"),
        ("cgroups:\n  /a: {cpu_request: lots}", "cgroups./a.cpu_request: must be CPU cores"),
    ],
)
def test_metadata_file_errors_are_clear(tmp_path: Path, text: str, message: str) -> None:
    meta = tmp_path / "meta.yaml"
    meta.write_text(text)
    with pytest.raises(MetadataFileError, match=re.escape(message)):
        FileIdentityResolver(str(meta))


def test_unsupported_node_samples_nothing_and_says_why(tmp_path: Path) -> None:
    os.makedirs(tmp_path / "sys/fs/cgroup/cpu")
    os.makedirs(tmp_path / "proc")
    facts = mode.detect(str(tmp_path / "sys"), str(tmp_path / "proc"))
    snap = Sampler(facts, procfs=str(tmp_path / "proc")).run_once(now=1.0)
    assert not facts.supported and "v1" in facts.reason
    assert snap.containers == ()


def test_probe_deltas_fold_into_owners(tree: Tree) -> None:
    from exporter.probe import RUNQ_SLOTS, BlameCell, ProbeDelta, RunqDelta
    from exporter.window import CULPRIT_IDLE

    victim = tree.cgroup("/system.slice/victim.service")
    sub = victim / "worker"
    sub.mkdir()
    hog = tree.cgroup("/system.slice/hog.service")
    ids = {p: os.stat(p).st_ino for p in (victim, sub, hog)}
    probe = FakeProbe()
    s = tree.sampler(probe=probe)
    s.run_once(now=600.0)
    # The sub-cgroup is tracked in the kernel too, on behalf of its owner.
    assert probe.tracked == {ids[victim], ids[sub], ids[hog]}

    counts = [0] * RUNQ_SLOTS
    counts[3] = 10
    probe.deltas.append(
        ProbeDelta(
            interval_s=10.0,
            runq={ids[sub]: RunqDelta(list(counts), 0.5), ids[victim]: RunqDelta(counts, 0.25)},
            blame={
                ids[sub]: {
                    ids[hog]: BlameCell(0.3, 5),
                    ids[victim]: BlameCell(0.1, 2),  # self-wait: kept
                    CULPRIT_IDLE: BlameCell(0.05, 1),
                }
            },
        )
    )
    snap = s.run_once(now=610.0)
    assert snap.probe is not None
    # Minute 600 is not complete: its blame is "in progress" (the exported share adds it).
    assert s.blame_in_progress()[ids[victim]][ids[hog]] == pytest.approx(0.3)
    hist = snap.probe.runq[ids[victim]]
    assert hist.counts[3] == 20 and hist.sum_s == pytest.approx(0.75)
    s.run_once(now=660.0)  # completes minute 600
    cw = s.window().containers[ids[victim]]
    (fold,) = cw.folds
    assert fold.runq_buckets is not None and fold.runq_buckets[3] == 20
    assert fold.blame_s is not None
    assert dict(fold.blame_s) == {
        ids[hog]: pytest.approx(0.3),
        ids[victim]: pytest.approx(0.1),
        CULPRIT_IDLE: pytest.approx(0.05),
    }
    assert s.blame_in_progress() == {}  # minute 660 has no probe data yet
    hog_fold = s.window().containers[ids[hog]].folds[0]
    assert hog_fold.runq_buckets == [0] * RUNQ_SLOTS  # loaded, no waits: zero, not None

    # The sub-cgroup dies: the owner's cumulative histogram must not go backwards.
    sub.rmdir()
    snap = s.run_once(now=670.0)
    assert snap.probe is not None and snap.probe.runq[ids[victim]].counts[3] == 20


def test_wait_caused_per_culprit_is_cumulative_and_ends_with_the_cgroup(tree: Tree) -> None:
    """contention_antagonist_wait_seconds_total's source: every poll's waits of the
    tracked victims added per culprit (owner-mapped), the victim's own wait left out,
    idle and unattributed wait nobody's; a removed culprit is forgotten."""
    from exporter.probe import BlameCell, ProbeDelta
    from exporter.window import CULPRIT_IDLE, CULPRIT_UNATTRIBUTED

    victim = tree.cgroup("/system.slice/victim.service")
    hog = tree.cgroup("/system.slice/hog.service")
    hog_sub = hog / "worker"
    hog_sub.mkdir()
    ids = {p: os.stat(p).st_ino for p in (victim, hog, hog_sub)}
    probe = FakeProbe()
    s = tree.sampler(probe=probe)
    s.run_once(now=600.0)
    for _ in range(2):
        probe.deltas.append(
            ProbeDelta(
                interval_s=10.0,
                blame={
                    ids[victim]: {
                        ids[hog_sub]: BlameCell(0.25, 5),  # counted for its owner
                        ids[victim]: BlameCell(1.0, 2),  # its own wait: nobody else's
                        CULPRIT_IDLE: BlameCell(1.0, 1),
                        CULPRIT_UNATTRIBUTED: BlameCell(1.0, 1),
                    },
                    ids[hog]: {ids[victim]: BlameCell(0.5, 1)},
                },
            )
        )
    s.run_once(now=610.0)
    snap = s.run_once(now=620.0)
    assert snap.probe is not None
    assert snap.probe.caused == {ids[hog]: 0.5, ids[victim]: 1.0}
    shutil.rmtree(hog)
    snap = s.run_once(now=630.0)
    assert snap.probe is not None and snap.probe.caused == {ids[victim]: 1.0}


def test_exported_blame_share_counts_the_minute_in_progress(tree: Tree) -> None:
    """A young victim's contention_blame_ratio exists before its first minute is
    complete (the rules' young-series gate opens with blame to judge); the evaluator's
    own window keeps to complete minutes."""
    from exporter.agent import Agent, AgentConfig
    from exporter.findings import load_thresholds
    from exporter.probe import BlameCell, ProbeDelta

    victim = tree.cgroup("/system.slice/victim.service")
    hog = tree.cgroup("/system.slice/hog.service")
    ids = {p: os.stat(p).st_ino for p in (victim, hog)}
    probe = FakeProbe()
    cfg = AgentConfig(sysfs=str(tree.root / "sys"), procfs=str(tree.root / "proc"))
    agent = Agent(cfg, load_thresholds(), probe=probe)
    agent.run_pass(now=600.0)
    probe.deltas.append(
        ProbeDelta(interval_s=10.0, blame={ids[victim]: {ids[hog]: BlameCell(0.3, 5)}})
    )
    pub = agent.run_pass(now=610.0)
    v = pub.result
    assert v is not None and v.blame[ids[victim]] == {ids[hog]: pytest.approx(0.3)}
    fams = {m.name: m for m in pub.families()}
    shares = [
        (smp.labels["cgroup"], smp.labels["culprit_cgroup"], smp.value)
        for smp in fams["contention_blame_ratio"].samples
    ]
    assert shares == [("/system.slice/victim.service", "/system.slice/hog.service", 1.0)]
    assert v.window is not None
    assert all(not cw.folds for cw in v.window.containers.values())  # nothing complete yet


def _proc_stat(ctxt: int, steal: int | None) -> str:
    """/proc/stat of a 2-CPU node; ``steal=None``: a kernel before 2.6.11 (7 CPU times)."""
    tail = "" if steal is None else f" {steal} 0 0"
    return (
        f"cpu  100 0 50 1000 5 0 1{tail}\ncpu0 50 0 25 500 2 0 1\ncpu1 50 0 25 500 3 0 0\n"
        f"ctxt {ctxt}\n"
    )


def test_replayed_steal_becomes_a_cpu_steal_finding(tree: Tree) -> None:
    """Replayed /proc/stat and cgroup files through the sampler, the window and the
    evaluator: 30% steal on a 2-CPU node while a container is stalled (PSI some 25%)
    is cpu-steal from the second whole minute, and the container's cpu-contended says
    the CPU went to steal (docs/findings.md#cpu-steal)."""
    th = load_thresholds()
    s = tree.sampler(window_minutes=5)
    for k in range(4):  # passes at 600, 660, ..., 780: minutes 600-720 complete
        steal_ticks = int(k * 36 * USER_HZ)  # 36 CPU-seconds a minute: 30% of 2 CPUs
        write(tree.root / "proc/stat", _proc_stat(1000 * k, steal_ticks))
        tree.cgroup("/a", usage=k * 30_000_000, cpu_some=k * 15_000_000)
        s.run_once(now=600.0 + 60 * k)
    w = s.window()  # minute 600 is the baseline pass alone: no deltas, no steal
    assert [n.steal_s for n in w.node] == [None, pytest.approx(36.0), pytest.approx(36.0)]
    findings = {f.kind: f for f in evaluate(w, th, 780.0)}
    assert set(findings) == {Kind.CPU_CONTENDED, Kind.CPU_STEAL}
    steal = findings[Kind.CPU_STEAL]
    assert steal.culprit is not None and steal.culprit.kind == "hypervisor"
    assert steal.culprit.blame_share == pytest.approx(0.3)
    assert steal.evidence["stalled_containers"] == ["/a"]
    contended = findings[Kind.CPU_CONTENDED]
    assert contended.evidence["node_cpu_steal_ratio"] == [pytest.approx(0.3)] * 2
    assert "steal" in contended.message and "oversubscribed" not in contended.message
    assert "hypervisor" in contended.remediation


def test_proc_stat_without_steal_column_says_so(
    tree: Tree, caplog: pytest.LogCaptureFixture
) -> None:
    """A /proc/stat with 7 CPU times: steal is unknown (None, never 0), the exporter
    says so once, and the evaluator cannot fire cpu-steal; the stall is still judged."""
    th = load_thresholds()
    s = tree.sampler(window_minutes=5)
    for k in range(4):
        write(tree.root / "proc/stat", _proc_stat(1000 * k, None))
        tree.cgroup("/a", usage=k * 30_000_000, cpu_some=k * 15_000_000)
        s.run_once(now=600.0 + 60 * k)
    w = s.window()
    assert [n.steal_s for n in w.node] == [None] * 3
    assert [n.context_switches for n in w.node] == [0, 1000, 1000]  # the rest is read
    assert sum("no steal column" in r.getMessage() for r in caplog.records) == 1
    (f,) = evaluate(w, th, 780.0)
    assert f.kind is Kind.CPU_CONTENDED
    assert f.evidence["node_cpu_steal_ratio"] == [None, None]
    assert "steal" not in f.message and "oversubscribed" in f.remediation


def test_impossible_steal_is_refused_and_its_minute_unknown(
    tree: Tree, caplog: pytest.LogCaptureFixture
) -> None:
    """A steal column that goes backwards, or rises faster than the node's CPUs allow,
    folds nothing: that minute's steal is unknown (None), never a smaller or larger
    number, and the next minute, read well again, is exact."""
    s = tree.sampler(window_minutes=5)
    ticks = [1000, 1200, 500, 1400, 1600, 1800, 2000, 2200]  # 2 s per 10 s pass
    ticks += [2200 + 100_000, 2600, 2800, 3000, 3200, 3400, 3600]  # 1,000 s in 10 s
    ticks += [3600 + 200 * k for k in range(1, 7)]
    for k, t in enumerate(ticks):  # passes 600 .. 800, every 10 s
        write(tree.root / "proc/stat", _proc_stat(1000 * k, t))
        tree.cgroup("/a", usage=k * 5_000_000)
        s.run_once(now=600.0 + 10 * k)
    w = s.window()
    assert [n.minute for n in w.node] == [600, 660, 720]
    assert [n.steal_s for n in w.node] == [None, None, pytest.approx(12.0)]
    # Only steal is unknown: the node's PSI (flat in the fixture) folds every minute.
    assert [n.cpu_some_s for n in w.node] == [0.0] * 3
    assert [n.seconds for n in w.node] == [50.0, 60.0, 60.0]
    refused = [r.getMessage() for r in caplog.records if "node counter refused" in r.getMessage()]
    assert any("steal went backwards" in m for m in refused)
    assert any("steal rose by" in m for m in refused)


def rmtree(d: Path) -> None:
    for sub in sorted(d.rglob("*"), key=lambda p: len(p.parts), reverse=True):
        sub.rmdir() if sub.is_dir() else sub.unlink()
    d.rmdir()


def test_departed_culprit_keeps_its_name_while_its_blame_counts(tree: Tree) -> None:
    """A culprit container replaced every ~20 s: its blame, polled after its cgroup is
    gone, still names it (and a departed sub-cgroup's blame goes to its owner), in the
    window and the exported shares, until no minute it could be blamed in is left."""
    from exporter.findings import load_thresholds
    from exporter.findings.aggregates import identities
    from exporter.probe import BlameCell, ProbeDelta
    from exporter.probe.blame import blame_shares, unknown_blame_ratio

    victim = tree.cgroup("/system.slice/victim.service")
    job = tree.cgroup("/system.slice/job-1.service")
    sub = job / "worker"
    sub.mkdir()
    ids = {p: os.stat(p).st_ino for p in (victim, job, sub)}
    probe = FakeProbe()
    s = tree.sampler(probe=probe, interval=5.0)
    s.run_once(now=600.0)
    rmtree(job)  # replaced: gone before the next poll brings its last waits
    probe.deltas.append(
        ProbeDelta(
            interval_s=5.0,
            blame={ids[victim]: {ids[job]: BlameCell(0.4, 5), ids[sub]: BlameCell(0.2, 3)}},
        )
    )
    s.run_once(now=605.0)
    s.run_once(now=660.0)  # completes minute 600
    w = s.window()
    assert ids[job] not in w.containers
    names = identities(w)
    assert names[ids[job]].cgroup == "/system.slice/job-1.service"
    (fold,) = w.containers[ids[victim]].folds
    assert fold.blame_s is not None and fold.blame_s[ids[job]] == pytest.approx(0.6)
    assert set(fold.blame_s) == {ids[job]}  # the sub-cgroup's owner
    rows = [fold.blame_s]
    assert unknown_blame_ratio(rows, names) == 0.0
    (share,) = blame_shares(fold.blame_s, names)
    assert share.culprit.culprit == "system.slice/job-1.service"

    # Still named while minute 600 can count in the window (5 minutes, plus the
    # minute before a boundary, plus one pass); forgotten after.
    th = load_thresholds()
    keep = (th.window_minutes + 2) * 60 + 5.0
    s.run_once(now=600.0 + keep)
    assert ids[job] in identities(s.window())
    s.run_once(now=600.0 + keep + 10)
    assert ids[job] not in identities(s.window())


def test_a_gone_workload_member_stays_departed_while_the_window_reaches_it(
    tree: Tree,
) -> None:
    """A workload is judged at earlier minute boundaries with the members that ran
    then (docs/findings.md#no-kind-flip-while-a-finding-decays): a gone member of one
    keeps its minutes, the one it was found gone in included, in ``Window.departed``
    until the window cannot reach them; a gone cgroup of no workload keeps nothing."""
    old = tree.cgroup("/system.slice/backup@1.service")
    tree.cgroup("/system.slice/backup@2.service")
    lone = tree.cgroup("/system.slice/lone.service")
    ids = {p: os.stat(p).st_ino for p in (old, lone)}
    s = tree.sampler(interval=5.0)
    for now in (600.0, 630.0, 660.0, 690.0):
        s.run_once(now=now)
    rmtree(old)
    rmtree(lone)
    s.run_once(now=700.0)
    w = s.window()
    assert ids[old] not in w.containers and ids[lone] not in w.departed
    gone = w.departed[ids[old]]
    assert gone.gone_at == 700.0 and gone.identity.workload == "backup@.service"
    assert [f.minute for f in gone.folds] == [600, 660]  # 660: found gone in it
    minutes = s.window().minutes
    s.run_once(now=700.0 + 60 * (minutes + 1))
    assert ids[old] in s.window().departed
    s.run_once(now=700.0 + 60 * (minutes + 1) + 5)
    assert s.window().departed == {}


def test_state_is_bounded_by_what_exists_under_churn(tree: Tree) -> None:
    """Cgroups come and go (40 alive at a time, 600 over the run): every cache of
    the sampler and of the identity resolver holds what exists, not what existed."""
    from exporter.identity import HostIdentityResolver

    resolver = HostIdentityResolver()
    s = tree.sampler(resolver=resolver)
    alive: list[Path] = []
    for n in range(600):
        alive.append(tree.cgroup(f"/churn-{n}"))
        if len(alive) > 40:
            gone = alive.pop(0)
            for f in gone.iterdir():
                f.unlink()
            gone.rmdir()
        if n % 20 == 0:
            s.run_once(now=600.0 + n)
    s.run_once(now=4000.0)
    assert len(s.window().containers) == 40
    assert resolver.cached() <= 2 * 41 + 2
    assert len(s._classify_cache) + len(s._classify_last) <= 2 * 42 + 4
    assert len(s._tracked_paths) == 40
    assert set(s._warned) <= {"node"}
