"""The self-test's parts that need no kernel: verdicts, exit codes, the kernel-truth
arithmetic, the probe's cost and the stale-tree cleanup (the run itself is
tests/integration/test_selftest_kernel.py; the endpoint and metrics:
test_selftest_endpoint.py)."""

from __future__ import annotations

import dataclasses
import errno
import json
import os
import time
from pathlib import Path

import pytest

from exporter.cgroupfs.mode import CgroupMode, NodeLayout
from exporter.findings.thresholds import load_thresholds
from exporter.probe.model import ProgramStats
from exporter.selftest import hosting
from exporter.selftest.bpfstats import ns_per_switch
from exporter.selftest.cgroups import (
    STALE_AFTER_S,
    Placement,
    SelftestCgroups,
    place,
    remove_stale,
    remove_tree,
)
from exporter.selftest.report import Check, Report, summary
from exporter.selftest.run import selftest_thresholds
from exporter.selftest.truth import CpuTruth, Reading, cpu_busy_s, usage_s

V2 = NodeLayout(CgroupMode.V2, True, "", "/nonexistent/cgroup", None, None, True, "", True)


def test_a_report_passes_only_when_no_check_failed() -> None:
    r = Report(checks=[Check("a", "x", ok=True), Check("b", "y", skipped="skipped: no quota")])
    assert r.passed and r.exit_code == hosting.EXIT_PASS
    r.checks.append(Check("c", "z", ok=False))
    assert not r.passed and r.exit_code == hosting.EXIT_FAIL
    r2 = Report(checks=[Check("a", "x", ok=True)], problems=["the bully load process died"])
    assert not r2.passed


def test_a_report_survives_json_and_its_summary_says_everything() -> None:
    r = Report(
        node={"cgroups": "v2"},
        probe_loaded=True,
        probe="core loader",
        checks=[Check("noisy-neighbor", "names the bully", True, "seen", 61.0)],
        blame_share=0.93,
        truth_share=0.97,
        time_to_first_finding_s=61.0,
        probe_ns_per_switch=240.0,
        bpf_stats="bpf_enable_stats",
    )
    back = Report.from_dict(json.loads(json.dumps(r.to_dict())))
    assert back == r
    text = summary(r)
    assert text.startswith("contention-exporter selftest: PASS")
    for part in ("93% vs", "97%", "4.0 points apart", "61 s", "240 ns", "[  ok] noisy-neighbor"):
        assert part in text, part
    assert len(text.splitlines()) <= 24  # one screen


@pytest.mark.parametrize(
    ("mode", "psi", "code"),
    [
        (CgroupMode.V1, True, hosting.EXIT_CGROUP_V1),
        (CgroupMode.NONE, False, hosting.EXIT_CGROUP_V1),
    ],
)
def test_a_node_without_cgroup2_cannot_host_it(mode: CgroupMode, psi: bool, code: int) -> None:
    layout = dataclasses.replace(V2, mode=mode, v2_root=None, psi=psi, reason="none")
    with pytest.raises(hosting.CannotHost) as e:
        hosting.check_layout(layout)
    assert e.value.code == code and "cgroup" in str(e.value)


def test_a_node_without_psi_cannot_host_it() -> None:
    layout = dataclasses.replace(V2, psi=False, psi_reason="/proc/pressure/cpu is missing")
    with pytest.raises(hosting.CannotHost) as e:
        hosting.check_layout(layout)
    assert e.value.code == hosting.EXIT_UNSUPPORTED and "pressure/cpu" in str(e.value)


@pytest.mark.parametrize(
    ("err", "code", "words"),
    [
        (errno.EROFS, hosting.EXIT_READ_ONLY, "read-only"),
        (errno.EACCES, hosting.EXIT_NO_PERMISSION, "no permission"),
        (errno.EPERM, hosting.EXIT_NO_PERMISSION, "no permission"),
    ],
)
def test_mkdir_errors_become_their_own_exit_codes(err: int, code: int, words: str) -> None:
    with pytest.raises(hosting.CannotHost) as e:
        hosting.check_mkdir_error(OSError(err, os.strerror(err)), "/sys/fs/cgroup/x")
    assert e.value.code == code and words in str(e.value) and "/sys/fs/cgroup" in str(e.value)
    hosting.check_mkdir_error(OSError(errno.ENOSPC, "full"), "/x")  # not ours to explain


def test_the_selftest_window_is_one_minute_and_nothing_else_changes() -> None:
    base = load_thresholds(None)
    th = selftest_thresholds(base)
    assert (th.window_minutes, th.sustain_minutes) == (1, 1)
    assert (
        dataclasses.replace(
            th, window_minutes=base.window_minutes, sustain_minutes=base.sustain_minutes
        )
        == base
    )


def test_kernel_truth_is_the_bullys_share_of_the_cpu_time_not_the_victims(tmp_path: Path) -> None:
    (tmp_path / "stat").write_text(
        "cpu  1 2 3 4 5 6 7 8 0 0\ncpu0 10 0 0 500 0 0 0 0 0 0\ncpu1 100 0 50 9 1 2 3 4 0 0\n"
    )
    hz = os.sysconf("SC_CLK_TCK")
    assert cpu_busy_s(1, str(tmp_path)) == pytest.approx((100 + 50 + 2 + 3 + 4) / hz)
    with pytest.raises(ValueError, match="cpu7"):
        cpu_busy_s(7, str(tmp_path))
    (tmp_path / "cpu.stat").write_text("usage_usec 2500000\nuser_usec 2000000\n")
    assert usage_s(str(tmp_path)) == 2.5
    t = CpuTruth.between(Reading(0.0, 1.0, 2.0, 10.0), Reading(10.0, 2.0, 10.0, 19.5))
    assert (t.victim_cores, t.bully_cores, t.cpu_busy_cores) == (0.1, 0.8, 0.95)
    assert t.bully_share == pytest.approx(0.8 / 0.85)
    assert CpuTruth.between(Reading(0, 0, 0, 0), Reading(1, 1, 0, 1)).bully_share is None


def test_probe_cost_is_all_programs_per_context_switch() -> None:
    a = {"sched_switch": ProgramStats(1000, 10), "sched_wakeup": ProgramStats(0, 0)}
    b = {"sched_switch": ProgramStats(21000, 110), "sched_wakeup": ProgramStats(9000, 60)}
    assert ns_per_switch(a, b, 100) == 290.0
    assert ns_per_switch(a, a, 100) is None  # statistics were not counting
    assert ns_per_switch(a, b, 0) is None


def test_stale_trees_are_removed_and_nothing_else(tmp_path: Path) -> None:
    old = time.time() - STALE_AFTER_S - 60
    for name in ("contention-selftest-1", "contention-selftest-2", "kubepods", "other-1"):
        (tmp_path / name / "victim").mkdir(parents=True)
    for name in ("contention-selftest-1", "kubepods"):
        os.utime(tmp_path / name, (old, old))
    layout = dataclasses.replace(V2, v2_root=str(tmp_path))
    assert remove_stale(layout) == [str(tmp_path / "contention-selftest-1")]
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "contention-selftest-2",  # young: a self-test may be starting in it
        "kubepods",
        "other-1",
    ]
    assert remove_tree(str(tmp_path / "contention-selftest-2")) == []
    assert not (tmp_path / "contention-selftest-2").exists()


def _proc_self(tmp_path: Path, root: str, mount_root: str, own: str) -> str:
    d = tmp_path / "self"
    d.mkdir(parents=True)
    (d / "mountinfo").write_text(
        "31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755\n"
        f"41 31 0:38 {mount_root} {root} rw,relatime - cgroup2 cgroup2 rw\n"
    )
    (d / "cgroup").write_text(f"1:cpu:/\n0::{own}\n")
    return str(d)


def test_the_selftest_nests_below_its_own_cgroup_in_a_cgroup_namespace(tmp_path: Path) -> None:
    """A hostPath mount of the node's tree seen from a container's cgroup namespace
    (mountinfo root /../..): the self-test's cgroups go below the container's own."""
    tree = tmp_path / "cgroup"
    for d in ("kubepods.slice/pod-a.slice/cri-x.scope", "kubepods.slice/pod-b.slice/cri-y.scope"):
        (tree / d).mkdir(parents=True)
        (tree / d / "cgroup.procs").write_text("")
    (tree / "kubepods.slice/pod-b.slice/cri-y.scope/cgroup.procs").write_text("1\n42\n")
    proc = _proc_self(tmp_path, str(tree), "/../../..", "/")
    got = place(str(tree), proc, pid=42)
    assert got.nested and got.base == "/kubepods.slice/pod-b.slice/cri-y.scope"
    cg = SelftestCgroups(
        dataclasses.replace(V2, v2_root=str(tree)), "contention-selftest-42", (), got
    )
    assert (
        cg.path("victim") == "/kubepods.slice/pod-b.slice/cri-y.scope/contention-selftest-42/victim"
    )
    assert cg.roots == [str(tree / "kubepods.slice/pod-b.slice/cri-y.scope/contention-selftest-42")]
    assert not cg.weights_supported()  # no cpu in the container's cgroup.subtree_control
    with pytest.raises(hosting.CannotHost) as e:  # not found where the namespace is
        place(str(tree), proc, pid=7)
    assert e.value.code == hosting.EXIT_NO_PERMISSION


def test_the_selftest_stays_at_the_root_the_namespace_reaches(tmp_path: Path) -> None:
    tree = tmp_path / "cgroup"
    tree.mkdir()
    for own in ("/", "/system.slice/x.service"):
        proc = _proc_self(tmp_path / own.replace("/", "_"), str(tree), "/", own)
        assert place(str(tree), proc) == Placement()
    hidden = _proc_self(tmp_path / "h", str(tree / "elsewhere"), "/", "/")
    assert place(str(tree), hidden) == Placement()  # no cgroup2 mount there: as before
