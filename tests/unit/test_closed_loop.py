"""labs.closed_loop on fixture directories: what a suggested value becomes in the
cgroup files (v1 and v2, as the kubelet writes them), in the pod spec (the labs'
metadata file), and when a resized culprit no longer fits beside its victim. The real
kernel runs are tests/integration/test_closed_loop_kernel.py and tests/vm."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from labs.cgroups import LabCgroup, LabError, LabLayout, kubelet_shares, shares_to_weight
from labs.closed_loop import (
    NoValue,
    apply_finding,
    judged_clear_at,
    memory_qos_high,
)
from labs.memory import MIB, get_memory_lab
from labs.scenarios import LabRun, MetadataFile, get_lab


def _layout(tmp: Path, mode: str) -> LabLayout:
    v2 = tmp / "v2"
    v2.mkdir()
    if mode == "hybrid":
        (tmp / "cpu").mkdir()
        return LabLayout("hybrid", str(v2), str(tmp / "cpu"), False)
    return LabLayout("v2", str(v2), None, True)


FILES = ("cpu.cfs_period_us", "cpu.cfs_quota_us", "cpu.shares", "cpu.max", "cpu.weight")


def _fake(name: str, layout: LabLayout, parent: LabCgroup | None = None) -> LabCgroup:
    """A lab cgroup as plain directories, with the files the kernel would create."""
    cg = LabCgroup(name, layout, parent=parent)
    for d in (cg.v2_dir, cg.v1_cpu_dir):
        if d is not None:
            Path(d).mkdir()
            for f in (*FILES, "memory.max", "memory.high"):
                (Path(d) / f).write_text("")
    return cg


def _run(tmp: Path, mode: str, name: str) -> LabRun:
    layout = _layout(tmp, mode)
    lab = get_lab(name)
    meta = MetadataFile(str(tmp / "metadata.yaml"))
    meta.add(lab.metadata_entries())
    run = LabRun(lab, 10.0, metadata=meta, layout=layout)
    run.parent = _fake(lab.parent_name, layout)
    for b in lab.boxes:
        cg = run.cgroups[b.role] = _fake(b.role, layout, run.parent)
        cg.set_cpu(quota_cores=b.cpu_limit, shares=b.shares)
    return run


def _row(
    run: Any, kind: str, victim: str, setting: str, value: int | None, **kw: Any
) -> dict[str, Any]:
    target = "culprit" if kw.get("culprit") else "victim"
    return {
        "kind": kind,
        "victim": {"cgroup": run.lab.cgroup_path(victim)},
        "culprit": {"cgroup": run.lab.cgroup_path(kw["culprit"])} if kw.get("culprit") else None,
        "suggestion": {
            "target": target,
            "setting": setting,
            "value": value,
            "unit": "millicores",
            "reason": kw.get("reason"),
        },
    }


@pytest.mark.parametrize("mode", ["hybrid", "v2"])
def test_a_cpu_limit_becomes_the_quota_and_the_pod_spec(tmp_path: Path, mode: str) -> None:
    run = _run(tmp_path, mode, "throttled-steady")
    a = apply_finding(run, _row(run, "cpu-throttled", "service", "cpu_limit", 834))
    assert (a.target, a.value, a.rescheduled) == ("service", 834, None)
    want = {"cpu.cfs_quota_us": "83400"} if mode == "hybrid" else {"cpu.max": "83400 100000"}
    assert a.written == want
    assert run.metadata is not None
    entry = run.metadata.read()[run.lab.cgroup_path("service")]
    assert entry["cpu_limit"] == "834m" and entry["cpu_request"] == "300m"


@pytest.mark.parametrize(("mode", "value"), [("hybrid", 930), ("v2", 930), ("hybrid", 800)])
def test_a_culprit_request_becomes_its_weight_and_may_not_fit(
    tmp_path: Path, mode: str, value: int
) -> None:
    run = _run(tmp_path, mode, "noisy-neighbor")
    row = _row(run, "noisy-neighbor", "victim", "cpu_request", value, culprit="greedy")
    a = apply_finding(run, row)
    shares = kubelet_shares(value / 1000)
    want = (
        {"cpu.shares": str(shares)}
        if mode == "hybrid"
        else {"cpu.weight": str(shares_to_weight(shares))}
    )
    assert (a.victim, a.target, a.written) == ("victim", "greedy", want)
    # The victim's 100m and the culprit's new request share one CPU (1000m).
    assert a.rescheduled == ("greedy" if value + 100 > 1000 else None)
    assert run.metadata is not None
    assert run.metadata.read()[run.lab.cgroup_path("greedy")]["cpu_request"] == f"{value}m"


def test_a_memory_limit_raises_max_and_memory_qos_high(tmp_path: Path) -> None:
    layout = _layout(tmp_path, "v2")
    lab = get_memory_lab("memory-limit-thrash")
    meta = MetadataFile(str(tmp_path / "metadata.yaml"))
    parent = _fake(lab.parent_name, layout)
    cgs = {b.role: _fake(b.role, layout, parent) for b in lab.boxes}
    run = SimpleNamespace(lab=lab, cgroups=cgs, metadata=meta)
    a = apply_finding(run, _row(run, "memory-limit-thrash", "app", "memory_limit", 160))
    high = memory_qos_high(32 * MIB, 160 * MIB)
    assert high == (32 * MIB + int(0.9 * 128 * MIB)) // 4096 * 4096
    assert a.written == {"memory.max": str(160 * MIB), "memory.high": str(high)}
    assert meta.read()[lab.cgroup_path("app")]["memory_limit"] == "160Mi"


def test_no_number_nothing_applied(tmp_path: Path) -> None:
    run = _run(tmp_path, "hybrid", "throttled-steady")
    row = _row(run, "cpu-throttled", "service", "cpu_limit", None, reason="fits its limit")
    with pytest.raises(NoValue, match="fits its limit"):
        apply_finding(run, row)
    cg = run.cgroups["service"]
    assert cg.read("cpu.cfs_quota_us", "cpu") == "30000"


def test_settings_without_a_closed_loop_and_strangers_are_refused(tmp_path: Path) -> None:
    run = _run(tmp_path, "hybrid", "throttled-steady")
    with pytest.raises(LabError, match="cpu_capacity"):
        apply_finding(run, _row(run, "cpu-contended", "service", "cpu_capacity", 500))
    row = _row(run, "cpu-throttled", "service", "cpu_limit", 500)
    row["victim"] = {"cgroup": "/system.slice/other.service"}
    with pytest.raises(LabError, match="not a container of lab"):
        apply_finding(run, row)


@pytest.mark.parametrize(
    ("applied_at", "window", "clear_at"),
    [(6000.0, 1, 6060.0), (6002.0, 1, 6120.0), (6002.0, 2, 6180.0), (6059.5, 2, 6180.0)],
)
def test_the_window_after_a_fix(applied_at: float, window: int, clear_at: float) -> None:
    assert judged_clear_at(applied_at, window) == clear_at
